"""Decisions come only from their writers: under the mock engine the Guardrails component puts the
decision rule on the stack's own bus, whose policy (evaluated by AWS's documented rules,
``tests/iam_evaluation.py``) refuses every principal but the reaper's and the deadlines' roles, and
pages when the meter refuses a forged event anyway."""

from __future__ import annotations

import json

from components.guardrail_alerting import ACTIONS_METRIC
from components.guardrail_functions import RELAY_PATTERN
from components.iam_policies import decision_bus_policy
from lambdas.aws.heartbeat import ACTIONS_EMF
from tests.components.guardrails_build import (
    ACCOUNT,
    ALARM,
    EVENT_TARGET,
    RULE,
    build,
    configured,
    environment_of,
)
from tests.components.test_iam_stack_scope import GRANTS
from tests.iam_evaluation import Request, decide

BUS = "aws:cloudwatch/eventBus:EventBus"
BUS_POLICY = "aws:cloudwatch/eventBusPolicy:EventBusPolicy"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/parkbrake-dev-"
PUT_ANYWHERE = {"Statement": [{"Effect": "Allow", "Action": "events:*", "Resource": "*"}]}


def test_the_decision_rule_listens_on_the_stacks_own_bus_whose_policy_admits_only_the_writers() -> None:
    run = configured()
    bus = run.named(BUS, "decisions")
    assert bus.inputs["name"] == "parkbrake-dev-decisions"
    rule = run.named(RULE, "guardrail-decisions")
    assert (rule.inputs["eventBusName"], rule.inputs["eventPattern"]) == (
        "parkbrake-dev-decisions",
        RELAY_PATTERN,
    )
    assert run.named(EVENT_TARGET, "meter-from-decisions").inputs["eventBusName"] == "parkbrake-dev-decisions"
    policy = json.loads(run.named(BUS_POLICY, "decisions").inputs["policy"])
    (deny,) = policy["Statement"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "events:PutEvents")
    assert deny["Resource"] == f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/parkbrake-dev-decisions"
    assert deny["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": [f"{ROLE}reaper", f"{ROLE}deadline"]}}
    for guardrail in ("reaper", "deadline"):
        assert environment_of(run, guardrail)["PARKBRAKE_DECISION_BUS"] == "parkbrake-dev-decisions"


def test_only_the_writers_roles_may_put_events_on_the_bus_whatever_their_own_policy_allows() -> None:
    bus_policy = decision_bus_policy(GRANTS)
    bus = GRANTS.decision_bus_arn
    for principal, expected in [
        (f"{ROLE}reaper", "Allow"),
        (f"{ROLE}deadline", "Allow"),
        (f"{ROLE}meter", "Deny"),  # a guardrail that does not relay
        (f"arn:aws:iam::{ACCOUNT}:role/ml-engineer", "Deny"),
        (f"arn:aws:iam::{ACCOUNT}:user/mallory", "Deny"),
        (f"arn:aws:iam::{ACCOUNT}:role/parkbrake-prod-reaper", "Deny"),  # another stack's reaper
    ]:
        request = Request("events:PutEvents", bus, principal, {"aws:PrincipalArn": principal})
        assert decide(request, [PUT_ANYWHERE], [bus_policy]) == expected, principal
    # The deny is what refuses: without the bus's policy, an identity allowed events:* could write.
    mallory = f"arn:aws:iam::{ACCOUNT}:user/mallory"
    assert (
        decide(Request("events:PutEvents", bus, mallory, {"aws:PrincipalArn": mallory}), [PUT_ANYWHERE])
        == "Allow"
    )


def test_a_refused_forgery_pages() -> None:
    assert ACTIONS_METRIC == ACTIONS_EMF
    alarm = configured().named(ALARM, "forged-decisions-actions")
    assert alarm.inputs["name"] == "parkbrake-dev-forged-decisions"
    assert alarm.inputs["dimensions"] == {
        "Guardrail": "meter",
        "Action": "refuse",
        "Reason": "forged-decisions",
    }
    assert (alarm.inputs["threshold"], alarm.inputs["comparisonOperator"]) == (0, "GreaterThanThreshold")


def test_without_a_ledger_there_is_no_decision_bus() -> None:
    run = build(database_secret_arn=None)
    assert run.of_type(BUS) == []
    assert run.of_type(BUS_POLICY) == []
    assert "PARKBRAKE_DECISION_BUS" not in environment_of(run, "reaper")
