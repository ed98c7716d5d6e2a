"""The ``guardrails`` section of a stack's config: caps, sweep, warnings, alarms and their addresses."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from guardrails.durations import format_duration
from guardrails.settings_table import SECRET_ARN, SWEEP_EVERY, TUNING, Setting, Tuning
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


@dataclass(frozen=True, kw_only=True)
class GuardrailsConfig(Tuning):
    """The section: the table's tunable settings (``guardrails.settings_table``), and what the stack
    uses itself: the sweep's rate, the alarms' addresses and the ledger functions' extra layers."""

    sweep_every: timedelta = SWEEP_EVERY
    alarm_email: str | None = None
    alarm_topic_arn: str | None = None
    # Lambda layers providing psycopg to the functions that use the ledger (meter, budget, launcher).
    database_layer_arns: tuple[str, ...] = ()


# The table's rows of this section, by their key in it.
TUNED_KEYS = {row.stack_key.removeprefix("guardrails."): row for row in TUNING}
GUARDRAILS_KEYS = {*TUNED_KEYS, "sweep_every", "alarm_email", "alarm_topic_arn", "database_layer_arns"}


def guardrails_config(root: Section) -> GuardrailsConfig:
    """The ``guardrails`` section: every duration, switch and address the guardrail functions get."""
    section = root.section("guardrails", GUARDRAILS_KEYS)
    sweep_every = section.duration("sweep_every", SWEEP_EVERY, ceiling=timedelta(hours=1))
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
        **{row.name: tuned_value(section, key, row) for key, row in TUNED_KEYS.items()},
        sweep_every=sweep_every,
        database_layer_arns=tuple(
            section.matching_list("database_layer_arns", LAYER_ARN, what="a Lambda layer version ARN")
        ),
        alarm_email=_alarm_email(section, adopts_topic=bool(alarm_topic_arn)),
        alarm_topic_arn=alarm_topic_arn or None,
    )


def tuned_value(section: Section, key: str, row: Setting) -> Any:
    """One row of the table read from the section with the row's own bounds and default."""
    if row.kind == "duration":
        return section.duration(key, row.default, ceiling=row.duration_ceiling, floor=row.floor)
    if row.kind == "boolean":
        return section.boolean(key, row.default)
    return section.string(key, None, pattern=SECRET_ARN, hint="a Secrets Manager secret ARN") or row.default


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
