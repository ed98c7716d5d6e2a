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
        (with_inputs(database()[2], publiclyAccessible=True), "publiclyAccessible is true; data stores stay inside the VPC"),
        (with_inputs(cache(), transitEncryptionEnabled=False), "transitEncryptionEnabled is False; it must be true"),
        (with_inputs(cache(), atRestEncryptionEnabled=None), "atRestEncryptionEnabled is not set; it must be true"),
    ],
    ids=["cluster-unencrypted-default", "cluster-unencrypted", "instance-public", "cache-no-tls", "cache-at-rest-default"],
)  # fmt: skip
def test_unencrypted_or_public_data_stores_are_violations(broken: RegisteredResource, expected: str) -> None:
    assert messages(data_stores_encrypted_and_private, replacing(compliant_stack(), broken)) == [
        (broken.urn, expected)
    ]


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (with_inputs(cache(), transitEncryptionMode="preferred"), "transitEncryptionMode is 'preferred'"),
        (with_inputs(cache(), userGroupIds=None), "no RBAC user group (userGroupIds) and no authToken"),
        (with_inputs(cache(), userGroupIds=[]), "no RBAC user group (userGroupIds) and no authToken"),
        (with_inputs(database()[0], dbClusterParameterGroupName=None), "accepts connections without TLS"),
        (with_inputs(database()[0], dbClusterParameterGroupName="default.aurora-postgresql16"),
         "accepts connections without TLS"),
    ],
    ids=["cache-tls-preferred", "cache-no-auth", "cache-empty-user-groups", "aurora-no-parameter-group",
         "aurora-default-parameter-group"],
)  # fmt: skip
def test_plain_or_unauthenticated_connections_are_violations(
    broken: RegisteredResource, expected: str
) -> None:
    (found,) = messages(data_stores_encrypted_and_private, replacing(compliant_stack(), broken))
    assert found[0] == broken.urn
    assert expected in found[1]


def test_aurora_needs_a_parameter_group_that_forces_tls() -> None:
    cluster, parameters, instance = database()
    lax = with_inputs(parameters, parameters=[{"name": "rds.force_ssl", "value": "0"}])
    (found,) = messages(data_stores_encrypted_and_private, [cluster, lax, instance])
    assert found == (
        cluster.urn,
        "it accepts connections without TLS; give it a cluster parameter group with rds.force_ssl = 1",
    )


@pytest.mark.parametrize(
    ("rule_resource", "expected"),
    [
        (resource("aws:ec2/securityGroup:SecurityGroup", "db", {"ingress": [
            {"protocol": "tcp", "fromPort": 5432, "toPort": 5432, "cidrBlocks": ["10.40.0.0/16"]}]}),
         "admits 10.40.0.0/16 to the PostgreSQL port"),
        (resource("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "cache-from-vpn",
                  {"ipProtocol": "tcp", "fromPort": 6000, "toPort": 7000, "cidrIpv4": "172.16.0.0/12"}),
         "admits 172.16.0.0/12 to the Valkey port"),
        (resource("aws:ec2/securityGroupRule:SecurityGroupRule", "db-any", {
            "type": "ingress", "fromPort": 0, "toPort": 65535, "cidrBlocks": ["0.0.0.0/0"]}),
         "admits 0.0.0.0/0 to the PostgreSQL and Valkey port"),
    ],
    ids=["inline-cidr", "rule-range-cidr", "legacy-rule-everything"],
)  # fmt: skip
def test_a_cidr_admitted_to_a_data_port_is_a_violation(
    rule_resource: RegisteredResource, expected: str
) -> None:
    (found,) = messages(data_stores_encrypted_and_private, [rule_resource])
    assert found[0] == rule_resource.urn
    assert found[1].startswith(expected)


def test_security_group_clients_and_other_ports_pass() -> None:
    by_group = resource("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "db-from-app",
                        {"ipProtocol": "tcp", "fromPort": 5432, "toPort": 5432, "referencedSecurityGroupId": "sg-1"})  # fmt: skip
    https = resource("aws:ec2/securityGroup:SecurityGroup", "alb", {"ingress": [
        {"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]}]})  # fmt: skip
    assert messages(data_stores_encrypted_and_private, [by_group, https]) == []


def test_a_standalone_rds_instance_must_be_both_encrypted_and_private() -> None:
    instance = resource("aws:rds/instance:Instance", "legacy", {"publiclyAccessible": "true"})
    assert messages(data_stores_encrypted_and_private, [instance]) == sorted(  # the engine's order
        [
            (instance.urn, "storageEncrypted is not set; it must be true"),
            (instance.urn, "publiclyAccessible is true; data stores stay inside the VPC"),
        ]
    )
