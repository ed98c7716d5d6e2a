"""The rules about GPU hosts and pools: the cap, the pool ceiling, allowed types, the reaper."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest
from policy_resources import (
    REAPER_FUNCTION,
    STACK_URN,
    compliant_stack,
    errors_alarm,
    gpu_group,
    gpu_host_tags,
    gpu_launch_template,
    heartbeat_alarm,
    reaper_function,
    reaper_schedule,
    replacing,
    resource,
    with_inputs,
)

from guardrails import tags
from policies.engine import judge
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation
from policies.rules import (
    gpu_hosts_have_a_cap,
    gpu_pool_size_ceiling,
    instance_types_allowed,
    reaper_is_deployed,
)
from stacks.offline import RegisteredResource


def violations(
    rule: PolicyRule, resources: Sequence[ResourceView], context: PolicyContext | None = None
) -> list[Violation]:
    return list(judge(rule, resources, context or PolicyContext()).violations)


def gpu_instance(**inputs: object) -> RegisteredResource:
    return resource(
        "aws:ec2/instance:Instance",
        "scratch-gpu",
        {
            "instanceType": "p4d.24xlarge",
            "instanceInitiatedShutdownBehavior": "stop",
            "tags": gpu_host_tags(),
            **inputs,
        },
    )


# --- gpu-hosts-have-a-cap -------------------------------------------------------------------------


def test_a_compliant_launch_template_and_instance_have_a_cap() -> None:
    assert violations(gpu_hosts_have_a_cap.RULE, [*compliant_stack(), gpu_instance()]) == []


@pytest.mark.parametrize(
    ("launch_template", "expected"),
    [
        (gpu_launch_template(host_tags={k: v for k, v in gpu_host_tags().items() if k != tags.MAX_RUNTIME}),
         "has no parkbrake:max-runtime tag in its instance tag specification"),
        (gpu_launch_template(host_tags=gpu_host_tags(**{tags.MAX_RUNTIME: "90 minutes"})),
         "parkbrake:max-runtime in its instance tag specification: '90 minutes' is not a duration"),
        (gpu_launch_template(host_tags=gpu_host_tags(**{tags.MAX_RUNTIME: "0m"})), "is zero"),
        (gpu_launch_template(host_tags=gpu_host_tags(**{tags.MAX_RUNTIME: "900h"})), "longer than the ceiling"),
        (with_inputs(gpu_launch_template(), tagSpecifications=[{"resourceType": "volume", "tags": gpu_host_tags()}]),
         "has no tag specification for resourceType 'instance'"),
        (with_inputs(gpu_launch_template(), instanceInitiatedShutdownBehavior=None),
         "instanceInitiatedShutdownBehavior is not set"),
        (with_inputs(gpu_launch_template(), instanceInitiatedShutdownBehavior="hibernate"),
         "instanceInitiatedShutdownBehavior is 'hibernate'"),
    ],
    ids=["tag-missing", "90-minutes", "zero", "over-ceiling", "no-instance-spec", "no-shutdown", "hibernate"],
)  # fmt: skip
def test_a_launch_template_without_a_usable_cap_is_a_violation(
    launch_template: RegisteredResource, expected: str
) -> None:
    found = violations(gpu_hosts_have_a_cap.RULE, replacing(compliant_stack(), launch_template))
    assert [violation.resource for violation in found] == [launch_template.urn]
    assert expected in found[0].message


def test_tags_on_the_template_itself_do_not_cap_its_hosts() -> None:
    # The template's own tags stay on the template; hosts only get the instance tag specification.
    untagged_hosts = gpu_host_tags()
    del untagged_hosts[tags.MAX_RUNTIME]
    template = with_inputs(gpu_launch_template(host_tags=untagged_hosts), tags=gpu_host_tags())
    assert len(violations(gpu_hosts_have_a_cap.RULE, [template])) == 1


def test_an_instance_needs_the_cap_in_its_own_tags_and_a_shutdown_behaviour() -> None:
    bare = gpu_instance(tags={tags.MANAGED: "true"}, instanceInitiatedShutdownBehavior=None)
    messages = [violation.message for violation in violations(gpu_hosts_have_a_cap.RULE, [bare])]
    assert messages == [
        "has no parkbrake:max-runtime tag in its tags",
        "instanceInitiatedShutdownBehavior is not set; set 'stop' (or 'terminate' in an Auto Scaling group or "
        "for spot) so the host can stop itself",
    ]


def test_non_accelerator_hosts_are_not_capped() -> None:
    web = resource("aws:ec2/launchTemplate:LaunchTemplate", "web", {"instanceType": "m7i.large"})
    assert violations(gpu_hosts_have_a_cap.RULE, [web, gpu_instance(instanceType="t3.micro", tags={})]) == []


def test_the_ceiling_on_caps_is_configurable() -> None:
    stack = compliant_stack()  # caps of 4h
    assert (
        violations(gpu_hosts_have_a_cap.RULE, stack, PolicyContext(max_runtime_ceiling=timedelta(hours=4)))
        == []
    )
    strict = violations(
        gpu_hosts_have_a_cap.RULE, stack, PolicyContext(max_runtime_ceiling=timedelta(hours=2))
    )
    assert "'4h' is longer than the ceiling of 2h" in strict[0].message


# --- gpu-pool-size-ceiling ------------------------------------------------------------------------


def test_a_gpu_group_at_the_ceiling_passes_and_above_it_fails() -> None:
    context = PolicyContext(max_pool_size=4)
    assert (
        violations(gpu_pool_size_ceiling.RULE, replacing(compliant_stack(), gpu_group(max_size=4.0)), context)
        == []
    )
    found = violations(
        gpu_pool_size_ceiling.RULE, replacing(compliant_stack(), gpu_group(max_size=5.0)), context
    )
    assert [(v.resource, v.message) for v in found] == [
        (
            gpu_group().urn,
            "maxSize 5 is above the GPU pool ceiling of 4; lower it or raise the ceiling deliberately",
        )
    ]


@pytest.mark.parametrize(
    "group",
    [
        # Found by its sibling accelerator launch template (same GpuPool component).
        gpu_group(max_size=9.0, group_tags={}),
        # Found by its pool tag, with no launch template in sight.
        resource(
            "aws:autoscaling/group:Group", "loose", {"maxSize": 9, "tags": [{"key": tags.POOL, "value": "x"}]}
        ),
        # Found by an accelerator type in its mixed-instances overrides.
        resource(
            "aws:autoscaling/group:Group",
            "spot",
            {
                "maxSize": 9.0,
                "mixedInstancesPolicy": {"launchTemplate": {"overrides": [{"instanceType": "p5.48xlarge"}]}},
            },
        ),
    ],
    ids=["sibling-template", "pool-tag", "mixed-instances"],
)
def test_every_way_a_group_is_known_to_be_a_gpu_pool(group: RegisteredResource) -> None:
    found = violations(gpu_pool_size_ceiling.RULE, [gpu_launch_template(), group])
    assert [violation.resource for violation in found] == [group.urn]


def test_groups_of_ordinary_hosts_are_not_capped() -> None:
    web = resource("aws:autoscaling/group:Group", "web", {"maxSize": 100.0, "tags": []}, parent="urn:web")
    assert violations(gpu_pool_size_ceiling.RULE, [gpu_launch_template(), web]) == []


def test_a_gpu_group_without_a_numeric_max_is_a_violation() -> None:
    found = violations(
        gpu_pool_size_ceiling.RULE, [gpu_launch_template(), with_inputs(gpu_group(), maxSize="lots")]
    )
    assert found[0].message == "maxSize is 'lots', not a number of hosts"


# --- instance-types-allowed -----------------------------------------------------------------------


def test_priced_accelerator_types_are_allowed_by_default() -> None:
    assert violations(instance_types_allowed.RULE, [*compliant_stack(), gpu_instance()]) == []


def test_types_outside_the_allow_list_are_violations_wherever_they_appear() -> None:
    context = PolicyContext(allowed_instance_types=frozenset({"g6.xlarge"}))
    spot = resource(
        "aws:autoscaling/group:Group",
        "spot",
        {"maxSize": 1.0, "mixedInstancesPolicy": {"launchTemplate": {"overrides": [{"instanceType": "g6.xlarge"}, {"instanceType": "p5.48xlarge"}]}}},
    )  # fmt: skip
    found = violations(instance_types_allowed.RULE, [gpu_launch_template(), gpu_instance(), spot], context)
    assert [(v.resource, v.message) for v in found] == sorted(  # the engine's order
        [
            (gpu_launch_template().urn, "instance type g5.12xlarge is not allowed; allowed: g6.xlarge"),
            (gpu_instance().urn, "instance type p4d.24xlarge is not allowed; allowed: g6.xlarge"),
            (spot.urn, "instance type p5.48xlarge is not allowed; allowed: g6.xlarge"),
        ]
    )


def test_an_unpriced_accelerator_type_is_not_allowed_by_default() -> None:
    found = violations(instance_types_allowed.RULE, [gpu_launch_template(instance_type="p9.96xlarge")])
    assert found[0].message.startswith("instance type p9.96xlarge is not allowed; allowed: ")


def test_ordinary_instance_types_are_left_alone() -> None:
    web = resource("aws:ec2/launchTemplate:LaunchTemplate", "web", {"instanceType": "m7i.large"})
    assert (
        violations(instance_types_allowed.RULE, [web], PolicyContext(allowed_instance_types=frozenset()))
        == []
    )


# --- reaper-is-deployed ---------------------------------------------------------------------------


def test_a_stack_with_a_gpu_pool_and_the_full_reaper_passes() -> None:
    assert violations(reaper_is_deployed.RULE, compliant_stack()) == []


def test_a_stack_without_gpu_pools_needs_no_reaper() -> None:
    stack = [item for item in compliant_stack() if item.type.startswith(("aws:rds", "aws:elasticache"))]
    assert violations(reaper_is_deployed.RULE, stack) == []


def without(stack: list[RegisteredResource], *removed: RegisteredResource) -> list[RegisteredResource]:
    urns = {item.urn for item in removed}
    return [item for item in stack if item.urn not in urns]


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        (without(compliant_stack(), reaper_function()), f"no reaper Lambda function named '{REAPER_FUNCTION}'"),
        (without(compliant_stack(), reaper_schedule()), "no EventBridge Scheduler schedule 'parkbrake-dev-reaper'"),
        (replacing(compliant_stack(), with_inputs(reaper_schedule(), state="DISABLED")), "is DISABLED"),
        (replacing(compliant_stack(), with_inputs(reaper_schedule(), scheduleExpression="cron(0 * * * ? *)")),
         "the sweep runs on a rate(...) schedule"),
        (without(compliant_stack(), errors_alarm()), f"no alarm with an action watches AWS/Lambda Errors of {REAPER_FUNCTION}"),
        (replacing(compliant_stack(), with_inputs(errors_alarm(), dimensions={"FunctionName": "someone-else"})),
         "watches AWS/Lambda Errors"),
        (without(compliant_stack(), heartbeat_alarm()), "watches the reaper's heartbeat"),
        (replacing(compliant_stack(), with_inputs(heartbeat_alarm(), dimensions={"Guardrail": "deadline"})),
         "watches the reaper's heartbeat"),
        (replacing(compliant_stack(), with_inputs(heartbeat_alarm(), treatMissingData="notBreaching")),
         "must treat missing data as breaching"),
        (replacing(compliant_stack(), with_inputs(heartbeat_alarm(), alarmActions=[])), "watches the reaper's heartbeat"),
        (replacing(compliant_stack(), with_inputs(errors_alarm(), actionsEnabled=False)), "watches AWS/Lambda Errors"),
    ],
    ids=[
        "no-function", "no-schedule", "schedule-disabled", "cron-not-rate", "no-errors-alarm",
        "errors-alarm-elsewhere", "no-heartbeat-alarm", "heartbeat-of-another-guardrail",
        "heartbeat-missing-data-ok", "heartbeat-pages-nobody", "errors-actions-disabled",
    ],
)  # fmt: skip
def test_every_missing_piece_of_the_reaper_is_a_stack_violation(
    stack: list[RegisteredResource], expected: str
) -> None:
    found = violations(reaper_is_deployed.RULE, stack)
    assert len(found) == 1, found
    assert found[0].resource == STACK_URN
    assert expected in found[0].message


def test_a_stack_with_only_a_gpu_pool_lists_every_missing_piece() -> None:
    found = violations(reaper_is_deployed.RULE, [gpu_launch_template(), gpu_group()])
    assert len(found) == 4  # function, schedule, errors alarm, heartbeat alarm


def test_a_schedule_is_recognised_by_its_target_as_well_as_its_name() -> None:
    renamed = with_inputs(reaper_schedule(), name="sweep-every-five-minutes")
    assert violations(reaper_is_deployed.RULE, replacing(compliant_stack(), renamed)) == []


def test_alarms_on_metric_math_and_undimensioned_metrics_count() -> None:
    errors = with_inputs(
        errors_alarm(),
        namespace=None,
        metricName=None,
        dimensions=None,
        metricQueries=[{"id": "e", "metric": {"namespace": "AWS/Lambda", "metricName": "Errors",
                                              "dimensions": {"FunctionName": REAPER_FUNCTION}}}],
    )  # fmt: skip
    heartbeat = with_inputs(heartbeat_alarm(), dimensions=None)
    assert violations(reaper_is_deployed.RULE, replacing(compliant_stack(), errors, heartbeat)) == []
