"""What the components set from the settings table, under the Pulumi mocks: every guardrail Lambda gets
every variable its settings read, and a pool's agent idle window reaches its hosts' user data."""

from __future__ import annotations

import base64
from datetime import timedelta

from components.guardrail_lambdas import FUNCTIONS
from guardrails.settings import settings_from_environment
from guardrails.settings_table import DATABASE_SECRET_ARN, TUNING, WIRED
from stacks.config import parse_stack_config
from stacks.offline import run_offline
from stacks.platform import build_platform
from tests.components.guardrails_build import build, environment_of
from tests.stacks.test_config import example

CHAT_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:parkbrake/dev/chat-webhook-AbCdEf"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


def test_every_guardrail_gets_every_row_and_every_wired_variable_it_reads() -> None:
    run = build(
        chat_webhook_secret_arn=CHAT_SECRET, warn_before=timedelta(minutes=30), close_grace=timedelta(days=3)
    )
    wired = {item.variable for item in WIRED if item.in_lambda_environment} - {DATABASE_SECRET_ARN}
    for function in FUNCTIONS:
        environment = environment_of(run, function.guardrail)
        missing = ({row.variable for row in TUNING} | wired) - set(environment)
        assert not missing, (function.guardrail, missing)
        assert (DATABASE_SECRET_ARN in environment) is function.uses_database, function.guardrail
        # What the component wrote, the handlers' reader reads without a problem and as it was set.
        read = settings_from_environment(environment)
        assert (read.chat_webhook_secret_arn, read.warn_before) == (CHAT_SECRET, timedelta(minutes=30))
        assert read.close_grace == timedelta(days=3)


def test_a_variable_the_stack_does_not_set_is_left_out_rather_than_written_empty() -> None:
    run = build(chat_webhook_secret_arn=None, database_secret_arn=None)
    environment = environment_of(run, "reaper")
    assert "PARKBRAKE_CHAT_WEBHOOK_SECRET_ARN" not in environment
    assert "PARKBRAKE_DECISION_BUS" not in environment
    assert "PARKBRAKE_CLOSE_GRACE" not in environment  # no grace: months close by hand only
    assert all(value for value in environment.values())


def _agent_lines(idle_after: str | None) -> dict[str, str]:
    config = example()
    if idle_after is not None:
        config["parkbrake:pools"]["training"]["agent_idle_after"] = idle_after
    config["parkbrake:hosts"] = {"ami_id": "ami-0f1e2d3c4b5a69788"}
    stack = parse_stack_config("dev", config, "Pulumi.dev.yaml")
    run = run_offline(lambda: build_platform(stack), stack="dev", region=stack.region)
    lines = {}
    for template in run.of_type(LAUNCH_TEMPLATE):
        script = base64.b64decode(template.inputs["userData"]).decode()
        (line,) = [line for line in script.splitlines() if line.startswith("ExecStart=")]
        lines[template.name.removesuffix("-launch-template")] = line
    return lines


def test_a_pools_agent_idle_after_reaches_its_hosts_agent_and_only_that_pools() -> None:
    lines = _agent_lines("45m")
    assert lines["training"] == "ExecStart=/opt/parkbrake/bin/parkbrake agent --idle-after 45m"
    # A pool that sets none runs the agent with its own default: the settings table's row.
    assert lines["inference"] == "ExecStart=/opt/parkbrake/bin/parkbrake agent"
    assert set(_agent_lines(None).values()) == {"ExecStart=/opt/parkbrake/bin/parkbrake agent"}


def test_the_stacks_budgets_reach_the_ledgers_lambdas_and_no_other() -> None:
    from guardrails.stack_budgets import STACK_BUDGETS, budgets_from_json

    config = example()
    config["parkbrake:tenants"]["research"]["monthly_gpu_hours"] = 400
    stack = parse_stack_config("dev", config, "Pulumi.dev.yaml")
    run = run_offline(lambda: build_platform(stack), stack="dev", region=stack.region)
    reconciler = environment_of(run, "reconciler")
    declared = {
        budget.tenant: (budget.limit_usd, budget.gpu_hours)
        for budget in budgets_from_json(reconciler[STACK_BUDGETS])
    }
    assert declared == {"research": (6000, 400), "product": (2500, None)}
    assert STACK_BUDGETS not in environment_of(run, "reaper")  # outside the VPC: no ledger to apply them to


def test_a_gpu_hour_budget_below_the_minimum_is_a_config_problem() -> None:
    from tests.stacks.test_config import problems_of

    config = example()
    config["parkbrake:tenants"]["research"]["monthly_gpu_hours"] = 0
    assert "monthly_gpu_hours" in next(iter(problems_of(config)))
