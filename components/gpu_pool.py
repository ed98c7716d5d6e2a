"""``GpuPool``: GPU hosts of one pool — a launch template and the Auto Scaling group that runs it.

Every pool is an Auto Scaling group, so its hosts shut down into ``terminate``: a stopped instance
in a group is marked unhealthy and replaced anyway (so ``stop`` would only leave an idle volume
behind until the health check), and the group's spot requests are one-time requests, for which
AWS allows no ``stop`` at all. The host's own ``shutdown -h now`` therefore ends its billing for
good, with no IAM permission needed. To keep the group from launching a replacement, the host first
leaves its group with the desired capacity lowered (``parkbrake run``/``agent --release-from-group``);
its role may do that to its own group only, and the shutdown runs even when it may not.

Capacity arrives already parked-adjusted from the program: parked, min and desired are 0 and max
is kept, so unparking restores the configured values and nothing else changes.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of, type_token
from components.iam_policies import HostGrants, host_policy, trust_policy
from guardrails import names, tags
from guardrails.capacity import Capacity
from guardrails.durations import format_duration

# The ECS GPU-optimized Amazon Linux 2023 AMI: NVIDIA driver, container toolkit and ECS agent.
GPU_AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
SHUTDOWN_BEHAVIOR = "terminate"
ROOT_DEVICE = "/dev/xvda"
AGENT_VENV = "/opt/parkbrake"
AGENT_UNIT = "parkbrake-agent.service"
TOOLS_DIR = "/opt/parkbrake-tools"
# ECS adds this tag to a group it manages; declaring it keeps `pulumi up` from removing it again.
ECS_MANAGED_TAG = "AmazonECSManaged"
# Containers run with their own ECS task roles and never need the host's: one hop keeps IMDS (and the
# host role's credentials) out of their reach.
IMDS_HOP_LIMIT = 1


@dataclass(frozen=True)
class ToolsArtifact:
    """The host tools as the stack uploads them: a tarball of wheels with a hash-pinned requirements.txt."""

    bucket: pulumi.Input[str]
    key: str
    sha256: str


@dataclass(frozen=True)
class BakedAmi:
    """An AMI with the host tools already installed in ``/opt/parkbrake`` (and the GPU stack of the ECS AMI)."""

    ami_id: str


@dataclass(frozen=True)
class PublicIndex:
    """``pip install`` of a requirement from the public index at every boot: unpinned and unchecked.

    Declared as it is so ``plan`` can show it; the policy pack fails it.
    """

    requirement: str


HostTools = ToolsArtifact | BakedAmi | PublicIndex


@dataclass
class GpuPoolArgs:
    stack: str
    pool: str
    role: Literal["training", "inference"]
    instance_type: str
    tenant: str
    capacity: Capacity  # already parked-adjusted by the program
    max_runtime: timedelta
    vpc_id: pulumi.Input[str]
    subnet_ids: pulumi.Input[Sequence[str]]
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    # Tried in order after instance_type when AWS lacks capacity: the group's prioritized overrides.
    fallback_instance_types: Sequence[str] = ()
    # Parked, Pulumi holds desired capacity at 0; unparked, the nightly launcher, ECS managed
    # scaling and the reaper own it, so `pulumi up` never resets a running night's hosts.
    parked: bool = False
    revision: str = "unversioned"
    # Set when the pool backs an ECS service: hosts join this cluster and a capacity provider is made.
    ecs_cluster_name: pulumi.Input[str] | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    root_volume_gb: int = 100  # GPU images are large; the AMI's 30 GB fills with one model image
    # Where the host tools (``parkbrake agent``) come from: the stack's pinned artifact, or a baked AMI.
    host_tools: HostTools | None = None
    # The hosts' agent idle window (``pools.<name>.agent_idle_after``); None: the agent's own default.
    agent_idle_after: timedelta | None = None
    owner: str | None = None  # who is told about the pool's hosts (their parkbrake:owner tag)


def host_tags(args: GpuPoolArgs) -> dict[str, str]:
    """Every parkbrake tag of docs/architecture.md, as each host and volume of the pool carries them."""
    return {
        **args.tags,
        "Name": names.autoscaling_group(args.stack, args.pool),
        tags.MANAGED: "true",
        tags.STACK: args.stack,
        tags.POOL: args.pool,
        tags.TENANT: args.tenant,
        tags.MAX_RUNTIME: format_duration(args.max_runtime),
        tags.REVISION: args.revision,
        # The sweep rotates serving hosts at their lifetime rather than stopping them.
        **({tags.SERVING: "true"} if args.role == "inference" else {}),
        **({tags.OWNER: args.owner} if args.owner else {}),
    }


def agent_user_data(
    *, ecs_cluster_name: str | None, host_tools: HostTools | None, agent_idle_after: timedelta | None
) -> str:
    """The boot script: join the ECS cluster (or keep the ECS agent off), install the host tools, run the agent.

    The cluster is joined first so a failed install never keeps a host out of service; the deadline
    schedule and the sweep still cap a host whose agent did not start. Nothing comes from a public
    package index: the tools are the stack's artifact, checked against its SHA-256 before anything in
    it runs, and installed with ``--no-index --require-hashes`` (or they are already in the AMI).
    """
    if ecs_cluster_name is None:
        # The AMI's ECS agent would otherwise keep trying to join a cluster called "default".
        ecs = "systemctl disable --now --no-block ecs.service\n"
    else:
        ecs = f"cat >> /etc/ecs/ecs.config <<'ECS'\nECS_CLUSTER={ecs_cluster_name}\nECS_ENABLE_GPU_SUPPORT=true\nECS\n"
    if host_tools is None:
        return f"#!/bin/bash\nset -euo pipefail\n{ecs}"
    agent_command = f"{AGENT_VENV}/bin/parkbrake agent"
    if agent_idle_after is not None:
        agent_command += f" --idle-after {format_duration(agent_idle_after)}"
    return (
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        f"{ecs}"
        f"{_install(host_tools)}"
        f"cat > /etc/systemd/system/{AGENT_UNIT} <<'UNIT'\n"
        "[Unit]\n"
        "Description=parkbrake agent: GPU metrics and idle self-stop\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n"
        "[Service]\n"
        f"ExecStart={agent_command}\n"
        "Restart=always\n"
        "RestartSec=5\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
        "UNIT\n"
        "systemctl daemon-reload\n"
        f"systemctl enable --now {AGENT_UNIT}\n"
    )


def _install(host_tools: HostTools) -> str:
    if isinstance(host_tools, BakedAmi):
        return ""
    if isinstance(host_tools, PublicIndex):
        return (
            "dnf install -y python3.11 python3.11-pip\n"
            f"python3.11 -m venv {AGENT_VENV}\n"
            f"{AGENT_VENV}/bin/pip install --quiet {shlex.quote(host_tools.requirement)}\n"
        )
    archive = "/tmp/parkbrake-host-tools.tar.gz"
    return (
        "dnf install -y python3.11\n"
        f"aws s3 cp {shlex.quote(f's3://{host_tools.bucket}/{host_tools.key}')} {archive}\n"
        f"echo '{host_tools.sha256}  {archive}' | sha256sum --check --strict\n"
        f"mkdir -p {TOOLS_DIR} && tar -xzf {archive} -C {TOOLS_DIR}\n"
        f"python3.11 -m venv {AGENT_VENV}\n"
        f"{AGENT_VENV}/bin/pip install --quiet --no-index --no-deps --find-links {TOOLS_DIR} "
        f"--require-hashes -r {TOOLS_DIR}/requirements.txt\n"
    )


def host_grants(known: dict[str, Any], host_tools: HostTools | None) -> dict[str, Any]:
    """The HostGrants fields, the tools bucket resolved into the one object the hosts may read."""
    bucket = known.pop("tools_bucket")
    if isinstance(host_tools, ToolsArtifact):
        known["tools_object_arn"] = f"arn:{known['partition']}:s3:::{bucket}/{host_tools.key}"
    return known


def _base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class GpuPool(pulumi.ComponentResource):
    launch_template_id: pulumi.Output[str]
    autoscaling_group_name: pulumi.Output[str]
    autoscaling_group_arn: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    # A plain None when the pool backs no ECS service, so the program can filter on it.
    capacity_provider_name: pulumi.Output[str] | None
    # The capacity provider itself, for the cluster association that services must wait for.
    capacity_provider: aws.ecs.CapacityProvider | None

    def __init__(self, name: str, args: GpuPoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("GpuPool"), name, None, opts)
        self._name = name
        self._args = args
        self._resource_tags = {**args.tags, tags.POOL: args.pool, tags.TENANT: args.tenant}
        security_group = self._security_group()
        host_role, instance_profile = self._host_role()
        launch_template = self._launch_template(security_group, instance_profile)
        group = self._autoscaling_group(launch_template)
        self._host_permissions(host_role, group)

        self.launch_template_id = launch_template.id
        self.autoscaling_group_name = group.name
        self.autoscaling_group_arn = group.arn
        self.security_group_id = security_group.id
        self.capacity_provider = self._capacity_provider(group) if self._joins_ecs else None
        self.capacity_provider_name = self.capacity_provider.name if self.capacity_provider else None
        self.register_outputs(
            {
                "launchTemplateId": self.launch_template_id,
                "autoscalingGroupName": self.autoscaling_group_name,
                "autoscalingGroupArn": self.autoscaling_group_arn,
                "securityGroupId": self.security_group_id,
                "capacityProviderName": self.capacity_provider_name,
            }
        )

    @property
    def _joins_ecs(self) -> bool:
        return self._args.ecs_cluster_name is not None

    def _security_group(self) -> aws.ec2.SecurityGroup:
        args = self._args
        return aws.ec2.SecurityGroup(
            f"{self._name}-hosts",
            description=f"parkbrake {args.stack} {args.pool} GPU hosts: outbound only",
            vpc_id=args.vpc_id,
            egress=[
                aws.ec2.SecurityGroupEgressArgs(
                    protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"]
                )
            ],
            tags=self._resource_tags,
            opts=child_of(self),
        )

    def _host_role(self) -> tuple[aws.iam.Role, aws.iam.InstanceProfile]:
        """The host's role and profile; its permissions are scoped statements (``_host_permissions``)."""
        role = aws.iam.Role(
            f"{self._name}-host-role",
            assume_role_policy=json.dumps(trust_policy("ec2.amazonaws.com")),
            tags=dict(self._resource_tags),
            opts=child_of(self),
        )
        profile = aws.iam.InstanceProfile(
            f"{self._name}-host-profile", role=role.name, tags=dict(self._resource_tags), opts=child_of(self)
        )
        return role, profile

    def _host_permissions(self, role: aws.iam.Role, group: aws.autoscaling.Group) -> aws.iam.RolePolicy:
        args = self._args
        invoke = pulumi.InvokeOutputOptions(parent=self)
        grants = pulumi.Output.all(
            partition=aws.get_partition_output(opts=invoke).partition,
            account_id=aws.get_caller_identity_output(opts=invoke).account_id,
            region=aws.get_region_output(opts=invoke).region,
            autoscaling_group_arn=group.arn,
            ecs_cluster_name=args.ecs_cluster_name,
            tools_bucket=args.host_tools.bucket if isinstance(args.host_tools, ToolsArtifact) else None,
        ).apply(lambda known: HostGrants(**host_grants(known, args.host_tools)))
        return aws.iam.RolePolicy(
            f"{self._name}-host",
            role=role.name,
            policy=grants.apply(lambda known: json.dumps(host_policy(known))),
            opts=child_of(self),
        )

    def _launch_template(
        self, security_group: aws.ec2.SecurityGroup, instance_profile: aws.iam.InstanceProfile
    ) -> aws.ec2.LaunchTemplate:
        args = self._args
        ami = aws.ssm.get_parameter_output(
            name=GPU_AMI_PARAMETER, opts=pulumi.InvokeOutputOptions(parent=self)
        )
        tools = args.host_tools
        bucket = tools.bucket if isinstance(tools, ToolsArtifact) else None
        user_data = pulumi.Output.all(args.ecs_cluster_name, bucket).apply(
            lambda known: _base64(
                agent_user_data(
                    ecs_cluster_name=known[0],
                    host_tools=replace(tools, bucket=known[1]) if isinstance(tools, ToolsArtifact) else tools,
                    agent_idle_after=args.agent_idle_after,
                )
            )
        )
        launch_tags = host_tags(args)
        return aws.ec2.LaunchTemplate(
            f"{self._name}-launch-template",
            description=f"parkbrake {args.stack} {args.pool} ({args.role}): {args.instance_type}",
            image_id=args.host_tools.ami_id if isinstance(args.host_tools, BakedAmi) else ami.value,
            instance_type=args.instance_type,
            instance_initiated_shutdown_behavior=SHUTDOWN_BEHAVIOR,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=instance_profile.arn),
            vpc_security_group_ids=[security_group.id],
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=IMDS_HOP_LIMIT,
                # The host reads its own cap (parkbrake:max-runtime) from IMDS, without IAM.
                instance_metadata_tags="enabled",
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=ROOT_DEVICE,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        encrypted="true",
                        volume_size=args.root_volume_gb,
                        volume_type="gp3",
                        delete_on_termination="true",
                    ),
                )
            ],
            user_data=user_data,
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=resource_type, tags=launch_tags)
                for resource_type in ("instance", "volume")
            ],
            update_default_version=True,
            tags=launch_tags,
            opts=child_of(self),
        )

    def _autoscaling_group(self, launch_template: aws.ec2.LaunchTemplate) -> aws.autoscaling.Group:
        args = self._args
        group_tags = {**host_tags(args), **({ECS_MANAGED_TAG: "true"} if self._joins_ecs else {})}
        return aws.autoscaling.Group(
            f"{self._name}-group",
            name=names.autoscaling_group(args.stack, args.pool),
            min_size=args.capacity.min,
            desired_capacity=args.capacity.desired,
            max_size=args.capacity.max,
            vpc_zone_identifiers=args.subnet_ids,
            # No scale-in protection: parking must be able to take every host away (see docs).
            protect_from_scale_in=False,
            # GPU capacity can be scarce; a deploy records the group and does not wait for hosts.
            wait_for_capacity_timeout="0",
            tags=[
                aws.autoscaling.GroupTagArgs(key=key, value=value, propagate_at_launch=True)
                for key, value in group_tags.items()
            ],
            opts=named_child_of(self, ignore_changes=[] if args.parked else ["desiredCapacity"]),
            **group_placement(
                args.capacity_type,
                launch_template,
                [args.instance_type, *args.fallback_instance_types] if args.fallback_instance_types else [],
            ),
        )

    def _capacity_provider(self, group: aws.autoscaling.Group) -> aws.ecs.CapacityProvider:
        args = self._args
        return aws.ecs.CapacityProvider(
            f"{self._name}-capacity-provider",
            name=names.capacity_provider(args.stack, args.pool),
            auto_scaling_group_provider=aws.ecs.CapacityProviderAutoScalingGroupProviderArgs(
                auto_scaling_group_arn=group.arn,
                managed_scaling=aws.ecs.CapacityProviderAutoScalingGroupProviderManagedScalingArgs(
                    status="ENABLED",
                    target_capacity=100,
                    minimum_scaling_step_size=1,
                    maximum_scaling_step_size=max(args.capacity.max, 1),
                    instance_warmup_period=300,
                ),
                # Off: a protected host survives scale-in, and parking must reach zero GPU hosts.
                managed_termination_protection="DISABLED",
                # ECS drains tasks off a host the group is about to terminate.
                managed_draining="ENABLED",
            ),
            tags=dict(self._resource_tags),
            opts=named_child_of(self),
        )


