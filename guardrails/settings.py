"""The guardrails' settings, read from the ``PARKBRAKE_*`` environment of docs/architecture.md.

The Lambdas read them once per container and ``parkbrake reap`` reads the same variables, so the
CLI and the Lambda decide alike. Every problem is collected and reported with the variable's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from guardrails.durations import DEFAULT_CEILING, DurationError, format_duration, parse_duration
from guardrails.errors import InputError

STACK = "PARKBRAKE_STACK"
REGIONS = "PARKBRAKE_REGIONS"
DEFAULT_MAX_RUNTIME = "PARKBRAKE_DEFAULT_MAX_RUNTIME"
MAX_EXEMPTION = "PARKBRAKE_MAX_EXEMPTION"
MAX_RUNTIME_CEILING = "PARKBRAKE_MAX_RUNTIME_CEILING"
REAP_UNTAGGED = "PARKBRAKE_REAP_UNTAGGED"
SNS_TOPIC_ARN = "PARKBRAKE_SNS_TOPIC_ARN"
DEADLINE_TARGET_ARN = "PARKBRAKE_DEADLINE_TARGET_ARN"
SCHEDULER_ROLE_ARN = "PARKBRAKE_SCHEDULER_ROLE_ARN"
# Where a deadline schedule's failed delivery goes (an SQS queue with an alarm on its depth).
DEADLINE_DEAD_LETTER_ARN = "PARKBRAKE_DEADLINE_DEAD_LETTER_ARN"
# Beyond docs/architecture.md's contracts: per-pool default caps (``training=90m,inference=12h``), used when a host's
# max-runtime tag is missing or unusable, and what to do with a spot host that is due.
POOL_MAX_RUNTIMES = "PARKBRAKE_POOL_MAX_RUNTIMES"
SPOT_ACTION = "PARKBRAKE_SPOT_ACTION"
# The ledger database: a URL, or a Secrets Manager secret (RDS's JSON, or a URL) the Guardrails component sets.
DATABASE_URL = "PARKBRAKE_DATABASE_URL"
DATABASE_SECRET_ARN = "PARKBRAKE_DATABASE_SECRET_ARN"
# The DynamoDB table where the sweep records which findings it has notified, so that a finding about
# the same host reaches people at most once a day (unset: every sweep notifies every finding).
NOTICES_TABLE = "PARKBRAKE_NOTICES_TABLE"
# How long before a host's deadline its owner is warned (a one-time schedule beside the deadline's).
WARN_BEFORE = "PARKBRAKE_WARN_BEFORE"
# The Secrets Manager secret holding a Slack-compatible incoming webhook URL: notices go there too.
CHAT_WEBHOOK_SECRET_ARN = "PARKBRAKE_CHAT_WEBHOOK_SECRET_ARN"
# The EventBridge bus a guardrail without the ledger's database relays its decisions on (unset: they
# are log lines only); the Guardrails component sets it for the reaper and the deadlines of a stack
# with a ledger.
DECISION_BUS = "PARKBRAKE_DECISION_BUS"
# Hosts stopped longer than this are reported with their storage cost; snapshotted and terminated when
# PARKBRAKE_TERMINATE_STOPPED is on.
STOPPED_RETENTION = "PARKBRAKE_STOPPED_RETENTION"
DECISION_RETENTION = "PARKBRAKE_DECISION_RETENTION"
TERMINATE_STOPPED = "PARKBRAKE_TERMINATE_STOPPED"

DEFAULT_MAX_RUNTIME_CEILING = timedelta(hours=24)
DEFAULT_WARN_BEFORE = timedelta(minutes=15)
# How long the decision log keeps a decision. Billing-grade audit wants at least 13 months (a month
# compared with the same month a year before, and a disputed invoice's time to surface): the floor
# is 13 average months (396d), the default 400d that with a few days' margin. Ten years is a ceiling
# past which a value is a typo. The database refuses a retention under the floor too.
DEFAULT_DECISION_RETENTION = timedelta(days=400)
DECISION_RETENTION_FLOOR = timedelta(days=396)
DECISION_RETENTION_CEILING = timedelta(days=3653)
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


class SettingsError(InputError):
    """The environment holds values the guardrails cannot run with; ``problems`` lists each one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid guardrail settings:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Settings:
    stack: str | None
    regions: tuple[str, ...]
    default_max_runtime: timedelta = timedelta(minutes=90)
    max_exemption: timedelta = timedelta(hours=24)
    max_runtime_ceiling: timedelta = DEFAULT_MAX_RUNTIME_CEILING
    reap_untagged: bool = False
    pool_max_runtimes: Mapping[str, timedelta] = field(default_factory=dict)
    spot_action: str = "terminate"
    sns_topic_arn: str | None = None
    deadline_target_arn: str | None = None
    scheduler_role_arn: str | None = None
    deadline_dead_letter_arn: str | None = None
    notices_table: str | None = None
    warn_before: timedelta = DEFAULT_WARN_BEFORE
    chat_webhook_secret_arn: str | None = None
    decision_bus: str | None = None
    stopped_retention: timedelta = timedelta(days=7)
    terminate_stopped: bool = False
    decision_retention: timedelta = DEFAULT_DECISION_RETENTION

    def require_stack(self) -> str:
        if not self.stack:
            raise SettingsError([f"{STACK}: not set; name the Pulumi stack whose guardrails these are"])
        return self.stack


