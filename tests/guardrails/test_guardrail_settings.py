"""The PARKBRAKE_* environment: defaults, and every problem reported with its variable's name."""

from __future__ import annotations

from datetime import timedelta

import pytest

from guardrails.settings import SettingsError, aws_region, settings_from_environment


def test_defaults_follow_design() -> None:
    settings = settings_from_environment({"AWS_REGION": "eu-west-1"})
    assert settings.regions == ("eu-west-1",)
    assert settings.default_max_runtime == timedelta(minutes=90)
    assert settings.max_exemption == timedelta(hours=24)
    assert settings.reap_untagged is False
    assert settings.spot_action == "terminate"
    assert settings.stack is None


def test_everything_set() -> None:
    settings = settings_from_environment(
        {
            "PARKBRAKE_STACK": "prod",
            "PARKBRAKE_REGIONS": "us-east-1, us-west-2,us-east-1",
            "PARKBRAKE_DEFAULT_MAX_RUNTIME": "2h",
            "PARKBRAKE_MAX_EXEMPTION": "12h",
            "PARKBRAKE_REAP_UNTAGGED": "TRUE",
            "PARKBRAKE_POOL_MAX_RUNTIMES": "training=90m, inference=12h",
            "PARKBRAKE_SPOT_ACTION": "stop",
            "PARKBRAKE_SNS_TOPIC_ARN": "arn:aws:sns:us-east-1:1:t",
            "PARKBRAKE_DEADLINE_TARGET_ARN": "arn:aws:lambda:us-east-1:1:function:f",
            "PARKBRAKE_SCHEDULER_ROLE_ARN": "arn:aws:iam::1:role/r",
        }
    )
    assert settings.regions == ("us-east-1", "us-west-2")
    assert settings.default_max_runtime == timedelta(hours=2)
    assert settings.reap_untagged is True
    assert settings.pool_max_runtimes == {"training": timedelta(minutes=90), "inference": timedelta(hours=12)}
    assert settings.spot_action == "stop"
    assert settings.require_stack() == "prod"


def test_every_problem_is_reported_at_once_by_variable() -> None:
    with pytest.raises(SettingsError) as raised:
        settings_from_environment(
            {
                "PARKBRAKE_DEFAULT_MAX_RUNTIME": "90 minutes",
                "PARKBRAKE_MAX_EXEMPTION": "0",
                "PARKBRAKE_REAP_UNTAGGED": "maybe",
                "PARKBRAKE_POOL_MAX_RUNTIMES": "training=forever,inference",
                "PARKBRAKE_SPOT_ACTION": "hibernate",
                "PARKBRAKE_SNS_TOPIC_ARN": "my-topic",
            }
        )
    problems = raised.value.problems
    prefixes = [problem.split(":")[0] for problem in problems]
    # The settings table's rows first, in its order; then what the stack wires in.
    assert prefixes == [
        "PARKBRAKE_DEFAULT_MAX_RUNTIME",
        "PARKBRAKE_MAX_EXEMPTION",
        "PARKBRAKE_REAP_UNTAGGED",
        "PARKBRAKE_REGIONS",
        "PARKBRAKE_SPOT_ACTION",
        "PARKBRAKE_POOL_MAX_RUNTIMES[training]",
        "PARKBRAKE_POOL_MAX_RUNTIMES",
        "PARKBRAKE_SNS_TOPIC_ARN",
    ]
    assert raised.value.exit_code == 2


def test_the_decision_retention_is_400_days_by_default_and_never_under_13_months() -> None:
    assert settings_from_environment({"AWS_REGION": "us-east-1"}).decision_retention == timedelta(days=400)
    longer = settings_from_environment({"AWS_REGION": "us-east-1", "PARKBRAKE_DECISION_RETENTION": "730d"})
    assert longer.decision_retention == timedelta(days=730)
    with pytest.raises(SettingsError) as raised:
        settings_from_environment({"AWS_REGION": "us-east-1", "PARKBRAKE_DECISION_RETENTION": "30d"})
    assert raised.value.problems == ["PARKBRAKE_DECISION_RETENTION: '30d' is shorter than the floor of 396d"]


def test_missing_stack_is_named_when_needed() -> None:
    with pytest.raises(SettingsError, match="PARKBRAKE_STACK: not set"):
        settings_from_environment({"AWS_REGION": "us-east-1"}).require_stack()


