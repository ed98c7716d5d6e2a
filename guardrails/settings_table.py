"""Every guardrail setting, declared once: its environment variable, stack key, type, default and bounds.

:class:`Tuning` is the table. Each of its fields is one row (:class:`Setting`): what a stack may set
under ``parkbrake:guardrails``, the ``PARKBRAKE_*`` variable the Guardrails component puts in every
guardrail Lambda's environment, and what the CLI reads from the same variable. The stack parser
(``stacks.guardrails_config``), the Lambda environment (``components.guardrail_functions``), the
environment reader (``guardrails.settings``) and the docs' table (docs/configuration.md) are all
derived from it, so adding a setting is adding a row here and using it.

:data:`WIRED` lists the variables the stack sets from elsewhere (the stack's name and region, the
pools' caps, the ARNs of what the component made); :data:`PROCESS` the variables a CLI, host or build
process reads that no stack sets. Nothing else names a ``PARKBRAKE_*`` variable it reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import Field, dataclass, field, fields, replace
from datetime import timedelta
from typing import Any, Literal

from guardrails.durations import DEFAULT_CEILING, DurationError, format_duration, parse_duration

Kind = Literal["duration", "boolean", "secret-arn"]
SECRET_ARN = re.compile(r"arn:aws[\w-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+")
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})
_ROW = "parkbrake.setting"


class SettingValueError(ValueError):
    """A value a setting cannot take; the message names what is wrong and how to write it."""


@dataclass(frozen=True)
class Setting:
    """One row of the table: set from the stack file at ``stack_key`` (a path under ``parkbrake:``) and
    read from ``variable``; the Lambdas' rows are the fields of :class:`Tuning` (``name``)."""

    name: str
    variable: str
    stack_key: str
    kind: Kind
    default: Any
    help: str
    floor: timedelta | None = None
    ceiling: timedelta | None = None

    @property
    def duration_ceiling(self) -> timedelta:
        return self.ceiling or DEFAULT_CEILING

    def parse(self, text: str) -> Any:
        """The value of ``text`` as the environment holds it; raise :class:`SettingValueError`."""
        if self.kind == "duration":
            try:
                return parse_duration(text, ceiling=self.duration_ceiling, floor=self.floor)
            except DurationError as error:
                raise SettingValueError(str(error)) from None
        if self.kind == "boolean":
            word = text.strip().lower()
            if word in TRUE_WORDS or word in FALSE_WORDS:
                return word in TRUE_WORDS
            raise SettingValueError(f"{text!r} is not true or false")
        if SECRET_ARN.fullmatch(text.strip()) is None:
            raise SettingValueError(
                f"{text!r} is not a Secrets Manager secret ARN (arn:aws:secretsmanager:...)"
            )
        return text.strip()

    def render(self, value: Any) -> str | None:
        """``value`` as the Lambda environment holds it; None leaves the variable out."""
        if value is None:
            return None
        if self.kind == "duration":
            return format_duration(value)
        if self.kind == "boolean":
            return "true" if value else "false"
        return str(value)


def setting(
    variable: str,
    stack_key: str,
    kind: Kind,
    default: Any,
    help: str,
    *,
    floor: timedelta | None = None,
    ceiling: timedelta | None = None,
) -> Any:
    """A field of :class:`Tuning` carrying its row; the row's ``name`` is the field's, filled in below."""
    row = Setting("", variable, stack_key, kind, default, help, floor, ceiling)
    return field(default=default, metadata={_ROW: row})


# How long the decision log keeps a decision. Billing-grade audit wants at least 13 months (a month
# compared with the same month a year before, and a disputed invoice's time to surface): the floor
# is 13 average months (396d), the default 400d that with a few days' margin. Ten years is a ceiling
# past which a value is a typo. The database refuses a retention under the floor too.
DECISION_RETENTION_FLOOR = timedelta(days=396)
DECISION_RETENTION_CEILING = timedelta(days=3653)


