"""The guardrails' settings, read once from the ``PARKBRAKE_*`` environment (docs/configuration.md).

The Lambdas read them once per container and ``parkbrake reap`` reads the same variables, so the
CLI and the Lambda decide alike. What each variable holds, its default and its bounds are the rows
of ``guardrails.settings_table``; this module only reads them. Every problem is collected and
reported with the variable's name. It is, with the table, the one place a ``PARKBRAKE_*`` variable
is read (a convention test holds every other module to it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from guardrails import names
from guardrails import settings_table as table
from guardrails.durations import DurationError, format_duration, parse_duration
from guardrails.errors import InputError
from guardrails.settings_table import (
    DATABASE_SECRET_ARN,
    DATABASE_URL,
    DEADLINE_DEAD_LETTER_ARN,
    DEADLINE_GROUP,
    DEADLINE_TARGET_ARN,
    DECISION_BUS,
    MEMBER_ACCOUNTS,
    NOTICES_TABLE,
    POOL_MAX_RUNTIMES,
    REGIONS,
    SCHEDULER_ROLE_ARN,
    SNS_TOPIC_ARN,
    SPOKES_PARAMETER,
    SPOT_ACTION,
    SPOT_ACTIONS,
    STACK,
    TENANTS,
    TUNING,
    Setting,
    SettingValueError,
    Tuning,
)
from guardrails.tenants import tenant_problem

SCHEDULE_GROUP_NAME = re.compile(r"[0-9a-zA-Z_.-]{1,64}")
_ROWS = {row.name: row for row in TUNING}
DEFAULT_MAX_RUNTIME = _ROWS["default_max_runtime"].variable
MAX_EXEMPTION = _ROWS["max_exemption"].variable
MAX_RUNTIME_CEILING = _ROWS["max_runtime_ceiling"].variable
REAP_UNTAGGED = _ROWS["reap_untagged"].variable
STOPPED_RETENTION = _ROWS["stopped_retention"].variable
TERMINATE_STOPPED = _ROWS["terminate_stopped"].variable
DECISION_RETENTION = _ROWS["decision_retention"].variable
WARN_BEFORE = _ROWS["warn_before"].variable
CHAT_WEBHOOK_SECRET_ARN = _ROWS["chat_webhook_secret_arn"].variable
DEFAULT_SPOT_ACTION = SPOT_ACTIONS[0]

__all__ = [
    "CHAT_WEBHOOK_SECRET_ARN", "DATABASE_SECRET_ARN", "DATABASE_URL", "DEADLINE_DEAD_LETTER_ARN",
    "DEADLINE_GROUP", "DEADLINE_TARGET_ARN", "DECISION_BUS", "DECISION_RETENTION", "DEFAULT_MAX_RUNTIME", "MAX_EXEMPTION",
    "MAX_RUNTIME_CEILING", "MEMBER_ACCOUNTS", "NOTICES_TABLE", "POOL_MAX_RUNTIMES", "REAP_UNTAGGED", "REGIONS",
    "SCHEDULER_ROLE_ARN", "SNS_TOPIC_ARN", "SPOKES_PARAMETER", "SPOT_ACTION", "STACK", "STOPPED_RETENTION", "TENANTS", "TERMINATE_STOPPED",
    "WARN_BEFORE", "Settings", "SettingsError", "Tuning", "aws_region", "configured_regions",
    "database_location", "ledger_configured", "process_variable", "setting_from_environment",
    "settings_from_environment",
]  # fmt: skip


class SettingsError(InputError):
    """The environment holds values the guardrails cannot run with; ``problems`` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid guardrail settings:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass(frozen=True, kw_only=True)
