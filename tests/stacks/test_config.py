"""The stack config model: the example stacks parse, and every bad value is named by its YAML path."""

from __future__ import annotations

import copy
import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from holiday_calendar import CHRISTMAS, ics
from ruamel.yaml import YAML

from guardrails.errors import InputError
from stacks.config import Capacity, load_stack_config, parse_stack_config
from stacks.validation import ConfigError
from tests.conftest import REPO_ROOT


def example(stack: str = "dev") -> dict[str, Any]:
    document = YAML(typ="safe").load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())
    return copy.deepcopy(document["config"])


def problems_of(config: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as raised:
        parse_stack_config("dev", config, "Pulumi.dev.yaml")
    return {problem.path: problem.message for problem in raised.value.problems}


def test_example_stacks_parse() -> None:
    dev = load_stack_config("dev", REPO_ROOT)
    assert dev.region == "us-east-1"
    assert dev.parked is False
    assert dev.pools["training"].max_runtime == timedelta(hours=4)
    assert dev.pools["inference"].capacity == Capacity(min=0, desired=0, max=3)  # scales to zero
    assert dev.nightly is not None
    assert dev.nightly.timezone == "Europe/Berlin"
    assert dev.total_budget_usd == 8500
    prod = load_stack_config("prod", REPO_ROOT)
    assert prod.policy.allowed_instance_types == ("p4d.24xlarge", "p5.48xlarge", "g6.xlarge", "g6.2xlarge")


def test_parked_capacity_keeps_the_ceiling() -> None:
    config = load_stack_config("prod", REPO_ROOT).with_parked(True)  # prod keeps inference hosts on
    assert config.pool_capacity(config.pools["inference"]) == Capacity(0, 0, 6)
    assert config.with_parked(False).pool_capacity(config.pools["inference"]) == Capacity(2, 2, 6)


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [
        (lambda c: c["parkbrake:pools"]["training"].update(max_runtime="90 minutes"),
         "pools.training.max_runtime", '"90 minutes" is not a duration; use 90m, 2h, 1h30m'),
        (lambda c: c["parkbrake:pools"]["training"].update(max_runtime="0m"), "pools.training.max_runtime", "is zero"),
        (lambda c: c["parkbrake:pools"]["training"].update(max_runtime="900h"),
         "pools.training.max_runtime", "longer than the ceiling"),
        (lambda c: c["parkbrake:pools"]["training"].update(instance_type="m5.large"),
         "pools.training.instance_type", "not an accelerated-computing instance type"),
        (lambda c: c["parkbrake:pools"]["training"].update(instance_type="g9.mega"),
         "pools.training.instance_type", "has no price"),
        (lambda c: c["parkbrake:pools"]["training"].update(min=2, desired=1),
         "pools.training", "min ≤ desired ≤ max"),
        (lambda c: c["parkbrake:pools"]["training"].update(desired=-1), "pools.training.desired", "out of range"),
        (lambda c: c["parkbrake:pools"]["training"].update(max="two"), "pools.training.max", "is not an integer"),
        (lambda c: c["parkbrake:pools"]["training"].update(role="batch"), "pools.training.role", "training or inference"),
        (lambda c: c["parkbrake:pools"]["training"].update(capacity_type="reserved"),
         "pools.training.capacity_type", "on-demand or spot"),
        (lambda c: c["parkbrake:pools"]["training"].update(tenant="nobody"), "pools.training.tenant", "is not a tenant"),
        (lambda c: c["parkbrake:pools"]["training"].update(desried=1), "pools.training.desried", "unknown key"),
        (lambda c: c["parkbrake:pools"].update({"Bad Name": {}}), "pools.Bad Name", "not a valid name"),
        (lambda c: c["parkbrake:pools"]["training"].update(max=9), "pools.training.max", "policy.max_pool_size"),
        (lambda c: c.update({"aws:region": "mars-1"}), "aws:region", "not an AWS region"),
        (lambda c: c.update({"parkbrake:parked": "yes"}), "parked", "not a boolean"),
        (lambda c: c.update({"parkbrake:tenants": None}), "tenants", "is required"),
        (lambda c: c["parkbrake:tenants"]["research"].update(monthly_budget_usd=0),
         "tenants.research.monthly_budget_usd", "out of range"),
        (lambda c: c["parkbrake:nightly"].update(cron="every night"), "nightly.cron", "five-field cron"),
        (lambda c: c["parkbrake:nightly"].update(cron="0 25 * * *"), "nightly.cron", "five-field cron"),
        (lambda c: c["parkbrake:nightly"].update(timezone="Mars/Olympus"), "nightly.timezone", "IANA time zone"),
        (lambda c: c["parkbrake:nightly"].update(pool="inference"), "nightly.pool", "starts a training pool"),
        (lambda c: c["parkbrake:nightly"].update(pool="gpu"), "nightly.pool", "is not a pool"),
        (lambda c: c["parkbrake:nightly"].update(capacity=3), "nightly.capacity", "above pools.training.max"),
        (lambda c: c["parkbrake:control_plane"].update(cpu=300), "control_plane.cpu", "not a Fargate CPU size"),
        (lambda c: c["parkbrake:control_plane"].update(memory=8192), "control_plane.memory", "does not fit cpu 512"),
        (lambda c: c["parkbrake:control_plane"].update(min=2, desired=1), "control_plane", "min ≤ desired ≤ max"),
        (lambda c: c["parkbrake:control_plane"].update(health_path="healthz"),
         "control_plane.health_path", "a path such as /healthz"),
        (lambda c: c["parkbrake:control_plane"].update(image=""), "control_plane.image", "container image"),
        (lambda c: c["parkbrake:inference"].update(pool="training"), "inference.pool", "use an inference pool"),
        (lambda c: c["parkbrake:inference"].update(gpus_per_task=4), "inference.gpus_per_task", "more than the 1 GPU"),
        (lambda c: c["parkbrake:inference"].update(desired_per_colour=4),
         "inference.desired_per_colour", "above pools.inference.max"),
        (lambda c: c["parkbrake:database"].update(min_acu=0.3), "database.min_acu", "multiple of 0.5"),
        (lambda c: c["parkbrake:database"].update(min_acu=8, max_acu=4), "database", "must not exceed max_acu"),
        (lambda c: c["parkbrake:cache"].update(node_type="cache.x1.huge"), "cache.node_type", "has no price"),
        (lambda c: c["parkbrake:guardrails"].update(sweep_every="90s"), "guardrails.sweep_every", "whole minutes"),
        (lambda c: c["parkbrake:guardrails"].update(sweep_every="2h"), "guardrails.sweep_every", "ceiling of 1h"),
        (lambda c: c["parkbrake:guardrails"].update(max_exemption="30d"), "guardrails.max_exemption", "ceiling"),
        (lambda c: c["parkbrake:guardrails"].update(max_runtime_ceiling="12h"),
         "pools.inference.max_runtime", "1d is above guardrails.max_runtime_ceiling (12h)"),
        (lambda c: c["parkbrake:guardrails"].update(max_runtime_ceiling="1h", default_max_runtime="90m"),
         "guardrails.default_max_runtime", "1h30m is above guardrails.max_runtime_ceiling (1h)"),
        (lambda c: c["parkbrake:guardrails"].update(max_runtime_ceiling="a day"),
         "guardrails.max_runtime_ceiling", "is not a duration"),
        (lambda c: c["parkbrake:guardrails"].update(alarm_email="oncall"), "guardrails.alarm_email", "e-mail"),
        (lambda c: c["parkbrake:guardrails"].update(warn_before="soon"), "guardrails.warn_before", "is not a duration"),
        (lambda c: c["parkbrake:guardrails"].update(warn_before="1d"),
         "guardrails.warn_before", "1d is not shorter than guardrails.max_runtime_ceiling (1d)"),
        (lambda c: c["parkbrake:guardrails"].update(chat_webhook_secret="https://hooks.slack.com/services/T/B/X"),
         "guardrails.chat_webhook_secret", "is not a Secrets Manager secret ARN"),
        (lambda c: c["parkbrake:pools"]["training"].update(owner="ana at example"),
         "pools.training.owner", "'ana at example' is neither an e-mail address nor a chat handle"),
        (lambda c: c["parkbrake:guardrails"].pop("alarm_email"), "guardrails.alarm_email", "is required"),
        (lambda c: c["parkbrake:guardrails"].update(alarm_email="oncall@example.com"),
         "guardrails.alarm_email", "is a placeholder"),
        (lambda c: c["parkbrake:guardrails"].update(alarm_email="ops@team.test"), "guardrails.alarm_email", "placeholder"),
        (lambda c: c["parkbrake:guardrails"].update(alarm_topic_arn="topic"), "guardrails.alarm_topic_arn", "SNS topic ARN"),
        (lambda c: c.update({"parkbrake:network": {"vpc_id": "vpc-0abc", "public_subnet_ids": ["subnet-1"],
                                                   "private_subnet_ids": ["subnet-2", "subnet-3"]}}),
         "network.public_subnet_ids", "at least two subnets"),
        (lambda c: c.update({"parkbrake:network": {"cidr": "10.0.0.0/8"}}), "network.cidr", "between /16 and /24"),
        (lambda c: c.update({"parkbrake:policy": {"max_pool_size": 0}}), "policy.max_pool_size", "out of range"),
        (lambda c: c.update({"parkbrake:colour": "blue"}), "colour", "unknown key"),
        (lambda c: c.update({"parked": True}), "parked", "need a namespace"),
    ],
)  # fmt: skip
def test_each_bad_value_is_reported_by_its_path(mutate: Any, path: str, message: str) -> None:
    config = example()
    mutate(config)
    problems = problems_of(config)
    assert path in problems, problems
    assert message in problems[path]


