"""The example stacks, run through the real Pulumi program offline, pass every mandatory policy, parked or not."""

from __future__ import annotations

import json
from decimal import Decimal
from functools import cache
from pathlib import Path

import pytest
from policy_resources import takes_tags, with_inputs

from policies.engine import evaluate
from policies.resources import accelerator_hosts, gpu_autoscaling_groups
from policies.rule import PolicyContext
from policies.rules.required_tags import TAGGABLE_TYPES
from stacks.config import StackConfig, load_stack_config
from stacks.offline import OfflineRun, RegisteredResource, run_offline

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [("dev", False), ("dev", True), ("prod", False), ("prod", True)]


@cache
def example(stack: str, parked: bool) -> tuple[StackConfig, OfflineRun]:
    from stacks.platform import build_platform

    config = load_stack_config(stack, REPO_ROOT).with_parked(parked)
    return config, run_offline(lambda: build_platform(config), stack=config.stack, region=config.region)


def context_for(config: StackConfig) -> PolicyContext:
    """What ``plan`` judges the stack against: the stack's own policy settings and budgets."""
    return PolicyContext(
        max_pool_size=config.policy.max_pool_size,
        allowed_instance_types=frozenset(config.policy.allowed_instance_types),
        tenant_budget_usd=Decimal(str(config.total_budget_usd)),
    )


@pytest.mark.parametrize(
    ("stack", "parked"), EXAMPLES, ids=[f"{s}-{'parked' if p else 'unparked'}" for s, p in EXAMPLES]
)
def test_the_example_stack_passes_every_mandatory_policy(stack: str, parked: bool) -> None:
    config, run = example(stack, parked)
    failures = {
        verdict.policy: [f"{violation.resource}: {violation.message}" for violation in verdict.violations]
        for verdict in evaluate(run.resources, context_for(config))
        if verdict.enforcement == "mandatory" and not verdict.passed
    }
    assert failures == {}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_gpu_rules_see_every_pool_so_they_do_not_pass_vacuously(stack: str) -> None:
    config, run = example(stack, False)
    assert len(accelerator_hosts(run.resources)) == len(config.pools)
    assert len(list(gpu_autoscaling_groups(run.resources))) == len(config.pools)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_taggable_type_the_stack_declares_is_checked_for_tags(stack: str) -> None:
    _, run = example(stack, False)
    declared = {resource.type for resource in run.resources if resource.type.startswith("aws:")}
    assert {type_token for type_token in declared if takes_tags(type_token)} - TAGGABLE_TYPES == set()


def test_the_rules_bite_on_the_real_stack() -> None:
    """Negative control: break the real reaper policy and launch template, and the rules say so."""
    config, run = example("dev", False)

    def break_it(resource: RegisteredResource) -> RegisteredResource:
        if resource.type == "aws:iam/rolePolicy:RolePolicy" and resource.name == "reaper":
            document = json.loads(resource.inputs["policy"])
            for statement in document["Statement"]:
                statement.pop("Condition", None)
            return with_inputs(resource, policy=json.dumps(document))
        if resource.type == "aws:ec2/launchTemplate:LaunchTemplate":
            return with_inputs(resource, instanceInitiatedShutdownBehavior=None)
        return resource

    broken = [break_it(resource) for resource in run.resources]
    failed = {
        verdict.policy: {violation.resource for violation in verdict.violations}
        for verdict in evaluate(broken, context_for(config))
        if not verdict.passed
    }
    templates = {r.urn for r in run.resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"}
    reaper_policy = {
        r.urn for r in run.resources if r.type == "aws:iam/rolePolicy:RolePolicy" and r.name == "reaper"
    }
    assert failed == {"gpu-hosts-have-a-cap": templates, "no-unconditional-stop": reaper_policy}