class Settings(Tuning):
    """What a guardrail runs with: the table's tunable settings, and what the stack wires in."""

    stack: str | None
    regions: tuple[str, ...]
    pool_max_runtimes: Mapping[str, timedelta] = field(default_factory=dict)
    spot_action: str = DEFAULT_SPOT_ACTION
    sns_topic_arn: str | None = None
    deadline_target_arn: str | None = None
    scheduler_role_arn: str | None = None
    deadline_dead_letter_arn: str | None = None
    # The Scheduler group the deadline, warning and crossing schedules live in (None: the stack's own,
    # names.deadline_schedule_group); a spoke with sweep: spoke names its own (components/org_spoke_parts.py).
    deadline_group: str | None = None
    notices_table: str | None = None
    decision_bus: str | None = None
    # The stack's declared tenants (None: not told, so any valid tenant name): guardrails/tenants.py.
    tenants: frozenset[str] | None = None
    # The organisation's member accounts whose events the hub's meter takes (None: not a hub, the
    # stack's own account only): docs/organisation.md.
    member_accounts: frozenset[str] | None = None
    # The hub's SSM parameter listing the organisation's spokes (None: sweep this account only).
    spokes_parameter: str | None = None

    def require_stack(self) -> str:
        if not self.stack:
            raise SettingsError([f"{STACK}: not set; name the Pulumi stack whose guardrails these are"])
        return self.stack

    def deadline_schedule_group(self) -> str:
        """Where this guardrail arms, moves and deletes its one-time schedules: ``PARKBRAKE_DEADLINE_GROUP``,
        else the stack's own group (which needs the stack)."""
        return self.deadline_group or names.deadline_schedule_group(self.require_stack())


def settings_from_environment(environ: Mapping[str, str]) -> Settings:
    """Parse ``environ`` (``os.environ`` or a test's dict); raise :class:`SettingsError` listing every problem."""
    problems: list[str] = []

    def text(name: str) -> str | None:
        value = environ.get(name, "").strip()
        return value or None

    def arn(name: str) -> str | None:
        value = text(name)
        if value is not None and not value.startswith("arn:"):
            problems.append(f"{name}: {value!r} is not an ARN (arn:aws:...)")
        return value

    tuned = {row.name: _tuned(row, text(row.variable), problems) for row in TUNING}
    regions = _regions(environ, problems)
    spot_action = (text(SPOT_ACTION) or DEFAULT_SPOT_ACTION).lower()
    if spot_action not in SPOT_ACTIONS:
        problems.append(f"{SPOT_ACTION}: {spot_action!r} is neither 'terminate' nor 'stop'")
    ceiling: timedelta = tuned["max_runtime_ceiling"]
    pool_caps = _pool_caps(text(POOL_MAX_RUNTIMES), problems)
    if tuned["warn_before"] >= ceiling:
        problems.append(
            f"{WARN_BEFORE}: {format_duration(tuned['warn_before'])} is not shorter than {MAX_RUNTIME_CEILING} "
            f"({format_duration(ceiling)}); no host could run long enough to be warned"
        )
    problems += _above_ceiling(ceiling, {DEFAULT_MAX_RUNTIME: tuned["default_max_runtime"]}) + _above_ceiling(
        ceiling, {f"{POOL_MAX_RUNTIMES}[{pool}]": cap for pool, cap in pool_caps.items()}
    )
    settings = Settings(
        **tuned,
        stack=text(STACK),
        regions=regions,
        pool_max_runtimes=pool_caps,
        spot_action=spot_action,
        sns_topic_arn=arn(SNS_TOPIC_ARN),
        deadline_target_arn=arn(DEADLINE_TARGET_ARN),
        scheduler_role_arn=arn(SCHEDULER_ROLE_ARN),
        deadline_dead_letter_arn=arn(DEADLINE_DEAD_LETTER_ARN),
        deadline_group=_schedule_group(text(DEADLINE_GROUP), problems),
        notices_table=text(NOTICES_TABLE),
        decision_bus=text(DECISION_BUS),
        tenants=_tenants(text(TENANTS), problems),
        member_accounts=_member_accounts(text(MEMBER_ACCOUNTS), problems),
        spokes_parameter=_parameter_name(text(SPOKES_PARAMETER), problems),
    )
    if problems:
        raise SettingsError(problems)
    return settings


def _tuned(row: Setting, text: str | None, problems: list[str]) -> Any:
    """One row's value: unset, its default (the table's, never one written here)."""
    if text is None:
        return row.default
    try:
        return row.parse(text)
    except SettingValueError as error:
        problems.append(f"{row.variable}: {error}")
        return row.default


def setting_from_environment(row: Setting, environ: Mapping[str, str]) -> Any:
    """One row read alone (the CLI's defaults: ``parkbrake run``'s cap); a bad value raises
    :class:`SettingsError` naming the variable."""
    problems: list[str] = []
    value = _tuned(row, environ.get(row.variable, "").strip() or None, problems)
    if problems:
        raise SettingsError(problems)
    return value


