"""The Pulumi program of a Kubernetes stack (one with a ``parkbrake:kubernetes`` section): EKS, Karpenter, Kueue.

The data stores and the guardrails are the AWS stacks' own components, in the cluster's VPC; on the
cluster: a GpuNodePool per pool (its tenant's), TenantQueues for every tenant, the agent's DaemonSet,
the services as Deployments and the budget controller. ``parked`` is applied here and nowhere else:
every NodePool's GPU limit to "0", every ClusterQueue held, GPU Deployments to no replica.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.common import base_tags
from components.database import Database
from components.k8s.budget_controller import BudgetController, BudgetControllerArgs
from components.k8s.execution_time_limit import ExecutionTimeLimit, ExecutionTimeLimitArgs, TenantCaps
from components.k8s.gpu_agent import GpuAgent, GpuAgentArgs
from components.k8s.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.k8s.nightly_window import NightlyWindow, NightlyWindowArgs
from components.k8s.park_role import ParkRole, ParkRoleArgs
from components.k8s.service_deployment import ServiceDeployment, ServiceDeploymentArgs
from components.k8s.tenant_queues import GpuType, QueueTenant, TenantQueues, TenantQueuesArgs
from guardrails.pricing import load_price_table
from stacks.config import StackConfig
from stacks.kubernetes_config import KubernetesConfig, flavor_name, kubernetes_config, nodepool_name
from stacks.program import _admit_clients, _data_stores, _guardrails, _network

NODE_ROLE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
)  # what a node needs to join and pull images; no SSM (gpu-hosts-locked-down: no broader grant)


def build_kubernetes_platform(config: StackConfig) -> None:
    cluster = kubernetes_config(config)
    tags = base_tags(config.stack, config.revision)
    network = _network(config, tags)
    database, cache = _data_stores(config, network, tags)
    # The nightly schedule is the cluster's window below, not the EC2 launcher's schedule.
    guardrails = _guardrails(dataclasses.replace(config, nightly=None), network, {}, database, tags)
    _admit_clients(database, cache, None, guardrails)
    if cluster.node_security_group_id is not None:
        for store in (database, cache):
            if store is not None:
                store.admit("cluster-nodes", cluster.node_security_group_id)

    # The kubeconfig's context named after the cluster (`aws eks update-kubeconfig --name N --alias N`):
    # the stack never applies to whatever context happens to be current.
    provider = k8s.Provider("eks", context=cluster.cluster_name, enable_server_side_apply=True)
    on_cluster = pulumi.ResourceOptions(provider=provider)
    node_role = _node_role(config, cluster, tags)
    node_pools = _node_pools(config, cluster, node_role, on_cluster)
    TenantQueues("queues", _queues(config, cluster), opts=on_cluster)
    ExecutionTimeLimit("execution-time", _execution_time(config, cluster), opts=on_cluster)
    system = k8s.core.v1.Namespace(
        "system", metadata={"name": cluster.namespace, "labels": {"app.kubernetes.io/managed-by": "parkbrake"}},
        opts=on_cluster,
    )  # fmt: skip
    _system_workloads(config, cluster, database, provider, system)

    pulumi.export("parked", config.parked)
    pulumi.export("clusterName", cluster.cluster_name)
    pulumi.export("nodePools", {name: pool.node_pool_name for name, pool in node_pools.items()})
    pulumi.export("alarmTopicArn", guardrails.topic_arn)
    if database:
        pulumi.export("databaseEndpoint", database.endpoint)


def _system_workloads(
    config: StackConfig,
    cluster: KubernetesConfig,
    database: Database | None,
    provider: k8s.Provider,
    system: k8s.core.v1.Namespace,
) -> None:
    """What runs in the system namespace: the GPU agent, the services, the budget controller, the park
    role and, with a nightly schedule, the nightly window."""
    in_system = pulumi.ResourceOptions(provider=provider, depends_on=[system])
    GpuAgent(
        "agent",
        GpuAgentArgs(
            stack=config.stack,
            namespace=cluster.namespace,
            image=cluster.agent_image,
            revision=config.revision,
            prometheus_operator=cluster.prometheus_operator,
        ),
        opts=in_system,
    )
    database_environment: dict[str, pulumi.Input[str]] = (
        {"PARKBRAKE_DATABASE_SECRET_ARN": database.secret_arn} if database is not None else {}
    )
    _services(config, cluster, database_environment, in_system)
    BudgetController(
        "budget-controller",
        BudgetControllerArgs(
            stack=config.stack,
            namespace=cluster.namespace,
            image=cluster.controller_image,
            revision=config.revision,
            environment=database_environment,
        ),
        opts=in_system,
    )
    park_role = ParkRole(
        "park", ParkRoleArgs(stack=config.stack, namespace=cluster.namespace), opts=in_system
    )
    if config.nightly is not None:
        NightlyWindow(
            "nightly-window",
            NightlyWindowArgs(
                stack=config.stack,
                namespace=cluster.namespace,
                image=cluster.controller_image,
                revision=config.revision,
                pool=config.nightly.pool,
                parked=config.parked,
                every=min(config.guardrails.sweep_every, timedelta(minutes=30)),
            ),
            opts=pulumi.ResourceOptions(provider=provider, depends_on=[system, park_role]),
        )


def _node_role(config: StackConfig, cluster: KubernetesConfig, tags: Mapping[str, str]) -> pulumi.Input[str]:
    """The IAM role Karpenter's nodes carry: the configured one, or one the stack makes for them."""
    if cluster.node_role is not None:
        return cluster.node_role
    role = aws.iam.Role(
        "karpenter-node",
        name=f"KarpenterNodeRole-{cluster.cluster_name}"[:64],
        assume_role_policy=(
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},'
            '"Action":"sts:AssumeRole"}]}'
        ),
        tags=dict(tags),
    )
    for index, policy in enumerate(NODE_ROLE_POLICIES):
        aws.iam.RolePolicyAttachment(
            f"karpenter-node-{index}",
            role=role.name,
            policy_arn=policy,
            opts=pulumi.ResourceOptions(parent=role),
        )
    return role.name