def test_owners_warning_and_chat_channel() -> None:
    config = example()
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:parkbrake/dev/chat-webhook-AbCdEf"
    config["parkbrake:guardrails"].update(warn_before="30m", chat_webhook_secret=secret)
    config["parkbrake:pools"]["training"].update(owner="@ml-research")
    parsed = parse_stack_config("dev", config, "Pulumi.dev.yaml")
    assert parsed.guardrails.warn_before == timedelta(minutes=30)
    assert parsed.guardrails.chat_webhook_secret_arn == secret
    assert parsed.pools["training"].owner == "@ml-research"
    defaults = load_stack_config("dev", REPO_ROOT)
    assert defaults.guardrails.warn_before == timedelta(minutes=15)
    assert (defaults.guardrails.chat_webhook_secret_arn, defaults.pools["training"].owner) == (None, None)


def test_every_problem_is_reported_at_once() -> None:
    config = example()
    config["parkbrake:pools"]["training"].update(max_runtime="90 minutes", instance_type="m5.large")
    config["parkbrake:nightly"]["cron"] = "nightly"
    config["aws:region"] = "nowhere"
    with pytest.raises(ConfigError) as raised:
        parse_stack_config("dev", config, "Pulumi.dev.yaml")
    assert {problem.path for problem in raised.value.problems} == {
        "pools.training.max_runtime",
        "pools.training.instance_type",
        "nightly.cron",
        "aws:region",
    }
    text = str(raised.value)
    assert text.startswith("Pulumi.dev.yaml has 4 problems:")
    assert 'pools.training.max_runtime: "90 minutes" is not a duration; use 90m, 2h, 1h30m or 5400s' in text
    assert raised.value.exit_code == 2


