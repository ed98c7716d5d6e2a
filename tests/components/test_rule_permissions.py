"""Each sweep rule carries its settings and the IAM actions it needs (Cloud Custodian's ``permissions``);
the reaper's policy in components/iam_policies.py is checked against them, both ways."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from components.iam_policies import Grants, reaper_policy
from guardrails.rules.base import Rule, SweepPolicy
from guardrails.rules.registry import RULES
from guardrails.settings_table import SETTINGS_BY_NAME

GRANTS = Grants(
    partition="aws",
    account_id="123456789012",
    region="eu-west-1",
    stack="prod",
    topic_arn="arn:aws:sns:eu-west-1:123456789012:alarms",
    scheduler_role_arn="arn:aws:iam::123456789012:role/parkbrake-prod-scheduler",
    autoscaling_group_arns=(
        "arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:1:autoScalingGroupName/g",
    ),
)
SWITCHES = ("reap_untagged", "terminate_stopped")
EVERY_SWITCH_ON = SweepPolicy(
    stack="prod", default_cap=timedelta(minutes=90), max_exemption=timedelta(hours=24),
    reap_untagged=True, terminate_stopped=True,
)  # fmt: skip


def actions(grants: Grants) -> set[str]:
    return {action for statement in reaper_policy(grants)["Statement"] for action in statement["Action"]}


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_every_rules_settings_are_rows_of_the_settings_table(rule: Rule) -> None:
    assert set(rule.settings) <= set(SETTINGS_BY_NAME), rule.name


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_a_rule_that_acts_names_what_it_needs_and_the_reaper_may_do_it(rule: Rule) -> None:
    if rule.action(EVERY_SWITCH_ON) != "report":
        assert rule.permissions, f"{rule.name} acts but names no permission"
    every_switch = dataclasses.replace(GRANTS, reap_untagged=True, terminate_stopped=True)
    assert set(rule.permissions) <= actions(every_switch), rule.name


@pytest.mark.parametrize("switch", SWITCHES)
def test_what_a_switch_grants_the_reaper_is_claimed_by_a_rule_that_reads_that_switch(switch: str) -> None:
    # By statement: an action may already be granted elsewhere on other resources (ec2:CreateTags).
    without = reaper_policy(GRANTS)["Statement"]
    added = [
        item
        for item in reaper_policy(dataclasses.replace(GRANTS, **{switch: True}))["Statement"]
        if item not in without
    ]
    granted = {action for item in added for action in item["Action"]}
    assert granted, f"{switch} grants nothing more: the check below would pass vacuously"
    claimed = {permission for rule in RULES if switch in rule.settings for permission in rule.permissions}
    assert granted <= claimed