def group_placement(
    capacity_type: str, launch_template: aws.ec2.LaunchTemplate, instance_types: Sequence[str] = ()
) -> dict[str, object]:
    """How the group launches hosts: the template directly (on-demand), or through a mixed policy — for
    spot, and for a pool with fallback types (``instance_types``, in order of preference).

    With fallbacks the policy lists every type as an override with a prioritized strategy, so that
    when EC2 answers a launch with InsufficientInstanceCapacity the group itself takes the next type
    (and, as always, the group's other subnets' zones). New hosts take the template's newest
    version; running hosts keep theirs until replaced.
    """
    version = "$Latest"
    spot = capacity_type == "spot"
    if not spot and not instance_types:
        return {
            "launch_template": aws.autoscaling.GroupLaunchTemplateArgs(id=launch_template.id, version=version)
        }
    overrides = [
        aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideArgs(instance_type=name)
        for name in instance_types
    ]
    distribution = (
        aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs(
            on_demand_base_capacity=0,
            on_demand_percentage_above_base_capacity=0,
            # With overrides, their order is the preference; without, the cheapest pools with capacity.
            spot_allocation_strategy="capacity-optimized-prioritized"
            if overrides
            else "price-capacity-optimized",
        )
        if spot
        else aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs(
            on_demand_base_capacity=0,
            on_demand_percentage_above_base_capacity=100,
            on_demand_allocation_strategy="prioritized",
        )
    )
    return {
        "mixed_instances_policy": aws.autoscaling.GroupMixedInstancesPolicyArgs(
            launch_template=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateArgs(
                launch_template_specification=(
                    aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateLaunchTemplateSpecificationArgs(
                        launch_template_id=launch_template.id, version=version
                    )
                ),
                overrides=overrides or None,
            ),
            instances_distribution=distribution,
        ),
        # Replace a spot host AWS has warned about before it is reclaimed.
        **({"capacity_rebalance": True} if spot else {}),
    }
