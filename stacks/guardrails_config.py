"""The ``guardrails`` section of a stack's config: caps, sweep, warnings, alarms and their addresses."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from guardrails import settings as environment
from guardrails.durations import format_duration
from stacks.validation import Section

EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
# Reserved for documentation and testing (RFC 2606, RFC 6761): mail there reaches nobody.
PLACEHOLDER_DOMAINS = frozenset({"example.com", "example.net", "example.org"})
PLACEHOLDER_SUFFIXES = (
    ".example",
    ".invalid",
    ".test",
    ".localhost",
    ".example.com",
    ".example.net",
    ".example.org",
)
LAYER_ARN = re.compile(r"arn:aws[\w-]*:lambda:[a-z0-9-]+:\d{12}:layer:[\w-]+:\d+")
SECRET_ARN = re.compile(r"arn:aws[\w-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+")


@dataclass(frozen=True)
class GuardrailsConfig:
    sweep_every: timedelta = timedelta(minutes=5)
    default_max_runtime: timedelta = timedelta(minutes=90)
    max_exemption: timedelta = timedelta(hours=24)
    # No cap may exceed it: a longer parkbrake:max-runtime tag is clamped to it and reported.
    max_runtime_ceiling: timedelta = timedelta(hours=24)
    reap_untagged: bool = False
    # How long before a host's deadline its owner is warned.
    warn_before: timedelta = timedelta(minutes=15)
    # A Secrets Manager secret holding a Slack-compatible incoming webhook URL: notices go there too.
    chat_webhook_secret: str | None = None
    alarm_email: str | None = None
    alarm_topic_arn: str | None = None
    # Lambda layers providing psycopg to the functions that use the ledger (meter, budget, launcher).
    database_layer_arns: tuple[str, ...] = ()
    # Hosts stopped longer are reported with their volumes' monthly cost; snapshotted and terminated
    # when terminate_stopped is on.
    stopped_retention: timedelta = timedelta(days=7)
    terminate_stopped: bool = False
    decision_retention: timedelta = environment.DEFAULT_DECISION_RETENTION  # older decisions are pruned


GUARDRAILS_KEYS = {
    "sweep_every", "default_max_runtime", "max_exemption", "reap_untagged", "alarm_email", "alarm_topic_arn",
    "database_layer_arns", "max_runtime_ceiling", "stopped_retention", "terminate_stopped",
    "warn_before", "chat_webhook_secret", "decision_retention",
}  # fmt: skip


def guardrails_config(root: Section) -> GuardrailsConfig:
    """The ``guardrails`` section: every duration, switch and address the guardrail functions get."""
    section = root.section("guardrails", GUARDRAILS_KEYS)
    defaults = GuardrailsConfig()
    sweep_every = section.duration("sweep_every", defaults.sweep_every, ceiling=timedelta(hours=1))
    if not section.problems.has(section.at("sweep_every")) and (
        sweep_every < timedelta(minutes=1) or sweep_every.total_seconds() % 60
    ):
        section.problems.add(
            section.at("sweep_every"),
            f"{format_duration(sweep_every)} is not whole minutes ≥ 1m; EventBridge Scheduler rates are in minutes",
        )
    alarm_topic_arn = section.string(
        "alarm_topic_arn", None, pattern=re.compile(r"arn:aws[\w-]*:sns:.+"), hint="an SNS topic ARN"
    )
    return GuardrailsConfig(
        sweep_every=sweep_every,
        default_max_runtime=section.duration("default_max_runtime", defaults.default_max_runtime),
        max_exemption=section.duration("max_exemption", defaults.max_exemption, ceiling=timedelta(days=7)),
        max_runtime_ceiling=section.duration("max_runtime_ceiling", defaults.max_runtime_ceiling),
        reap_untagged=section.boolean("reap_untagged", False),
        stopped_retention=section.duration("stopped_retention", defaults.stopped_retention),
        terminate_stopped=section.boolean("terminate_stopped", False),
        decision_retention=section.duration(
            "decision_retention",
            defaults.decision_retention,
            ceiling=environment.DECISION_RETENTION_CEILING,
            floor=environment.DECISION_RETENTION_FLOOR,
        ),
        warn_before=section.duration("warn_before", defaults.warn_before),
        chat_webhook_secret=section.string(
            "chat_webhook_secret", None, pattern=SECRET_ARN, hint="a Secrets Manager secret ARN"
        )
        or None,
        database_layer_arns=tuple(
            section.matching_list("database_layer_arns", LAYER_ARN, what="a Lambda layer version ARN")
        ),
        alarm_email=_alarm_email(section, adopts_topic=bool(alarm_topic_arn)),
        alarm_topic_arn=alarm_topic_arn or None,
    )


def _alarm_email(section: Section, *, adopts_topic: bool) -> str | None:
    """Required unless an existing topic is adopted: an alarm nobody receives is no alarm."""
    if not adopts_topic and not section.has("alarm_email"):
        section.problems.add(
            section.at("alarm_email"),
            "is required: the on-call address the guardrails' alarms page (or set alarm_topic_arn "
            "to adopt an existing SNS topic)",
        )
        return None
    address = section.string("alarm_email", None, pattern=EMAIL, hint="an e-mail address")
    domain = address.rpartition("@")[2].lower() if address else ""
    if domain in PLACEHOLDER_DOMAINS or domain.endswith(PLACEHOLDER_SUFFIXES):
        section.problems.add(
            section.at("alarm_email"),
            f'"{address}" is a placeholder ({domain} receives no mail); set the on-call address',
        )
    return address or None