@dataclass(frozen=True, kw_only=True)
class Tuning:
    """The stack-tunable guardrail settings, one field per row; ``Settings`` and the stack's
    ``GuardrailsConfig`` extend it, and the Guardrails component takes it whole."""

    default_max_runtime: timedelta = setting(
        "PARKBRAKE_DEFAULT_MAX_RUNTIME", "guardrails.default_max_runtime", "duration", timedelta(minutes=90),
        "the cap of a managed host whose tag and pool say nothing; at or below `max_runtime_ceiling`",
    )  # fmt: skip
    max_exemption: timedelta = setting(
        "PARKBRAKE_MAX_EXEMPTION", "guardrails.max_exemption", "duration", timedelta(hours=24),
        "how far ahead `parkbrake:exempt-until` (and `parkbrake extend`) may reach",
        ceiling=timedelta(days=7),
    )  # fmt: skip
    max_runtime_ceiling: timedelta = setting(
        "PARKBRAKE_MAX_RUNTIME_CEILING", "guardrails.max_runtime_ceiling", "duration", timedelta(hours=24),
        "no cap exceeds it: a longer `parkbrake:max-runtime` tag is clamped to it and reported; the "
        "default cap and every pool's `max_runtime` must be at or below it",
    )  # fmt: skip
    reap_untagged: bool = setting(
        "PARKBRAKE_REAP_UNTAGGED", "guardrails.reap_untagged", "boolean", False,
        "also stop accelerator hosts without `parkbrake:managed=true` (else they are reported)",
    )  # fmt: skip
    stopped_retention: timedelta = setting(
        "PARKBRAKE_STOPPED_RETENTION", "guardrails.stopped_retention", "duration", timedelta(days=7),
        "managed GPU hosts stopped longer are reported with their volumes' monthly cost "
        "([guardrails.md](guardrails.md#hosts-stopped-too-long))",
    )  # fmt: skip
    terminate_stopped: bool = setting(
        "PARKBRAKE_TERMINATE_STOPPED", "guardrails.terminate_stopped", "boolean", False,
        "snapshot every volume of a host stopped past `stopped_retention`, then terminate it",
    )  # fmt: skip
    decision_retention: timedelta = setting(
        "PARKBRAKE_DECISION_RETENTION", "guardrails.decision_retention", "duration", timedelta(days=400),
        "how long the ledger's decision log keeps a decision; the reconciler prunes older ones in "
        "batches; the floor is 13 months, what billing-grade audit needs "
        "([ledger.md](ledger.md#decision-log-retention))",
        floor=DECISION_RETENTION_FLOOR, ceiling=DECISION_RETENTION_CEILING,
    )  # fmt: skip
    close_grace: timedelta | None = setting(
        "PARKBRAKE_CLOSE_GRACE", "guardrails.close_grace", "duration", None,
        "how long after a month ends (in each tenant's budget time zone) the reconciler closes it: its "
        "invoice is kept as it is, later usage billed in the next month, marked late; unset: months are "
        "closed by `parkbrake ledger close` only ([ledger.md](ledger.md#closed-periods))",
        ceiling=timedelta(days=60),
    )  # fmt: skip
    warn_before: timedelta = setting(
        "PARKBRAKE_WARN_BEFORE", "guardrails.warn_before", "duration", timedelta(minutes=15),
        "how long before a host's deadline its owner is warned (a `warn-<instance-id>` schedule "
        "beside the deadline's); shorter than `max_runtime_ceiling` ([owners.md](owners.md))",
    )  # fmt: skip
    chat_webhook_secret_arn: str | None = setting(
        "PARKBRAKE_CHAT_WEBHOOK_SECRET_ARN", "guardrails.chat_webhook_secret", "secret-arn", None,
        "a Secrets Manager secret holding a Slack-compatible incoming webhook URL: every notice and "
        "warning is posted there too; the sweep's functions may read that secret only",
    )  # fmt: skip


