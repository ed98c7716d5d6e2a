"""IAM as narrow as the calls: every guardrail grant is the stack's own, parliament (AWS's catalogue of
actions and condition keys) finds nothing wrong, and, evaluated by AWS's documented rules
(``tests/iam_evaluation.py``), one stack's roles cannot stop, terminate, shrink, snapshot or adopt another
stack's host, while they still may act on their own."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import parliament
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.iam_policies import GUARDRAIL_POLICIES, UNSCOPED, Grants
from guardrails import names, tags
from guardrails.instance_types import is_accelerator
from tests.iam_evaluation import Request, condition_holds, decide

ACCOUNT = "123456789012"
REGION = "us-east-1"
GROUP = f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:1a2b:autoScalingGroupName/parkbrake-dev-training"
PROD_GROUP = GROUP.replace("parkbrake-dev-", "parkbrake-prod-")
GRANTS = Grants(
    partition="aws",
    account_id=ACCOUNT,
    region=REGION,
    stack="dev",
    topic_arn=f"arn:aws:sns:{REGION}:{ACCOUNT}:parkbrake-dev-alarms",
    scheduler_role_arn=f"arn:aws:iam::{ACCOUNT}:role/parkbrake-dev-scheduler",
    autoscaling_group_arns=(GROUP,),
    nightly_group_arn=GROUP,
    database_secret_arn=f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:parkbrake-dev-db-AbCdEf",
    reap_untagged=True,
    terminate_stopped=True,
    chat_webhook_secret_arn=f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:parkbrake/dev/chat-AbCdEf",
)
INSTANCE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0a1b2c3d4e5f67890"
VOLUME = f"arn:aws:ec2:{REGION}:{ACCOUNT}:volume/vol-0a1b2c3d4e5f67890"
STOPS = ("ec2:StopInstances", "ec2:TerminateInstances")


def policies(grants: Grants = GRANTS) -> dict[str, dict[str, Any]]:
    return {guardrail: build(grants) for guardrail, build in GUARDRAIL_POLICIES.items()}


def host_context(
    resource_tags: dict[str, str], *, market: str = "on-demand", kind: str = "p4d.24xlarge"
) -> dict[str, str]:
    return {**{f"aws:ResourceTag/{key}": value for key, value in resource_tags.items()},
            "ec2:InstanceMarketType": market, "ec2:InstanceType": kind}  # fmt: skip


def allowed(
    guardrail: str, action: str, resource: str, context: dict[str, Any], grants: Grants = GRANTS
) -> bool:
    return (
        decide(Request(action, resource, context=context), [GUARDRAIL_POLICIES[guardrail](grants)]) == "Allow"
    )


PROD_HOST = {tags.MANAGED: "true", tags.STACK: "prod"}
DEV_HOST = {tags.MANAGED: "true", tags.STACK: "dev"}


@pytest.mark.parametrize("guardrail", sorted(GUARDRAIL_POLICIES))
def test_no_role_of_one_stack_stops_terminates_or_shrinks_another_stacks_host(guardrail: str) -> None:
    for action in STOPS:
        for market in ("on-demand", "spot"):
            assert not allowed(guardrail, action, INSTANCE, host_context(PROD_HOST, market=market))
    for action in ("autoscaling:TerminateInstanceInAutoScalingGroup", "autoscaling:SetDesiredCapacity"):
        for group in (GROUP, PROD_GROUP):  # even a group ARN it holds, once the group is tagged prod's
            assert not allowed(guardrail, action, group, {f"aws:ResourceTag/{tags.STACK}": "prod",
                                                          f"aws:ResourceTag/{tags.MANAGED}": "true"})  # fmt: skip
    assert not allowed(
        guardrail, "ec2:CreateSnapshot", VOLUME, {f"aws:ResourceTag/{k}": v for k, v in PROD_HOST.items()}
    )


@pytest.mark.parametrize("guardrail", ["reaper", "deadline"])
def test_no_role_adopts_another_stacks_host_or_a_host_without_accelerators(guardrail: str) -> None:
    adopt = {"aws:TagKeys": [tags.MANAGED, tags.STACK], f"aws:RequestTag/{tags.MANAGED}": "true",
             f"aws:RequestTag/{tags.STACK}": "dev"}  # fmt: skip
    assert allowed(guardrail, "ec2:CreateTags", INSTANCE, host_context({}) | adopt)  # untagged GPU host
    assert allowed(
        guardrail, "ec2:CreateTags", INSTANCE, host_context({tags.MANAGED: "true"}) | adopt
    )  # orphan
    assert not allowed(guardrail, "ec2:CreateTags", INSTANCE, host_context(PROD_HOST) | adopt)
    assert not allowed(guardrail, "ec2:CreateTags", INSTANCE, host_context({}, kind="m5.large") | adopt)
    assert not allowed(
        guardrail,
        "ec2:CreateTags",
        INSTANCE,
        host_context({}) | adopt | {f"aws:RequestTag/{tags.STACK}": "prod"},
    )
    assert not allowed(
        guardrail,
        "ec2:CreateTags",
        INSTANCE,
        host_context({}) | adopt | {"aws:TagKeys": [tags.MANAGED, tags.STACK, tags.MAX_RUNTIME]},
    )
    # Without reap_untagged only a managed orphan is adopted, never an unmanaged host.
    off = replace(GRANTS, reap_untagged=False)
    assert not allowed(guardrail, "ec2:CreateTags", INSTANCE, host_context({}) | adopt, off)
    assert allowed(guardrail, "ec2:CreateTags", INSTANCE, host_context({tags.MANAGED: "true"}) | adopt, off)


def test_the_roles_still_act_on_their_own_stacks_hosts() -> None:
    for guardrail in ("reaper", "deadline", "meter", "budget"):
        assert allowed(guardrail, "ec2:StopInstances", INSTANCE, host_context(DEV_HOST))
        assert allowed(guardrail, "ec2:TerminateInstances", INSTANCE, host_context(DEV_HOST, market="spot"))
        group = {f"aws:ResourceTag/{tags.STACK}": "dev", f"aws:ResourceTag/{tags.MANAGED}": "true"}
        assert allowed(guardrail, "autoscaling:TerminateInstanceInAutoScalingGroup", GROUP, group)
    # Only the reaper terminates an on-demand host (one stopped too long, with terminate_stopped).
    on_demand = host_context(DEV_HOST)
    assert {g for g in GUARDRAIL_POLICIES if allowed(g, "ec2:TerminateInstances", INSTANCE, on_demand)} == {
        "reaper"
    }
    assert not allowed(
        "reaper", "ec2:TerminateInstances", INSTANCE, on_demand, replace(GRANTS, terminate_stopped=False)
    )


host_tags = st.fixed_dictionaries(
    {},
    optional={
        tags.MANAGED: st.sampled_from(["true", "True", "false", ""]),
        tags.STACK: st.sampled_from(["dev", "prod", "Dev", "dev ", ""]),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    guardrail=st.sampled_from(sorted(GUARDRAIL_POLICIES)),
    action=st.sampled_from(STOPS),
    resource_tags=host_tags,
    market=st.sampled_from(["on-demand", "spot"]),
    kind=st.sampled_from(["p4d.24xlarge", "g5.xlarge", "m5.large"]),
)
def test_a_stop_or_termination_is_allowed_only_on_the_stacks_own_managed_hosts(
    guardrail: str, action: str, resource_tags: dict[str, str], market: str, kind: str
) -> None:
    if allowed(guardrail, action, INSTANCE, host_context(resource_tags, market=market, kind=kind)):
        assert resource_tags.get(tags.MANAGED) == "true"
        assert resource_tags.get(tags.STACK) == "dev"


@settings(max_examples=300, deadline=None)
@given(
    resource_tags=host_tags,
    kind=st.sampled_from(["p4d.24xlarge", "g5.xlarge", "trn1.32xlarge", "m5.large", "c7i.large"]),
    request_stack=st.sampled_from(["dev", "prod"]),
    extra_key=st.sampled_from([None, tags.MAX_RUNTIME, tags.TENANT]),
)
def test_adoption_writes_only_this_stacks_tags_on_a_gpu_host_of_no_other_stack(
    resource_tags: dict[str, str], kind: str, request_stack: str, extra_key: str | None
) -> None:
    keys = [tags.MANAGED, tags.STACK, *([extra_key] if extra_key else [])]
    context = host_context(resource_tags, kind=kind) | {
        "aws:TagKeys": keys, f"aws:RequestTag/{tags.MANAGED}": "true", f"aws:RequestTag/{tags.STACK}": request_stack
    }  # fmt: skip
    if allowed("reaper", "ec2:CreateTags", INSTANCE, context):
        assert resource_tags.get(tags.STACK, "dev") == "dev"
        assert is_accelerator(kind)
        assert (request_stack, extra_key) == ("dev", None)


def test_every_grant_names_the_stack_or_is_one_iam_cannot_scope() -> None:
    stack = GRANTS.stack
    own_keys = {f"aws:ResourceTag/{tags.STACK}", f"aws:RequestTag/{tags.STACK}"}
    for guardrail, document in policies().items():
        for statement in document["Statement"]:
            if statement["Sid"] in UNSCOPED:
                continue
            conditions = [
                values
                for keys in statement.get("Condition", {}).values()
                for key, values in keys.items()
                if key in own_keys
            ]
            resources = (
                [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]
            )
            by_name = all(names.prefix(stack) in arn or f"parkbrake/{stack}/" in arn for arn in resources)
            assert conditions == [stack] * len(conditions), (guardrail, statement["Sid"])
            assert conditions or by_name, f"{guardrail}'s {statement['Sid']} is not scoped to stack {stack}"


def test_the_unscoped_grants_only_read() -> None:
    for document in policies().values():
        for statement in document["Statement"]:
            if statement["Sid"] in UNSCOPED and statement["Sid"] != "Heartbeat":
                verbs = {action.split(":")[1] for action in statement["Action"]}
                assert all(verb.startswith(("Describe", "Get")) for verb in verbs), statement["Sid"]


# parliament checks each statement alone, so an action that authorises two resources, each with its own
# conditions, shows as a mismatch in both statements: CreateSnapshot is authorised on the volume
# (aws:ResourceTag: the stack's managed volume) and on the new snapshot (aws:RequestTag: the tags it is
# created with), and one statement cannot hold both (a key absent from one authorisation fails it).
TWO_RESOURCE_ACTIONS = {"ec2:CreateSnapshot"}


@pytest.mark.parametrize("guardrail", sorted(GUARDRAIL_POLICIES))
def test_parliament_finds_nothing_wrong(guardrail: str) -> None:
    for grants in (GRANTS, replace(GRANTS, reap_untagged=False, terminate_stopped=False)):
        document = GUARDRAIL_POLICIES[guardrail](grants)
        findings = [
            f"{f.issue}: {f.detail}"
            for f in parliament.analyze_policy_string(json.dumps(document)).findings
            if not (
                f.issue == "RESOURCE_MISMATCH" and {d["action"] for d in f.detail} <= TWO_RESOURCE_ACTIONS
            )
        ]
        assert findings == []


def test_parliament_and_the_evaluation_would_notice_a_broken_grant() -> None:
    """The checks above mean something: a misspelt condition key is reported, and a stop grant without
    the stack condition lets the reaper stop prod's host."""
    broken = json.loads(
        json.dumps(GUARDRAIL_POLICIES["reaper"](GRANTS)).replace("ec2:InstanceMarketType", "ec2:MarketType")
    )
    assert any(
        f.issue == "UNKNOWN_CONDITION_FOR_ACTION"
        for f in parliament.analyze_policy_string(json.dumps(broken)).findings
    )
    unscoped = json.loads(
        json.dumps(GUARDRAIL_POLICIES["reaper"](GRANTS)).replace(
            f'"aws:ResourceTag/{tags.STACK}": "dev"', '"aws:ResourceTag/Name": "x"'
        )
    )
    request = Request("ec2:StopInstances", INSTANCE, context=host_context(PROD_HOST | {"Name": "x"}))
    assert decide(request, [unscoped]) == "Allow"


