"""The rules in force, in the order their findings are reported. Adding a rule is one line here."""

from __future__ import annotations

from guardrails.rules import (
    cap_above_ceiling,
    karpenter_unreclaimed,
    malformed_tags,
    orphaned,
    past_deadline,
    stopped_since_unknown,
    stopped_too_long,
    untagged_accelerator,
)
from guardrails.rules.base import Rule

RULES: tuple[Rule, ...] = (
    past_deadline.RULE,
    karpenter_unreclaimed.RULE,
    untagged_accelerator.RULE,
    orphaned.RULE,
    cap_above_ceiling.RULE,
    malformed_tags.RULE,
    stopped_too_long.RULE,
    stopped_since_unknown.RULE,
)