# The agent's idle window, per pool: the pool's user data passes it as ``parkbrake agent --idle-after``
# when the pool sets it, and the agent's own default is this row's.
AGENT_IDLE_AFTER = Setting(
    "agent_idle_after", "PARKBRAKE_AGENT_IDLE_AFTER", "pools.<name>.agent_idle_after", "duration",
    timedelta(minutes=15),
    "how long every GPU of a pool's host must be idle before its agent shuts the host down (`parkbrake "
    "agent --idle-after`); not the inference service's `inference.scale_to_zero_after`",
)  # fmt: skip


# The rows' defaults as one record, for code that needs a default without reading the environment (a
# policy's or a grant's own default): named here, never written again.
DEFAULTS = Tuning()

# The sweep's rate (``guardrails.sweep_every``): the stack's alone (its schedule, and one interval more
# of grace on a Kubernetes pool's nodes), which no Lambda reads, so it is not a row of the table.
SWEEP_EVERY = timedelta(minutes=5)


def _rows() -> tuple[Setting, ...]:
    declared: tuple[Field[Any], ...] = fields(Tuning)
    return tuple(replace(item.metadata[_ROW], name=item.name) for item in declared)


# The Lambdas' settings (one per field of Tuning), then the pools'.
TUNING: tuple[Setting, ...] = _rows()
SETTINGS: tuple[Setting, ...] = (*TUNING, AGENT_IDLE_AFTER)
SETTINGS_BY_NAME = {row.name: row for row in SETTINGS}


def tuning_environment(tuning: Tuning) -> dict[str, str]:
    """The variables of every row whose value is set, as the Guardrails component passes them."""
    rendered = {row.variable: row.render(getattr(tuning, row.name)) for row in TUNING}
    return {variable: text for variable, text in rendered.items() if text is not None}


@dataclass(frozen=True)
class Variable:
    """A ``PARKBRAKE_*`` variable outside the stack-tunable table: who sets it, and what it says."""

    variable: str
    set_by: str
    help: str
    default: str = "none"
    # Whether the Guardrails component puts it in the Lambdas' environment (always, or when it applies).
    in_lambda_environment: bool = True


STACK = "PARKBRAKE_STACK"
REGIONS = "PARKBRAKE_REGIONS"
POOL_MAX_RUNTIMES = "PARKBRAKE_POOL_MAX_RUNTIMES"
SPOT_ACTION = "PARKBRAKE_SPOT_ACTION"
SNS_TOPIC_ARN = "PARKBRAKE_SNS_TOPIC_ARN"
DEADLINE_TARGET_ARN = "PARKBRAKE_DEADLINE_TARGET_ARN"
SCHEDULER_ROLE_ARN = "PARKBRAKE_SCHEDULER_ROLE_ARN"
DEADLINE_DEAD_LETTER_ARN = "PARKBRAKE_DEADLINE_DEAD_LETTER_ARN"
DEADLINE_GROUP = "PARKBRAKE_DEADLINE_GROUP"
NOTICES_TABLE = "PARKBRAKE_NOTICES_TABLE"
DECISION_BUS = "PARKBRAKE_DECISION_BUS"
TENANTS = "PARKBRAKE_TENANTS"
MEMBER_ACCOUNTS = "PARKBRAKE_MEMBER_ACCOUNTS"
SPOKES_PARAMETER = "PARKBRAKE_SPOKES_PARAMETER"
DATABASE_URL = "PARKBRAKE_DATABASE_URL"
DATABASE_SECRET_ARN = "PARKBRAKE_DATABASE_SECRET_ARN"
# What a spot host that is due gets when it is no group's: only a persistent spot request can stop.
SPOT_ACTIONS = ("terminate", "stop")