@pytest.mark.parametrize(
    ("operator", "expected", "context", "holds"),
    [
        # A key absent from the request: false, but true for a negated operator, IfExists and ForAllValues.
        ("StringEquals", "dev", {}, False),
        ("StringNotEquals", "dev", {}, True),
        ("StringEqualsIfExists", "dev", {}, True),
        ("StringEqualsIfExists", "dev", {"k": "prod"}, False),
        ("ForAllValues:StringEquals", ["a", "b"], {}, True),
        ("ForAnyValue:StringEquals", ["a", "b"], {}, False),
        # Values of one key are ORed, NORed when negated; ForAllValues asks every request value.
        ("StringEquals", ["dev", "prod"], {"k": "prod"}, True),
        ("StringNotEquals", ["dev", "prod"], {"k": "prod"}, False),
        ("ForAllValues:StringEquals", ["a", "b"], {"k": ["a", "c"]}, False),
        ("ForAnyValue:StringEquals", ["a", "b"], {"k": ["a", "c"]}, True),
        ("StringEquals", "dev", {"k": "Dev"}, False),  # case-sensitive
        ("StringEqualsIgnoreCase", "dev", {"k": "Dev"}, True),
        ("StringLike", "g*", {"k": "g5.xlarge"}, True),
        ("StringLike", "g?.xlarge", {"k": "g55.xlarge"}, False),
        ("Null", "true", {}, True),
        ("Null", "true", {"k": "x"}, False),
        ("ArnLike", "arn:aws:iam::*:role/parkbrake-*", {"k": f"arn:aws:iam::{ACCOUNT}:role/parkbrake-dev-reaper"}, True),
        ("ArnNotEquals", [f"arn:aws:iam::{ACCOUNT}:role/a"], {"k": f"arn:aws:iam::{ACCOUNT}:role/b"}, True),
    ],
)  # fmt: skip
def test_the_evaluation_follows_the_documented_condition_rules(
    operator: str, expected: object, context: dict[str, Any], holds: bool
) -> None:
    assert condition_holds(operator, "k", expected, Request("x:Y", "*", context=context)) is holds


def test_an_explicit_deny_wins_over_any_allow_and_nothing_allowed_is_denied() -> None:
    allow = {"Statement": [{"Effect": "Allow", "Action": "events:PutEvents", "Resource": "*"}]}
    deny = {
        "Statement": [{"Effect": "Deny", "Principal": "*", "Action": "events:PutEvents", "Resource": "*"}]
    }
    request = Request("events:PutEvents", f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/b")
    assert decide(request, [allow]) == "Allow"
    assert decide(request, [allow], [deny]) == "Deny"
    assert decide(request, []) == "ImplicitDeny"