def process_variable(environ: Mapping[str, str], name: str) -> str | None:
    """A variable of ``settings_table.PROCESS`` (a CLI's, a host's or a build's), trimmed; None when unset."""
    if name not in {item.variable for item in table.PROCESS}:
        raise KeyError(f"{name} is not declared in guardrails.settings_table.PROCESS")
    return environ.get(name, "").strip() or None


def database_location(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The ledger database's URL and its Secrets Manager secret's ARN, each None when unset."""
    return (
        environ.get(DATABASE_URL, "").strip() or None,
        environ.get(DATABASE_SECRET_ARN, "").strip() or None,
    )


def configured_regions(environ: Mapping[str, str]) -> str | None:
    """``PARKBRAKE_REGIONS`` as it is written (comma-separated), None when unset."""
    return environ.get(REGIONS, "").strip() or None


def ledger_configured(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` names a ledger database (and so the process needs psycopg at all)."""
    url, secret_arn = database_location(environ)
    return bool(url or secret_arn)


def aws_region(environ: Mapping[str, str]) -> str | None:
    """The process's own region from the standard variables: ``AWS_REGION`` (a Lambda's own, and what the
    CLI documents), else ``AWS_DEFAULT_REGION`` (older tooling). The one fallback every parkbrake process uses.
    """
    return environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None


def _above_ceiling(ceiling: timedelta, caps: Mapping[str, timedelta]) -> list[str]:
    """A default cap above the ceiling would be clamped on every host: refuse it where it is set."""
    return [
        f"{name}: {format_duration(cap)} is above {MAX_RUNTIME_CEILING} ({format_duration(ceiling)}); "
        "lower the cap or raise the ceiling"
        for name, cap in caps.items()
        if cap > ceiling
    ]


def _regions(environ: Mapping[str, str], problems: list[str]) -> tuple[str, ...]:
    configured = [part.strip() for part in environ.get(REGIONS, "").split(",") if part.strip()]
    if configured:
        return tuple(dict.fromkeys(configured))
    own = aws_region(environ)
    if not own:
        problems.append(f"{REGIONS}: not set, and neither is AWS_REGION; name the regions to guard")
        return ()
    return (own,)


def _parameter_name(value: str | None, problems: list[str]) -> str | None:
    """An SSM parameter's name as the hub's stack writes it: a path from the root."""
    if value is not None and not value.startswith("/"):
        problems.append(
            f"{SPOKES_PARAMETER}: {value!r} is not an SSM parameter path (/parkbrake/<stack>/spokes)"
        )
    return value


def _schedule_group(value: str | None, problems: list[str]) -> str | None:
    """A Scheduler group's name as Scheduler takes it: 1 to 64 of ``[0-9a-zA-Z-_.]`` (botocore
    ``scheduler/2021-06-30/service-2.json``, shape ``ScheduleGroupName``)."""
    if value is not None and SCHEDULE_GROUP_NAME.fullmatch(value) is None:
        problems.append(
            f"{DEADLINE_GROUP}: {value!r} is not a schedule group name (1-64 of letters, digits, '-', '_', '.')"
        )
    return value


def _tenants(value: str | None, problems: list[str]) -> frozenset[str] | None:
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    problems += [f"{TENANTS}: {problem}" for name in names if (problem := tenant_problem(name)) is not None]
    return frozenset(names)


def _member_accounts(value: str | None, problems: list[str]) -> frozenset[str] | None:
    if value is None:
        return None
    ids = [item.strip() for item in value.split(",") if item.strip()]
    problems += [
        f"{MEMBER_ACCOUNTS}: {item!r} is not a 12-digit AWS account id"
        for item in ids
        if not (len(item) == 12 and item.isascii() and item.isdigit())
    ]
    return frozenset(ids)


def _pool_caps(value: str | None, problems: list[str]) -> dict[str, timedelta]:
    caps: dict[str, timedelta] = {}
    for entry in (value or "").split(","):
        if not entry.strip():
            continue
        pool, separator, cap = entry.partition("=")
        if not separator or not pool.strip():
            problems.append(f"{POOL_MAX_RUNTIMES}: {entry.strip()!r} is not pool=duration (training=90m)")
            continue
        try:
            caps[pool.strip()] = parse_duration(cap.strip())
        except DurationError as error:
            problems.append(f"{POOL_MAX_RUNTIMES}[{pool.strip()}]: {error}")
    return caps
