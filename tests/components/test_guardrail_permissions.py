"""Each guardrail Lambda's IAM policy allows every AWS call the Lambda makes, and grants nothing else.

The calls are recorded over the Lambdas' own test suites against moto (`tests/aws_call_recorder.py`:
a botocore ``before-call`` hook attributes each call to the handler on the stack), run here in a
child pytest session; the policies are the documents `components/iam_policies.py` builds for the
stack. moto does not evaluate IAM, so resources and conditions are checked by the component tests and
the policy pack; this test checks actions, both ways.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fnmatch import fnmatchcase

import pytest

from components.iam_policies import GUARDRAIL_POLICIES, Grants
from tests.aws_call_recorder import ENGINES, GUARDRAILS, OUTPUT_VARIABLE
from tests.conftest import REPO_ROOT

LAMBDA_TESTS = [
    "tests/lambdas/test_reaper.py",
    "tests/lambdas/test_deadline.py",
    "tests/lambdas/test_launcher.py",
    "tests/lambdas/test_launcher_capacity.py",
    "tests/lambdas/test_serving_rotation.py",
    "tests/lambdas/test_sweep_notices.py",
    "tests/lambdas/test_stopped_hosts.py",
    "tests/lambdas/ledger/test_meter.py",
    "tests/lambdas/ledger/test_budget_guardrail.py",
    "tests/lambdas/ledger/test_budget_crossing.py",
    "tests/lambdas/ledger/test_reconciler.py",
]
GRANTS = Grants(
    partition="aws",
    account_id="123456789012",
    region="us-east-1",
    stack="test",
    topic_arn="arn:aws:sns:us-east-1:123456789012:alarms",
    scheduler_role_arn="arn:aws:iam::123456789012:role/scheduler",
    autoscaling_group_arns=("arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*",),
    nightly_group_arn="arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*",
    database_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:ledger",
    reap_untagged=True,  # test_sweep_notices stops unmanaged hosts, tagging them first
    terminate_stopped=True,  # test_stopped_hosts snapshots and terminates hosts stopped too long
)
# Granted but never an API call the function's code makes, each with the reason.
NOT_CALLS = {
    "logs:CreateLogStream": "the Lambda service writes the function's logs with its role",
    "logs:PutLogEvents": "the Lambda service writes the function's logs with its role",
    "iam:PassRole": "an authorisation checked when CreateSchedule names the scheduler role, not a call",
    "secretsmanager:GetSecretValue": "the tests reach the ledger by PARKBRAKE_DATABASE_URL; in Lambda the "
    "store reads the secret",
    "sqs:SendMessage": "the Lambda service sends an event that failed its retries to the function's "
    "dead-letter queue with its role",
}


# No action is granted because a sibling of it is: the stop path's three calls (stop, terminate a spot
# host, leave a group) are each granted only to a guardrail whose suite is seen making that call.
# Calls a guardrail's Lambda run makes that its test suite, driving the functions below it, does not
# reach: (guardrail, action) → the call in its handler's or its engine's source, checked to be there.
HANDLER_ONLY = {
    ("meter", "cloudwatch:PutMetricData"): "heartbeat.record_success(",
    ("budget", "cloudwatch:PutMetricData"): "heartbeat.record_success(",
    ("reconciler", "cloudwatch:PutMetricData"): "heartbeat.record_success(",
    ("reconciler", "sns:Publish"): "metering.alert_unpriced(",
    # The decision relay (tests/lambdas/ledger/test_guardrail_decisions.py drives it below the handler).
    ("reaper", "events:PutEvents"): "decision_log(",
    ("deadline", "events:PutEvents"): "decision_log(",
}


# A guardrail that hands its work to another's code makes that one's calls too: (the other, the call).
DELEGATES = {
    "deadline": ("reaper", "sweeping.sweep("),  # a host already past its deadline is swept
    "meter": ("budget", "budgeting.enforce_budgets("),  # the changed tenants' budgets are checked at once
    "reconciler": ("meter", "metering.meter("),  # its repairs are metered (a type's count from EC2 included)
}


def run_source(guardrail: str) -> str:
    """What the guardrail's Lambda runs: its handler and its engine."""
    handler = REPO_ROOT / "lambdas" / f"{guardrail}.py"
    engine = REPO_ROOT / "lambdas" / "engines" / f"{ENGINES[guardrail]}.py"
    return handler.read_text() + engine.read_text()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    output = tmp_path_factory.mktemp("aws-calls") / "calls.json"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.aws_call_recorder",
         *LAMBDA_TESTS],
        cwd=REPO_ROOT, env={**os.environ, OUTPUT_VARIABLE: str(output)}, capture_output=True, text=True,
        check=False, timeout=1500,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    return {name: set(calls) for name, calls in json.loads(output.read_text()).items()}


def granted(guardrail: str) -> set[str]:
    document = GUARDRAIL_POLICIES[guardrail](GRANTS)
    return {
        action
        for statement in document["Statement"]
        if statement["Effect"] == "Allow"
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
    }


# The first test pays for the module's fixture, the Lambda suites run in a child session (about 150 s
# on an idle 2-core machine): the suite-wide 300 s limit is too close for a busy one.
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("guardrail", GUARDRAILS)
def test_every_call_a_guardrail_makes_is_allowed(guardrail: str, recorded: dict[str, set[str]]) -> None:
    calls = recorded.get(guardrail, set())
    assert calls, f"no AWS call of {guardrail} was recorded"
    allowed = granted(guardrail)
    denied = sorted(call for call in calls if not any(fnmatchcase(call, action) for action in allowed))
    assert not denied, f"{guardrail} calls {denied} without a grant"


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("guardrail", GUARDRAILS)
def test_a_guardrail_is_granted_nothing_it_never_calls(guardrail: str, recorded: dict[str, set[str]]) -> None:
    calls = set(recorded.get(guardrail, set()))
    if guardrail in DELEGATES:
        calls |= recorded.get(DELEGATES[guardrail][0], set())
    calls |= {action for (name, action) in HANDLER_ONLY if name == guardrail}
    unused = sorted(action for action in granted(guardrail) - set(NOT_CALLS) if action not in calls)
    assert not unused, f"{guardrail} is granted {unused} but never calls it"


def test_every_exemption_is_granted_and_every_handler_only_call_is_in_its_handler() -> None:
    everything = set().union(*(granted(guardrail) for guardrail in GUARDRAILS))
    assert set(NOT_CALLS) <= everything
    for guardrail, (_, call) in DELEGATES.items():
        assert call in run_source(guardrail), (guardrail, call)
    for (guardrail, action), call in HANDLER_ONLY.items():
        assert action in granted(guardrail)
        assert call in run_source(guardrail), (guardrail, call)
