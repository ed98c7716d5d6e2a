"""required-tags and data-stores-encrypted-and-private."""

from __future__ import annotations

import pytest
from policy_resources import (
    STACK,
    base_tags,
    cache,
    compliant_stack,
    database,
    gpu_group,
    gpu_host_tags,
    gpu_launch_template,
    replacing,
    resource,
    takes_tags,
    with_inputs,
)

from guardrails import tags
from policies.engine import judge
from policies.rule import PolicyContext
from policies.rules import data_stores_encrypted_and_private, required_tags
from stacks.offline import RegisteredResource


def messages(
    rule_module: object, resources: list[RegisteredResource], context: PolicyContext | None = None
) -> list[tuple[str, str]]:
    verdict = judge(rule_module.RULE, resources, context or PolicyContext())  # type: ignore[attr-defined]
    return [(violation.resource, violation.message) for violation in verdict.violations]


# --- required-tags ---------------------------------------------------------------------------------


def test_a_fully_tagged_stack_passes() -> None:
    assert messages(required_tags, compliant_stack()) == []


def test_untaggable_resources_are_not_asked_for_tags() -> None:
    schedule = resource("aws:scheduler/schedule:Schedule", "s", {"scheduleExpression": "rate(5 minutes)"})
    attachment = resource("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "a", {"role": "r"})
    component = RegisteredResource("parkbrake:aws:GpuPool", "training", "urn:x", None, False, {})
    assert messages(required_tags, [schedule, attachment, component]) == []


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (with_inputs(database()[0], tags=None), "its tags lack parkbrake:managed, parkbrake:stack, parkbrake:revision"),
        (with_inputs(cache(), tags={tags.MANAGED: "true", tags.STACK: STACK}), "its tags lack parkbrake:revision"),
        (with_inputs(cache(), tags=base_tags(**{tags.REVISION: ""})), "its tags lack parkbrake:revision"),
        (with_inputs(cache(), tags=base_tags(**{tags.MANAGED: "yes"})), "parkbrake:managed is 'yes'; it must be 'true'"),
        (with_inputs(cache(), tags=base_tags(**{tags.STACK: "prod"})),
         "parkbrake:stack is 'prod' but the resource belongs to stack 'dev'"),
        (gpu_group(group_tags={tags.MANAGED: "true"}), "its tags lack parkbrake:stack, parkbrake:revision"),
    ],
    ids=["untagged", "no-revision", "empty-revision", "managed-not-true", "other-stack", "group-list-tags"],
)  # fmt: skip
def test_missing_or_wrong_base_tags_are_violations(broken: RegisteredResource, expected: str) -> None:
    found = messages(required_tags, replacing(compliant_stack(), broken))
    assert len(found) == 1, found
    assert found[0][0] == broken.urn
    assert expected in found[0][1]


def test_gpu_hosts_also_need_pool_tenant_and_cap() -> None:
    launched = base_tags()  # no pool, tenant or max-runtime on the hosts
    template = with_inputs(gpu_launch_template(host_tags=launched), tags=gpu_host_tags())
    assert messages(required_tags, [template]) == [
        (template.urn, "its hosts' tags lack parkbrake:pool, parkbrake:tenant, parkbrake:max-runtime")
    ]


def test_a_gpu_template_without_an_instance_tag_specification_tags_no_host() -> None:
    template = with_inputs(gpu_launch_template(), tagSpecifications=None)
    assert messages(required_tags, [template]) == [
        (template.urn, "has no tag specification for resourceType 'instance', so its hosts carry no tags")
    ]


def test_a_gpu_instance_is_checked_once_for_every_tag() -> None:
    instance = resource(
        "aws:ec2/instance:Instance", "box", {"instanceType": "g5.xlarge", "tags": {"Name": "box"}}
    )
    assert messages(required_tags, [instance]) == [
        (
            instance.urn,
            "its tags lack parkbrake:managed, parkbrake:stack, parkbrake:revision, parkbrake:pool, "
            "parkbrake:tenant, parkbrake:max-runtime",
        )
    ]


def test_the_required_tags_are_configurable() -> None:
    context = PolicyContext(required_tags=(tags.MANAGED, "cost-centre"))
    found = messages(required_tags, [cache()], context)
    assert found == [(cache().urn, "its tags lack cost-centre")]


def test_every_type_the_rule_calls_taggable_takes_tags_in_pulumi_aws() -> None:
    assert [
        type_token for type_token in sorted(required_tags.TAGGABLE_TYPES) if not takes_tags(type_token)
    ] == []


# --- data-stores-encrypted-and-private -------------------------------------------------------------


def test_encrypted_private_data_stores_pass() -> None:
    assert messages(data_stores_encrypted_and_private, compliant_stack()) == []


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (with_inputs(database()[0], storageEncrypted=None), "storageEncrypted is not set; it must be true"),
        (with_inputs(database()[0], storageEncrypted=False), "storageEncrypted is False; it must be true"),
        (with_inputs(database()[1], publiclyAccessible=True), "publiclyAccessible is true; data stores stay inside the VPC"),
        (with_inputs(cache(), transitEncryptionEnabled=False), "transitEncryptionEnabled is False; it must be true"),
        (with_inputs(cache(), atRestEncryptionEnabled=None), "atRestEncryptionEnabled is not set; it must be true"),
    ],
    ids=["cluster-unencrypted-default", "cluster-unencrypted", "instance-public", "cache-no-tls", "cache-at-rest-default"],
)  # fmt: skip
def test_unencrypted_or_public_data_stores_are_violations(broken: RegisteredResource, expected: str) -> None:
    assert messages(data_stores_encrypted_and_private, replacing(compliant_stack(), broken)) == [
        (broken.urn, expected)
    ]


def test_a_standalone_rds_instance_must_be_both_encrypted_and_private() -> None:
    instance = resource("aws:rds/instance:Instance", "legacy", {"publiclyAccessible": "true"})
    assert messages(data_stores_encrypted_and_private, [instance]) == [
        (instance.urn, "storageEncrypted is not set; it must be true"),
        (instance.urn, "publiclyAccessible is true; data stores stay inside the VPC"),
    ]