def test_the_own_region_is_aws_region_else_aws_default_region() -> None:
    assert aws_region({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-1"}) == "eu-west-1"
    assert aws_region({"AWS_DEFAULT_REGION": "us-east-1"}) == "us-east-1"
    assert aws_region({"AWS_REGION": ""}) is None
    assert settings_from_environment({"AWS_DEFAULT_REGION": "us-east-2"}).regions == ("us-east-2",)


def test_the_ceiling_defaults_to_a_day_and_bounds_the_default_caps() -> None:
    assert settings_from_environment({"AWS_REGION": "us-east-1"}).max_runtime_ceiling == timedelta(hours=24)
    with pytest.raises(SettingsError) as raised:
        settings_from_environment(
            {
                "AWS_REGION": "us-east-1",
                "PARKBRAKE_MAX_RUNTIME_CEILING": "12h",
                "PARKBRAKE_DEFAULT_MAX_RUNTIME": "13h",
                "PARKBRAKE_POOL_MAX_RUNTIMES": "training=90m,inference=1d",
            }
        )
    assert raised.value.problems == [
        "PARKBRAKE_DEFAULT_MAX_RUNTIME: 13h is above PARKBRAKE_MAX_RUNTIME_CEILING (12h); "
        "lower the cap or raise the ceiling",
        "PARKBRAKE_POOL_MAX_RUNTIMES[inference]: 1d is above PARKBRAKE_MAX_RUNTIME_CEILING (12h); "
        "lower the cap or raise the ceiling",
    ]


def test_member_accounts_make_the_hub_and_each_bad_id_is_named() -> None:
    assert settings_from_environment({"AWS_REGION": "eu-west-1"}).member_accounts is None  # not a hub
    hub = settings_from_environment(
        {"AWS_REGION": "eu-west-1", "PARKBRAKE_MEMBER_ACCOUNTS": "111122223333, 444455556666"}
    )
    assert hub.member_accounts == frozenset({"111122223333", "444455556666"})
    with pytest.raises(SettingsError) as raised:
        settings_from_environment({"AWS_REGION": "eu-west-1", "PARKBRAKE_MEMBER_ACCOUNTS": "1111-2222,x"})
    assert raised.value.problems == [
        "PARKBRAKE_MEMBER_ACCOUNTS: '1111-2222' is not a 12-digit AWS account id",
        "PARKBRAKE_MEMBER_ACCOUNTS: 'x' is not a 12-digit AWS account id",
    ]


def test_the_hubs_spokes_parameter_is_an_ssm_path_or_unset() -> None:
    base = {"AWS_REGION": "us-east-1"}
    assert settings_from_environment(base).spokes_parameter is None
    hub = settings_from_environment({**base, "PARKBRAKE_SPOKES_PARAMETER": "/parkbrake/org/spokes"})
    assert hub.spokes_parameter == "/parkbrake/org/spokes"
    with pytest.raises(SettingsError) as refused:
        settings_from_environment({**base, "PARKBRAKE_SPOKES_PARAMETER": "parkbrake/org/spokes"})
    assert refused.value.problems == [
        "PARKBRAKE_SPOKES_PARAMETER: 'parkbrake/org/spokes' is not an SSM parameter path (/parkbrake/<stack>/spokes)"
    ]


def test_the_deadline_group_is_the_stacks_unless_a_spoke_names_its_own() -> None:
    base = {"AWS_REGION": "us-east-1", "PARKBRAKE_STACK": "org"}
    assert settings_from_environment(base).deadline_schedule_group() == "parkbrake-org-deadlines"
    spoke = {**base, "PARKBRAKE_DEADLINE_GROUP": "parkbrake-org-spoke-us-east-1-deadlines"}
    assert settings_from_environment(spoke).deadline_schedule_group() == spoke["PARKBRAKE_DEADLINE_GROUP"]
    with pytest.raises(SettingsError) as refused:
        settings_from_environment({**base, "PARKBRAKE_DEADLINE_GROUP": "parkbrake/org/deadlines"})
    assert refused.value.problems == [
        "PARKBRAKE_DEADLINE_GROUP: 'parkbrake/org/deadlines' is not a schedule group name "
        "(1-64 of letters, digits, '-', '_', '.')"
    ]
    with pytest.raises(SettingsError, match="PARKBRAKE_STACK: not set"):  # no group without a stack
        settings_from_environment({"AWS_REGION": "us-east-1"}).deadline_schedule_group()