def settings_from_environment(environ: Mapping[str, str]) -> Settings:
    """Parse ``environ`` (``os.environ`` or a test's dict); raise :class:`SettingsError` listing every problem."""
    problems: list[str] = []

    def text(name: str) -> str | None:
        value = environ.get(name, "").strip()
        return value or None

    def duration(
        name: str, default: timedelta, *, ceiling: timedelta = DEFAULT_CEILING, floor: timedelta | None = None
    ) -> timedelta:
        value = text(name)
        if value is None:
            return default
        try:
            return parse_duration(value, ceiling=ceiling, floor=floor)
        except DurationError as error:
            problems.append(f"{name}: {error}")
            return default

    def arn(name: str) -> str | None:
        value = text(name)
        if value is not None and not value.startswith("arn:"):
            problems.append(f"{name}: {value!r} is not an ARN (arn:aws:...)")
        return value

    regions = _regions(environ, problems)
    reap_untagged = _boolean(REAP_UNTAGGED, environ.get(REAP_UNTAGGED, ""), problems)
    terminate_stopped = _boolean(TERMINATE_STOPPED, environ.get(TERMINATE_STOPPED, ""), problems)
    spot_action = (text(SPOT_ACTION) or "terminate").lower()
    if spot_action not in ("terminate", "stop"):
        problems.append(f"{SPOT_ACTION}: {spot_action!r} is neither 'terminate' nor 'stop'")
    ceiling = duration(MAX_RUNTIME_CEILING, DEFAULT_MAX_RUNTIME_CEILING)
    default_max_runtime = duration(DEFAULT_MAX_RUNTIME, timedelta(minutes=90))
    max_exemption = duration(MAX_EXEMPTION, timedelta(hours=24))
    pool_caps = _pool_caps(text(POOL_MAX_RUNTIMES), problems)
    warn_before = duration(WARN_BEFORE, DEFAULT_WARN_BEFORE)
    if warn_before >= ceiling:
        problems.append(
            f"{WARN_BEFORE}: {format_duration(warn_before)} is not shorter than {MAX_RUNTIME_CEILING} "
            f"({format_duration(ceiling)}); no host could run long enough to be warned"
        )
    problems += _above_ceiling(ceiling, {DEFAULT_MAX_RUNTIME: default_max_runtime}) + _above_ceiling(
        ceiling, {f"{POOL_MAX_RUNTIMES}[{pool}]": cap for pool, cap in pool_caps.items()}
    )
    settings = Settings(
        stack=text(STACK),
        regions=regions,
        default_max_runtime=default_max_runtime,
        max_exemption=max_exemption,
        max_runtime_ceiling=ceiling,
        reap_untagged=reap_untagged,
        pool_max_runtimes=pool_caps,
        spot_action=spot_action,
        sns_topic_arn=arn(SNS_TOPIC_ARN),
        deadline_target_arn=arn(DEADLINE_TARGET_ARN),
        scheduler_role_arn=arn(SCHEDULER_ROLE_ARN),
        deadline_dead_letter_arn=arn(DEADLINE_DEAD_LETTER_ARN),
        notices_table=text(NOTICES_TABLE),
        warn_before=warn_before,
        chat_webhook_secret_arn=arn(CHAT_WEBHOOK_SECRET_ARN),
        decision_bus=text(DECISION_BUS),
        stopped_retention=duration(STOPPED_RETENTION, timedelta(days=7)),
        terminate_stopped=terminate_stopped,
        decision_retention=duration(
            DECISION_RETENTION,
            DEFAULT_DECISION_RETENTION,
            ceiling=DECISION_RETENTION_CEILING,
            floor=DECISION_RETENTION_FLOOR,
        ),
    )
    if problems:
        raise SettingsError(problems)
    return settings


def ledger_configured(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` names a ledger database (and so the process needs psycopg at all)."""
    return bool(environ.get(DATABASE_URL, "").strip() or environ.get(DATABASE_SECRET_ARN, "").strip())


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


def _boolean(name: str, value: str, problems: list[str]) -> bool:
    normalized = value.strip().lower()
    if normalized in _TRUE:
        return True
    if normalized not in _FALSE:
        problems.append(f"{name}: {value!r} is not true or false")
    return False


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