WIRED: tuple[Variable, ...] = (
    Variable(STACK, "the program, from the stack's name", "the stack whose guardrails these are (the deadline and the launcher require it)"),
    Variable(REGIONS, "the program, from `aws:region`", "comma-separated regions to guard", "`AWS_REGION`"),
    Variable(
        POOL_MAX_RUNTIMES, "the program, from `pools.<name>.max_runtime`", "per-pool caps, `training=90m,inference=12h`", "empty"
    ),
    Variable(
        TENANTS, "the program, from `tenants`", "comma-separated declared tenants: a `parkbrake:tenant` value that "
        "is none of them exactly is metered for `unattributed` (`guardrails/tenants.py`)", "any valid tenant name"
    ),
    Variable(
        MEMBER_ACCOUNTS, "the hub stack, from the organisation's accounts", "comma-separated 12-digit member "
        "account ids whose hosts' events the hub's meter takes (hub mode: it reads their hosts through each "
        "account's spoke role); an event of any other account is refused with one log line", "unset: the "
        "stack's own account only", in_lambda_environment=False,
    ),
    Variable(SNS_TOPIC_ARN, "the Guardrails component", "where the sweep's notice and budget notices go"),
    Variable(
        DEADLINE_TARGET_ARN, "the Guardrails component", "what a deadline schedule invokes (the reaper)"
    ),
    Variable(SCHEDULER_ROLE_ARN, "the Guardrails component", "the role a deadline schedule invokes it as"),
    Variable(
        DEADLINE_DEAD_LETTER_ARN, "the Guardrails component", "the SQS queue a deadline schedule's failed delivery goes to"
    ),
    Variable(
        DEADLINE_GROUP,
        "a spoke with `sweep: spoke` (`components/org_spoke_parts.py`)",
        "the Scheduler group a guardrail arms, moves and deletes deadline, warning and budget crossing "
        "schedules in: a spoke's own `parkbrake-<stack>-spoke-<region>-deadlines`, so a spoke in the hub's "
        "account and region never shares the hub's group ([organisation.md](organisation.md#central-deadlines))",
        "`parkbrake-<stack>-deadlines`",
        in_lambda_environment=False,  # a spoke's only: the stack's own functions use the default
    ),
    Variable(
        NOTICES_TABLE,
        "the Guardrails component",
        "the DynamoDB table that keeps a repeated finding to one notice a day (unset: every sweep sends all)",
    ),
    Variable(
        DECISION_BUS,
        "the Guardrails component, with a `database`",
        "the EventBridge bus a guardrail outside the VPC (the reaper, the deadlines) relays its decisions on, "
        "to the meter (unset: decisions are log lines only)",
    ),
    Variable(
        SPOKES_PARAMETER,
        "the organisation's hub: its meter, budget and reconciler always, its reaper with `sweep: central`",
        "the SSM parameter listing the spokes (`/parkbrake/<stack>/spokes`): set, the hub's reaper sweeps every "
        "member account and region through the spoke roles ([organisation.md](organisation.md#the-central-sweep)), "
        "the hub's meter takes the events of the spokes' accounts (a StackSet's: its OUs' accounts), and its "
        "budget and reconciler look for hosts there",
        "unset: the reaper sweeps its own account",
        in_lambda_environment=False,  # a hub's only: stacks/program.py's hub_environment sets it
    ),
    Variable(
        DATABASE_SECRET_ARN,
        "the Guardrails component, with a `database`",
        "the ledger's Secrets Manager secret (RDS's JSON, or a URL); the functions that use the ledger get it",
    ),
    Variable(
        DATABASE_URL,
        "you, for the CLI and tests",
        "the ledger as a URL; without it or the secret, no ledger (the launcher says `\"budget\": \"not checked\"`)",
        in_lambda_environment=False,
    ),
    Variable(
        SPOT_ACTION,
        "you; no stack key sets it",
        "a stand-alone spot host that is due: `terminate` or `stop` (only a persistent spot request stops)",
        "`terminate`",
        in_lambda_environment=False,
    ),
)  # fmt: skip