def test_adopting_an_existing_vpc() -> None:
    config = example()
    config["parkbrake:network"] = {
        "vpc_id": "vpc-0abc123",
        "public_subnet_ids": ["subnet-a", "subnet-b"],
        "private_subnet_ids": ["subnet-c", "subnet-d"],
    }
    parsed = parse_stack_config("dev", config, "Pulumi.dev.yaml")
    assert parsed.network.adopts_existing
    assert parsed.network.private_subnet_ids == ("subnet-c", "subnet-d")


def test_unknown_stack_and_broken_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no config for stack 'qa'.*stacks here: none"):
        load_stack_config("qa", tmp_path)
    (tmp_path / "Pulumi.qa.yaml").write_text("config: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_stack_config("qa", tmp_path)
    (tmp_path / "Pulumi.qa.yaml").write_text("encryptionsalt: x\n")
    with pytest.raises(InputError, match="has no 'config:' mapping"):
        load_stack_config("qa", tmp_path)


def test_a_cron_eventbridge_cannot_express_is_rejected() -> None:
    config = example()
    config["parkbrake:nightly"]["cron"] = "0 1 1 * 1"  # cron reads "the 1st OR a Monday"
    assert "EventBridge cannot express" in problems_of(config)["nightly.cron"]


def test_live_colour_and_layers_are_validated() -> None:
    config = example()
    config["parkbrake:inference"]["live_colour"] = "red"
    config["parkbrake:guardrails"]["database_layer_arns"] = ["psycopg"]
    problems = problems_of(config)
    assert "blue or green" in problems["inference.live_colour"]
    assert "not a Lambda layer version ARN" in problems["guardrails.database_layer_arns[0]"]


def test_an_adopted_topic_needs_no_address() -> None:
    config = example()
    config["parkbrake:guardrails"].pop("alarm_email")
    config["parkbrake:guardrails"]["alarm_topic_arn"] = "arn:aws:sns:us-east-1:123456789012:platform-oncall"

    parsed = parse_stack_config("dev", config, "Pulumi.dev.yaml")
    assert (parsed.guardrails.alarm_email, parsed.guardrails.alarm_topic_arn) == (
        None,
        "arn:aws:sns:us-east-1:123456789012:platform-oncall",
    )


def test_pulumi_toolchain_installs_the_project_with_its_dependencies() -> None:
    project = YAML(typ="safe").load((REPO_ROOT / "Pulumi.yaml").read_text())
    assert project["runtime"]["options"] == {"toolchain": "pip", "virtualenv": ".venv"}
    assert project["main"] == "stacks/"
    lines = [
        line.strip()
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines == ["-e ."]  # the project: pyproject.toml's dependencies, pulumi and pulumi-aws among them
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert '"pulumi>=' in pyproject
    assert '"pulumi-aws>=' in pyproject


def test_inference_scales_to_zero_after_idle_after_unless_turned_off() -> None:
    default = parse_stack_config("dev", example(), "Pulumi.dev.yaml").inference
    config = example()
    config["parkbrake:inference"]["scale_to_zero_after"] = "1h"
    hourly = parse_stack_config("dev", config, "Pulumi.dev.yaml").inference
    config["parkbrake:inference"]["scale_to_zero"] = False
    always_on = parse_stack_config("dev", config, "Pulumi.dev.yaml").inference
    config["parkbrake:inference"]["scale_to_zero_after"] = "2d"

    assert default is not None
    assert default.scale_to_zero_after == timedelta(minutes=15)
    assert hourly is not None
    assert hourly.scale_to_zero_after == timedelta(hours=1)
    assert always_on is not None
    assert always_on.scale_to_zero_after is None
    assert "inference.scale_to_zero_after" in problems_of(config)


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        (None, "is required"),
        ({}, "needs exactly one of tools_artifact"),
        ({"ami_id": "ami-0abc1234", "agent_package": "parkbrake"}, "got ami_id, agent_package"),
        ({"tools_artifact": "dist/tools.tar.gz", "tools_sha256": "abc"}, "64 hex digits"),
        ({"tools_artifact": "dist/tools.tar.gz"}, "is required"),
        ({"ami_id": "image-1"}, "an AMI id"),
    ],
)
def test_hosts_take_their_tools_from_exactly_one_source(hosts: dict[str, Any] | None, message: str) -> None:
    config = example()
    config["parkbrake:hosts"] = hosts
    problems = problems_of(config)
    assert any(message in text for path, text in problems.items() if path.startswith("hosts")), problems