def _node_pools(
    config: StackConfig, cluster: KubernetesConfig, node_role: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> dict[str, GpuNodePool]:
    prices = load_price_table()
    nightly = config.nightly.pool if config.nightly is not None else None
    # Unparked, the nightly pool's GPU limit is its window's (`parkbrake k8s window`), not the program's.
    return {
        name: GpuNodePool(
            nodepool_name(pool.tenant, name),
            GpuNodePoolArgs(
                stack=config.stack,
                tenant=pool.tenant,
                pool=name,
                instance_type=pool.instance_type,
                gpus_per_node=prices.accelerators(pool.instance_type) or 0,
                max_nodes=pool.capacity.max,
                max_runtime=pool.max_runtime,
                cluster_name=cluster.cluster_name,
                node_role=node_role,
                revision=config.revision,
                parked=config.parked,
                capacity_type=pool.capacity_type,
                termination_grace_period=cluster.termination_grace_period,
                sweep_every=config.guardrails.sweep_every,
                consolidate_after=cluster.consolidate_after,
                role=pool.role,
                owner=pool.owner,
                window_owns_limit=name == nightly and not config.parked,
            ),
            opts=opts,
        )
        for name, pool in config.pools.items()
    }


def _queues(config: StackConfig, cluster: KubernetesConfig) -> TenantQueuesArgs:
    prices = load_price_table()
    return TenantQueuesArgs(
        stack=config.stack,
        parked=config.parked,
        tenants=[
            QueueTenant(
                name=tenant.name,
                namespaces=tenant.namespaces,
                gpu_quota=tenant.gpu_quota,
                gpu_types=tuple(
                    GpuType(
                        flavor_name(pool.tenant, pool.name),
                        pool.instance_type,
                        pool.capacity.max * (prices.accelerators(pool.instance_type) or 0),
                    )
                    for pool in config.pools.values()
                    if pool.tenant == tenant.name and pool.role == "training"
                ),
            )
            for tenant in cluster.tenants.values()
        ],
    )


def _execution_time(config: StackConfig, cluster: KubernetesConfig) -> ExecutionTimeLimitArgs:
    """Each tenant's caps by instance type, from its training pools (the types its ClusterQueue admits)."""
    tenants = []
    for tenant in cluster.tenants.values():
        caps: dict[str, int] = {}
        for pool in config.pools.values():
            if pool.tenant == tenant.name and pool.role == "training":
                seconds = int(pool.max_runtime.total_seconds())
                caps[pool.instance_type] = min(seconds, caps.get(pool.instance_type, seconds))
        tenants.append(TenantCaps(tenant.name, caps))
    return ExecutionTimeLimitArgs(stack=config.stack, tenants=tenants)


def _services(
    config: StackConfig,
    cluster: KubernetesConfig,
    database_environment: Mapping[str, pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
) -> None:
    if config.control_plane is not None:
        control_plane = config.control_plane
        ServiceDeployment(
            "control-plane",
            ServiceDeploymentArgs(
                stack=config.stack,
                service="control-plane",
                namespace=cluster.namespace,
                image=control_plane.image,
                revision=config.revision,
                replicas=config.service_capacity(control_plane.capacity).desired,
                port=control_plane.port,
                health_path=control_plane.health_path,
                cpu=f"{control_plane.cpu * 1000 // 1024}m",  # ECS CPU units: 1024 a vCPU
                memory=f"{control_plane.memory}Mi",
                environment=database_environment,
            ),
            opts=opts,
        )
    if config.inference is not None:
        inference = config.inference
        pool = config.pools[inference.pool]
        ServiceDeployment(
            "inference",
            ServiceDeploymentArgs(
                stack=config.stack,
                service="inference",
                namespace=cluster.namespace,
                image=inference.image,
                revision=config.revision,
                replicas=0 if config.parked else inference.desired_per_colour,
                port=inference.port,
                health_path=inference.health_path,
                gpus=inference.gpus_per_task,
                node_pool=nodepool_name(pool.tenant, inference.pool),
                memory=f"{inference.memory}Mi",
                environment=database_environment,
            ),
            opts=opts,
        )