# Read by a CLI, host or build process, never by a guardrail Lambda, and set by no stack.
REVISION = "PARKBRAKE_REVISION"
RDS_CA_BUNDLE = "PARKBRAKE_RDS_CA_BUNDLE"
WHEEL_CACHE = "PARKBRAKE_WHEEL_CACHE"
IMDS_ENDPOINT = "PARKBRAKE_IMDS_ENDPOINT"
SHUTDOWN_COMMAND = "PARKBRAKE_SHUTDOWN_COMMAND"
API_STOP_AFTER = "PARKBRAKE_API_STOP_AFTER"
TENANT = "PARKBRAKE_TENANT"
INSTANCE_TYPE = "PARKBRAKE_INSTANCE_TYPE"

PROCESS: tuple[Variable, ...] = (
    Variable(REVISION, "you, or `parkbrake deploy`", "the revision `parkbrake:revision` tags when the stack file sets none", "`unversioned`", False),
    Variable(RDS_CA_BUNDLE, "you, for a build", "a PEM file the Lambda layer carries as the RDS CA bundle instead of AWS's", "AWS's bundle", False),
    Variable(WHEEL_CACHE, "you, for a build", "where the Lambda layer's wheels are cached", "`~/.cache/parkbrake/wheels`", False),
    Variable(IMDS_ENDPOINT, "you, for tests", "the instance metadata service a host command asks", "IMDS", False),
    Variable(SHUTDOWN_COMMAND, "you, on a host", "the command `parkbrake run`/`agent` shut the host down with", "`shutdown -h now`", False),
    Variable(API_STOP_AFTER, "you, on a host", "`--api-stop-after`: stop through the EC2 API when the shutdown has not ended the host", "off", False),
    Variable(TENANT, "you, on a host", "`parkbrake run --tenant`: who pays", "none", False),
    Variable(INSTANCE_TYPE, "you, on a host", "`parkbrake run --instance-type`: this host's type, to price the job", "none", False),
)  # fmt: skip


def every_variable() -> Iterator[str]:
    """Every ``PARKBRAKE_*`` variable a parkbrake process outside services/ reads."""
    yield from (row.variable for row in SETTINGS)
    yield from (item.variable for item in (*WIRED, *PROCESS))


# --- the docs' table -----------------------------------------------------------------------------------

DOCS_BEGIN = "<!-- settings table: generated from guardrails/settings_table.py; python -m guardrails.settings_table -->"
DOCS_END = "<!-- end of settings table -->"


def _bounds(row: Setting) -> str:
    if row.kind != "duration":
        return ""
    floor = format_duration(row.floor) if row.floor else "> 0"
    return f"{floor} – {format_duration(row.duration_ceiling)}"


def _default(row: Setting) -> str:
    rendered = row.render(row.default)
    return f"`{rendered}`" if rendered is not None else "none"


def docs_table() -> str:
    """The Markdown table of docs/configuration.md, between its markers."""
    lines = [
        "| stack key | variable | type | default | bounds | what it does |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| `parkbrake:{row.stack_key}` | `{row.variable}` | {row.kind} | {_default(row)} | {_bounds(row)} | {row.help} |"
        for row in SETTINGS
    ]
    lines += [
        f"| — (set by {item.set_by}) | `{item.variable}` | | {item.default} | | {item.help} |"
        for item in (*WIRED, *PROCESS)
    ]
    return "\n".join([DOCS_BEGIN, *lines, DOCS_END])


def replace_docs_table(text: str) -> str:
    """``text`` with the part between the markers replaced by :func:`docs_table`."""
    start, end = text.index(DOCS_BEGIN), text.index(DOCS_END) + len(DOCS_END)
    return text[:start] + docs_table() + text[end:]


if __name__ == "__main__":
    from pathlib import Path

    page = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
    page.write_text(replace_docs_table(page.read_text()))