def test_an_artifact_on_disk_must_match_its_hash(tmp_path: Path) -> None:
    artifact = tmp_path / "tools.tar.gz"
    artifact.write_bytes(b"the tools")
    config = example()
    config["parkbrake:hosts"] = {"tools_artifact": str(artifact), "tools_sha256": "0" * 64}

    problem = problems_of(config)["hosts.tools_sha256"]
    assert "is not the SHA-256 of" in problem
    assert "scripts/build_host_tools.py" in problem
    config["parkbrake:hosts"]["tools_sha256"] = hashlib.sha256(b"the tools").hexdigest()
    assert parse_stack_config("dev", config, "Pulumi.dev.yaml").hosts.tools_artifact == artifact


def test_the_nightly_calendar_is_read_relative_to_the_project_and_checked_whole(tmp_path: Path) -> None:
    (tmp_path / "closed-days.ics").write_text(ics(CHRISTMAS))
    config = example()
    config["parkbrake:nightly"]["calendar"] = "closed-days.ics"

    nightly = parse_stack_config("dev", config, "Pulumi.dev.yaml", project_dir=tmp_path).nightly

    assert nightly is not None
    assert nightly.calendar == ics(CHRISTMAS)
    assert example()["parkbrake:nightly"].get("calendar") is None
    assert load_stack_config("dev", REPO_ROOT).nightly.calendar is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, 'cannot read "closed-days.ics": No such file or directory'),
        ("Christmas, Boxing Day", "is not an iCalendar (RFC 5545) document"),
        (ics("UID:x@parkbrake\nSUMMARY:Someday"), "event 'Someday' has no DTSTART"),
        (
            ics(*[CHRISTMAS.replace("christmas@", f"day-{n}@") for n in range(80)]),
            "above the 8192 an SSM parameter holds",
        ),
    ],
)
def test_an_unusable_calendar_is_named_with_its_fix(
    tmp_path: Path, content: str | None, message: str
) -> None:
    if content is not None:
        (tmp_path / "closed-days.ics").write_text(content)
    config = example()
    config["parkbrake:nightly"]["calendar"] = "closed-days.ics"

    with pytest.raises(ConfigError) as raised:
        parse_stack_config("dev", config, "Pulumi.dev.yaml", project_dir=tmp_path)

    problems = {problem.path: problem.message for problem in raised.value.problems}
    assert message in problems["nightly.calendar"]


