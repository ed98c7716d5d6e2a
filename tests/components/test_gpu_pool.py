"""GpuPool under the offline engine: launch template, Auto Scaling group, capacity provider, park switch."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pulumi
import pytest
from offline_outputs import capture

from components.gpu_pool import (
    GPU_AMI_PARAMETER,
    BakedAmi,
    GpuPool,
    GpuPoolArgs,
    HostTools,
    PublicIndex,
    ToolsArtifact,
    agent_user_data,
)
from guardrails import names, tags
from guardrails.durations import parse_duration
from policies.rules.no_unconditional_stop import document_problems
from stacks.config import Capacity, load_stack_config
from stacks.offline import ACCOUNT_ID, MOCK_AMI, OfflineRun, RegisteredResource, run_offline

REPO_ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
BASE_TAGS = {tags.MANAGED: "true", tags.STACK: "dev", tags.REVISION: "abc123"}
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
GROUP = "aws:autoscaling/group:Group"
CAPACITY_PROVIDER = "aws:ecs/capacityProvider:CapacityProvider"
POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"


def pool_args(**overrides: Any) -> GpuPoolArgs:
    fields: dict[str, Any] = {
        "stack": "dev",
        "pool": "training",
        "role": "training",
        "instance_type": "g5.12xlarge",
        "tenant": "research",
        "capacity": Capacity(min=1, desired=2, max=4),
        "max_runtime": timedelta(minutes=90),
        "revision": "abc123",
        "vpc_id": "vpc-0abc",
        "subnet_ids": ["subnet-a", "subnet-b"],
        "tags": BASE_TAGS,
    }
    return GpuPoolArgs(**{**fields, **overrides})


class Built:
    """One offline run of GpuPools, with what each pool exposed to the program."""

    def __init__(self, *pools: GpuPoolArgs) -> None:
        self.outputs: dict[str, dict[str, Any]] = {}
        self.capacity_providers: dict[str, object] = {}

        def program() -> None:
            for args in pools:
                pool = GpuPool(args.pool, args)
                self.capacity_providers[args.pool] = pool.capacity_provider_name
                self.outputs[args.pool] = {}
                exposed = {
                    "launch_template_id": pool.launch_template_id,
                    "autoscaling_group_name": pool.autoscaling_group_name,
                    "autoscaling_group_arn": pool.autoscaling_group_arn,
                }
                if pool.capacity_provider_name is not None:
                    exposed["capacity_provider_name"] = pool.capacity_provider_name
                capture(exposed, into=self.outputs[args.pool])

        self.run: OfflineRun = run_offline(program, stack="dev", region=REGION)

    def one(self, type_token: str, pool: str = "training") -> RegisteredResource:
        (component,) = [item for item in self.run.of_type("parkbrake:aws:GpuPool") if item.name == pool]
        (resource,) = [item for item in self.run.children_of(component) if item.type == type_token]
        return resource


def group_tags(group: RegisteredResource) -> dict[str, str]:
    assert all(tag["propagateAtLaunch"] is True for tag in group.inputs["tags"])
    return {tag["key"]: tag["value"] for tag in group.inputs["tags"]}


def user_data(launch_template: RegisteredResource) -> str:
    return base64.b64decode(launch_template.inputs["userData"]).decode()


@pytest.mark.parametrize("parked", [False, True])
def test_park_switch_sets_min_and_desired_to_zero_and_keeps_max(parked: bool) -> None:
    # prod: its inference pool keeps hosts on (dev's scales to zero, which parking would not change)
    config = load_stack_config("prod", REPO_ROOT).with_parked(parked)
    configured = config.pools["inference"]
    built = Built(
        pool_args(
            pool="inference",
            role="inference",
            instance_type=configured.instance_type,
            capacity=config.pool_capacity(configured),
            parked=parked,
        )
    )

    group = built.one(GROUP, "inference")
    # Unparked, the launcher and ECS own desired capacity, so `pulumi up` leaves a running night alone.
    assert group.ignore_changes == (() if parked else ("desiredCapacity",))
    expected = (0, 0) if parked else (configured.capacity.min, configured.capacity.desired)
    assert (group.inputs["minSize"], group.inputs["desiredCapacity"]) == expected
    assert group.inputs["maxSize"] == configured.capacity.max
    assert configured.capacity.desired > 0, (
        "the prod stack must run a host unparked for this test to mean anything"
    )
    # Parking changes capacity only: the template and the group are still declared.
    assert built.one(LAUNCH_TEMPLATE, "inference").inputs["instanceType"] == configured.instance_type


def test_minimum_zero_is_an_ordinary_pool() -> None:
    built = Built(pool_args(capacity=Capacity(min=0, desired=0, max=2)))

    group = built.one(GROUP)
    assert (group.inputs["minSize"], group.inputs["desiredCapacity"], group.inputs["maxSize"]) == (0, 0, 2)
    assert group.inputs["name"] == names.autoscaling_group("dev", "training")


def test_launch_template_uses_the_ssm_gpu_ami_imdsv2_and_an_encrypted_root_volume() -> None:
    launch_template = Built(pool_args()).one(LAUNCH_TEMPLATE)

    assert GPU_AMI_PARAMETER.endswith("/amazon-linux-2023/gpu/recommended/image_id")
    assert launch_template.inputs["imageId"] == MOCK_AMI, "the AMI comes from the SSM parameter lookup"
    assert launch_template.inputs["instanceType"] == "g5.12xlarge"
    assert launch_template.inputs["metadataOptions"]["httpTokens"] == "required"
    assert launch_template.inputs["metadataOptions"]["httpEndpoint"] == "enabled"
    # Containers (with their own task roles) cannot reach IMDS and the host role through a second hop.
    assert launch_template.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1
    (root,) = launch_template.inputs["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/xvda"
    assert root["ebs"]["encrypted"] == "true"
    assert root["ebs"]["deleteOnTermination"] == "true"


@pytest.mark.parametrize("capacity_type", ["on-demand", "spot"])
def test_hosts_terminate_when_they_shut_themselves_down(capacity_type: str) -> None:
    launch_template = Built(pool_args(capacity_type=capacity_type)).one(LAUNCH_TEMPLATE)

    assert launch_template.inputs["instanceInitiatedShutdownBehavior"] == "terminate"


def test_every_host_and_volume_carries_every_parkbrake_tag() -> None:
    built = Built(pool_args(max_runtime=timedelta(hours=1, minutes=30)))
    launch_template = built.one(LAUNCH_TEMPLATE)

    specifications = {
        spec["resourceType"]: spec["tags"] for spec in launch_template.inputs["tagSpecifications"]
    }
    assert set(specifications) == {"instance", "volume"}
    for host_tags in (*specifications.values(), group_tags(built.one(GROUP))):
        assert set(tags.REQUIRED_ON_GPU_HOSTS) <= set(host_tags)
        assert host_tags[tags.MANAGED] == "true"
        assert host_tags[tags.STACK] == "dev"
        assert host_tags[tags.POOL] == "training"
        assert host_tags[tags.TENANT] == "research"
        assert host_tags[tags.REVISION] == "abc123"
        assert host_tags[tags.MAX_RUNTIME] == "1h30m"
        assert parse_duration(host_tags[tags.MAX_RUNTIME]) == timedelta(minutes=90)


def test_a_pools_owner_is_on_its_hosts_volumes_and_group() -> None:
    built = Built(pool_args(owner="@ml-research"))
    specifications = built.one(LAUNCH_TEMPLATE).inputs["tagSpecifications"]
    for host_tags in (*(spec["tags"] for spec in specifications), group_tags(built.one(GROUP))):
        assert host_tags[tags.OWNER] == "@ml-research"
    unowned = Built(pool_args())
    assert tags.OWNER not in group_tags(unowned.one(GROUP))


def test_on_demand_group_runs_the_launch_template_directly() -> None:
    built = Built(pool_args())
    group = built.one(GROUP)

    assert group.inputs["launchTemplate"] == {
        "id": built.outputs["training"]["launch_template_id"],
        "version": "$Latest",
    }
    assert "mixedInstancesPolicy" not in group.inputs
    assert group.inputs["vpcZoneIdentifiers"] == ["subnet-a", "subnet-b"]
    assert group.inputs["protectFromScaleIn"] is False


def test_spot_group_asks_for_spot_only_through_a_mixed_instances_policy() -> None:
    built = Built(pool_args(capacity_type="spot"))
    group = built.one(GROUP)

    policy = group.inputs["mixedInstancesPolicy"]
    assert "launchTemplate" not in group.inputs, "a group takes a launch template or a mixed policy, not both"
    specification = policy["launchTemplate"]["launchTemplateSpecification"]
    assert specification["launchTemplateId"] == built.outputs["training"]["launch_template_id"]
    assert policy["instancesDistribution"]["onDemandBaseCapacity"] == 0
    assert policy["instancesDistribution"]["onDemandPercentageAboveBaseCapacity"] == 0
    assert group.inputs["capacityRebalance"] is True


@pytest.mark.parametrize(
    ("capacity_type", "strategy"),
    [
        (
            "on-demand",
            {"onDemandAllocationStrategy": "prioritized", "onDemandPercentageAboveBaseCapacity": 100},
        ),
        (
            "spot",
            {
                "spotAllocationStrategy": "capacity-optimized-prioritized",
                "onDemandPercentageAboveBaseCapacity": 0,
            },
        ),
    ],
)
def test_fallback_types_are_the_groups_prioritized_overrides(
    capacity_type: str, strategy: dict[str, object]
) -> None:
    built = Built(
        pool_args(
            capacity_type=capacity_type,
            instance_type="p5.48xlarge",
            fallback_instance_types=("p4d.24xlarge", "p4de.24xlarge"),
        )
    )
    group = built.one(GROUP)

    policy = group.inputs["mixedInstancesPolicy"]
    assert "launchTemplate" not in group.inputs
    assert [item["instanceType"] for item in policy["launchTemplate"]["overrides"]] == [
        "p5.48xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
    ]
    assert strategy.items() <= policy["instancesDistribution"].items()
    assert ("capacityRebalance" in group.inputs) == (capacity_type == "spot")


def test_no_capacity_provider_unless_the_pool_backs_an_ecs_service() -> None:
    built = Built(pool_args())

    assert built.run.of_type(CAPACITY_PROVIDER) == []
    assert built.capacity_providers["training"] is None
    assert "AmazonECSManaged" not in group_tags(built.one(GROUP))
    attached = [item.inputs["policyArn"] for item in built.run.of_type(POLICY_ATTACHMENT)]
    assert not any("ContainerService" in arn for arn in attached)
    assert "systemctl disable --now --no-block ecs.service" in user_data(built.one(LAUNCH_TEMPLATE))


def test_a_serving_pool_joins_the_cluster_through_a_capacity_provider() -> None:
    built = Built(
        pool_args(
            pool="inference", role="inference", ecs_cluster_name=pulumi.Output.from_input("parkbrake-dev")
        )
    )

    provider = built.one(CAPACITY_PROVIDER, "inference")
    settings = provider.inputs["autoScalingGroupProvider"]
    assert settings["autoScalingGroupArn"] == built.outputs["inference"]["autoscaling_group_arn"]
    assert settings["managedScaling"]["status"] == "ENABLED"
    assert settings["managedTerminationProtection"] == "DISABLED"
    assert built.outputs["inference"]["capacity_provider_name"] == names.capacity_provider("dev", "inference")
    assert group_tags(built.one(GROUP, "inference"))["AmazonECSManaged"] == "true"
    # Joining the cluster is granted on this cluster only, not through AWS's any-cluster managed policy.
    assert built.run.of_type(POLICY_ATTACHMENT) == []
    grants = host_statements(built, "inference")
    cluster_arn = f"arn:aws:ecs:{REGION}:{ACCOUNT_ID}:cluster/parkbrake-dev"
    assert grants["JoinOwnCluster"]["Resource"] == cluster_arn
    assert "ecs:RegisterContainerInstance" in grants["JoinOwnCluster"]["Action"]
    instances = f"arn:aws:ecs:{REGION}:{ACCOUNT_ID}:container-instance/parkbrake-dev/*"
    assert grants["AgentInOwnCluster"]["Resource"] == instances
    assert not any(action.startswith("ecr:") for grant in grants.values() for action in grant["Action"])
    script = user_data(built.one(LAUNCH_TEMPLATE, "inference"))
    assert "ECS_CLUSTER=parkbrake-dev\n" in script
    assert "ecs.service" not in script


ARTIFACT = ToolsArtifact(bucket="parkbrake-dev-host-tools", key="host-tools/ab12.tar.gz", sha256="ab12" * 16)


def test_user_data_installs_the_pinned_artifact_and_starts_the_agent_as_a_systemd_unit() -> None:
    built = Built(pool_args(agent_idle_after=timedelta(minutes=30), host_tools=ARTIFACT))
    script = user_data(built.one(LAUNCH_TEMPLATE))

    assert script.startswith("#!/bin/bash\n")
    assert (
        "aws s3 cp s3://parkbrake-dev-host-tools/host-tools/ab12.tar.gz /tmp/parkbrake-host-tools.tar.gz\n"
        in script
    )
    assert (
        f"echo '{ARTIFACT.sha256}  /tmp/parkbrake-host-tools.tar.gz' | sha256sum --check --strict\n" in script
    )
    assert (
        "/opt/parkbrake/bin/pip install --quiet --no-index --no-deps --find-links /opt/parkbrake-tools "
        "--require-hashes -r /opt/parkbrake-tools/requirements.txt\n"
    ) in script
    assert script.index("sha256sum") < script.index("tar -xzf") < script.index("pip install")
    assert "ExecStart=/opt/parkbrake/bin/parkbrake agent --idle-after 30m\n" in script
    assert "systemctl enable --now parkbrake-agent.service\n" in script
    # The host may read that one object, and no other.
    assert host_statements(built, "training")["ReadHostTools"]["Resource"] == (
        "arn:aws:s3:::parkbrake-dev-host-tools/host-tools/ab12.tar.gz"
    )


def test_a_baked_ami_replaces_the_recommended_one_and_installs_nothing() -> None:
    template = Built(pool_args(host_tools=BakedAmi("ami-0f1e2d3c4b5a69788"))).one(LAUNCH_TEMPLATE)

    assert template.inputs["imageId"] == "ami-0f1e2d3c4b5a69788"
    script = user_data(template)
    assert "install" not in script
    assert "ExecStart=/opt/parkbrake/bin/parkbrake agent\n" in script


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to check the script's syntax")
@pytest.mark.parametrize("cluster", [None, "parkbrake-dev"])
@pytest.mark.parametrize(
    "tools", [ARTIFACT, BakedAmi("ami-0abc1234"), PublicIndex("parkbrake[agent]>=0.1; rm -rf /")]
)
def test_user_data_is_valid_bash_and_quotes_what_it_is_given(cluster: str | None, tools: HostTools) -> None:
    script = agent_user_data(ecs_cluster_name=cluster, host_tools=tools, agent_idle_after=None)

    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    if isinstance(tools, PublicIndex):
        assert "pip install --quiet 'parkbrake[agent]>=0.1; rm -rf /'\n" in script
    assert "ExecStart=/opt/parkbrake/bin/parkbrake agent\n" in script


def test_two_pools_coexist_and_every_resource_is_a_child_of_its_pool() -> None:
    built = Built(pool_args(), pool_args(pool="inference", ecs_cluster_name="parkbrake-dev"))

    components = built.run.of_type("parkbrake:aws:GpuPool")
    assert sorted(component.name for component in components) == ["inference", "training"]
    children = [
        urn for component in components for urn in (child.urn for child in built.run.children_of(component))
    ]
    custom = [resource.urn for resource in built.run.resources if resource.custom]
    assert sorted(children) == sorted(custom)
    assert len(built.run.of_type(GROUP)) == 2
    assert {built.one(GROUP, pool).inputs["name"] for pool in ("training", "inference")} == {
        "parkbrake-dev-training",
        "parkbrake-dev-inference",
    }


def host_statements(built: Built, pool: str) -> dict[str, dict[str, Any]]:
    role_policy = built.one("aws:iam/rolePolicy:RolePolicy", pool)
    assert role_policy.inputs["role"] == built.one("aws:iam/role:Role", pool).name
    assert list(document_problems(role_policy.inputs["policy"], "the policy")) == []
    return {
        statement["Sid"]: statement for statement in json.loads(role_policy.inputs["policy"])["Statement"]
    }


def test_the_host_role_may_leave_only_its_own_managed_group() -> None:
    """`run`/`agent --release-from-group` need one grant: this pool's group, and only while it is managed."""
    built = Built(pool_args(), pool_args(pool="inference", ecs_cluster_name="parkbrake-dev"))

    for pool in ("training", "inference"):
        statement = host_statements(built, pool)["LeaveOwnGroupOnly"]
        assert statement["Effect"] == "Allow"
        assert statement["Action"] == ["autoscaling:TerminateInstanceInAutoScalingGroup"]
        assert statement["Resource"] == built.outputs[pool]["autoscaling_group_arn"]
        assert statement["Condition"] == {"StringEquals": {f"aws:ResourceTag/{tags.MANAGED}": "true"}}
        assert group_tags(built.one(GROUP, pool))[tags.MANAGED] == "true"


def test_the_host_role_may_stop_only_its_own_instance() -> None:
    """The self-stop's EC2 API fallback: the instance the credentials were issued to, while managed."""
    built = Built(pool_args())

    statement = host_statements(built, "training")["StopOwnInstanceOnly"]
    assert statement["Action"] == ["ec2:StopInstances", "ec2:TerminateInstances"]
    assert statement["Resource"].endswith(":instance/*")
    assert statement["Condition"] == {
        "StringEquals": {"aws:ARN": "${ec2:SourceInstanceARN}", f"aws:ResourceTag/{tags.MANAGED}": "true"}
    }


def test_the_host_role_has_session_manager_but_no_broad_managed_policy() -> None:
    built = Built(pool_args())

    assert (
        built.run.of_type(POLICY_ATTACHMENT) == []
    )  # no AmazonSSMManagedInstanceCore: it reads every parameter
    grants = host_statements(built, "training")
    assert set(grants) == {"LeaveOwnGroupOnly", "StopOwnInstanceOnly", "SessionManager"}
    assert not any(action.startswith(("ssm:Get", "s3:")) for action in grants["SessionManager"]["Action"])