def test_stopped_retention_and_terminate_stopped() -> None:
    config = example()
    assert load_stack_config("dev", REPO_ROOT).guardrails.stopped_retention == timedelta(days=7)
    config["parkbrake:guardrails"].update(stopped_retention="14d", terminate_stopped=True)

    guardrails = parse_stack_config("dev", config, "Pulumi.dev.yaml").guardrails

    assert (guardrails.stopped_retention, guardrails.terminate_stopped) == (timedelta(days=14), True)
    config["parkbrake:guardrails"].update(stopped_retention="90d", terminate_stopped="sometimes")
    problems = problems_of(config)
    assert "guardrails.stopped_retention" in problems
    assert "guardrails.terminate_stopped" in problems


def test_decision_retention_defaults_to_400_days_and_keeps_at_least_13_months() -> None:
    config = example()
    assert load_stack_config("dev", REPO_ROOT).guardrails.decision_retention == timedelta(days=400)
    config["parkbrake:guardrails"].update(decision_retention="730d")
    assert parse_stack_config("dev", config, "Pulumi.dev.yaml").guardrails.decision_retention == timedelta(
        days=730
    )
    for value, message in (("90d", "shorter than the floor of 396d"), ("20000d", "longer than the ceiling of 3653d"),
                           ("forever", "is not a duration")):  # fmt: skip
        config["parkbrake:guardrails"].update(decision_retention=value)
        assert message in problems_of(config)["guardrails.decision_retention"]


def test_fallback_instance_types_are_checked_each_by_its_index() -> None:
    config = example()
    config["parkbrake:pools"]["training"]["fallback_instance_types"] = ["g6e.12xlarge", "g5.48xlarge"]
    assert parse_stack_config("dev", config, "Pulumi.dev.yaml").pools["training"].instance_types == (
        config["parkbrake:pools"]["training"]["instance_type"],
        "g6e.12xlarge",
        "g5.48xlarge",
    )

    primary = config["parkbrake:pools"]["training"]["instance_type"]
    config["parkbrake:pools"]["training"]["fallback_instance_types"] = [primary, "m5.large", "g5.9000xlarge"]
    problems = problems_of(config)
    assert "listed twice" in problems["pools.training.fallback_instance_types[0]"]
    assert (
        "not an accelerated-computing instance type" in problems["pools.training.fallback_instance_types[1]"]
    )
    assert "no price in guardrails/prices.json" in problems["pools.training.fallback_instance_types[2]"]
    config["parkbrake:pools"]["training"]["fallback_instance_types"] = []
    assert "is empty" in problems_of(config)["pools.training.fallback_instance_types"]
