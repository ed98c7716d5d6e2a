"""The Pulumi program: one stack config in, the whole platform declared.

``parked`` is applied here and nowhere else: every pool and service gets its parked capacity,
the nightly schedule is disabled, and the guardrails are built exactly as when unparked.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_aws as aws

from components.cache import Cache, CacheArgs
from components.common import base_tags, child_of
from components.control_plane_service import ControlPlaneService, ControlPlaneServiceArgs
from components.database import Database, DatabaseArgs
from components.ecs_service import EndpointArgs
from components.gpu_pool import BakedAmi, GpuPool, GpuPoolArgs, HostTools, PublicIndex, ToolsArtifact
from components.guardrail_functions import Guardrails, GuardrailsArgs
from components.guardrail_schedules import NightlyStart
from components.inference_service import InferenceService, InferenceServiceArgs
from components.network import Network, NetworkArgs
from components.org_hub import spokes_parameter
from guardrails import names, settings
from guardrails.stack_budgets import budgets_json, budgets_of_config
from stacks.config import StackConfig
from stacks.service_config import EndpointConfig, HostsConfig


def build_aws_platform(config: StackConfig) -> Guardrails:
    """The AWS stack: GPU pools in Auto Scaling groups, the services on ECS (stacks/platform.py chooses);
    its guardrails, which an organisation's hub extends."""
    tags = base_tags(config.stack, config.revision)
    network = _network(config, tags)
    cluster = aws.ecs.Cluster(
        "cluster",
        name=names.ecs_cluster(config.stack),
        settings=[{"name": "containerInsights", "value": "enabled"}],
        tags=tags,
        opts=pulumi.ResourceOptions(delete_before_replace=True),
    )
    pools = _pools(config, network, cluster, _host_tools(config.hosts, tags), tags)
    association = _capacity_providers(cluster, pools)
    database, cache = _data_stores(config, network, tags)
    control_plane = _control_plane(config, network, cluster, database=database, cache=cache, tags=tags)
    _inference(config, network, cluster, pools=pools, association=association, tags=tags)
    guardrails = _guardrails(config, network, pools, database, tags)
    _admit_clients(database, cache, control_plane, guardrails)

    pulumi.export("parked", config.parked)
    pulumi.export("vpcId", network.vpc_id)
    pulumi.export("clusterName", cluster.name)
    pulumi.export("autoscalingGroups", {name: pool.autoscaling_group_name for name, pool in pools.items()})
    pulumi.export("alarmTopicArn", guardrails.topic_arn)
    if database:
        pulumi.export("databaseEndpoint", database.endpoint)
        pulumi.export("databaseSecretArn", database.secret_arn)
    return guardrails


def _network(config: StackConfig, tags: Mapping[str, str]) -> Network:
    return Network(
        "network",
        NetworkArgs(
            stack=config.stack,
            cidr=config.network.cidr,
            vpc_id=config.network.vpc_id,
            public_subnet_ids=config.network.public_subnet_ids,
            private_subnet_ids=config.network.private_subnet_ids,
            tags=tags,
        ),
    )


def _host_tools(hosts: HostsConfig, tags: Mapping[str, str]) -> HostTools | None:
    """The host tools' source; the pinned artifact is uploaded to a private bucket of the stack's."""
    if hosts.ami_id is not None:
        return BakedAmi(hosts.ami_id)
    if hosts.agent_package is not None:
        return PublicIndex(hosts.agent_package)
    if hosts.tools_artifact is None or hosts.tools_sha256 is None:
        return None
    bucket = aws.s3.Bucket("host-tools", force_destroy=True, tags=dict(tags))
    aws.s3.BucketPublicAccessBlock(
        "host-tools",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=pulumi.ResourceOptions(parent=bucket),
    )
    # Addressed by its hash: a new artifact is a new object, and a host checks what it downloads against it.
    key = f"host-tools/{hosts.tools_sha256}.tar.gz"
    aws.s3.BucketObjectv2(
        "host-tools",
        bucket=bucket.id,
        key=key,
        source=pulumi.FileAsset(str(hosts.tools_artifact)),
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=bucket),
    )
    return ToolsArtifact(bucket=bucket.bucket, key=key, sha256=hosts.tools_sha256)


def _pools(
    config: StackConfig,
    network: Network,
    cluster: aws.ecs.Cluster,
    host_tools: HostTools | None,
    tags: Mapping[str, str],
) -> dict[str, GpuPool]:
    serving_pool = config.inference.pool if config.inference else None
    return {
        name: GpuPool(
            name,
            GpuPoolArgs(
                stack=config.stack,
                pool=name,
                role=pool.role,
                instance_type=pool.instance_type,
                fallback_instance_types=pool.fallback_instance_types,
                tenant=pool.tenant,
                capacity=config.pool_capacity(pool),
                max_runtime=pool.max_runtime,
                capacity_type=pool.capacity_type,
                parked=config.parked,
                revision=config.revision,
                vpc_id=network.vpc_id,
                subnet_ids=network.private_subnet_ids,
                ecs_cluster_name=cluster.name if name == serving_pool else None,
                host_tools=host_tools,
                owner=pool.owner,
                agent_idle_after=pool.agent_idle_after,
                tags=tags,
            ),
        )
        for name, pool in config.pools.items()
    }


def _capacity_providers(
    cluster: aws.ecs.Cluster, pools: Mapping[str, GpuPool]
) -> aws.ecs.ClusterCapacityProviders | None:
    """The cluster's association with the serving pools' capacity providers, which services must wait for."""
    providers = [pool.capacity_provider_name for pool in pools.values() if pool.capacity_provider_name]
    if not providers:
        return None
    return aws.ecs.ClusterCapacityProviders(
        "cluster-capacity-providers",
        cluster_name=cluster.name,
        capacity_providers=providers,
        opts=child_of(cluster, delete_before_replace=True),
    )


def _data_stores(
    config: StackConfig, network: Network, tags: Mapping[str, str]
) -> tuple[Database | None, Cache | None]:
    database = cache = None
    if config.database:
        database = Database(
            "database",
            DatabaseArgs(
                stack=config.stack,
                min_acu=config.database.min_acu,
                max_acu=config.database.max_acu,
                storage_gb=config.database.storage_gb,
                parked=config.parked,
                vpc_id=network.vpc_id,
                subnet_ids=network.private_subnet_ids,
                tags=tags,
            ),
        )
    if config.cache:
        cache = Cache(
            "cache",
            CacheArgs(
                stack=config.stack,
                node_type=config.cache.node_type,
                nodes=config.cache.nodes,
                vpc_id=network.vpc_id,
                subnet_ids=network.private_subnet_ids,
                tags=tags,
            ),
        )
    return database, cache


def _endpoint(endpoint: EndpointConfig) -> EndpointArgs:
    return EndpointArgs(
        internal=endpoint.internal,
        certificate_arn=endpoint.certificate_arn,
        requests_per_ip=endpoint.requests_per_ip,
    )


def _control_plane(
    config: StackConfig,
    network: Network,
    cluster: aws.ecs.Cluster,
    *,
    database: Database | None,
    cache: Cache | None,
    tags: Mapping[str, str],
) -> ControlPlaneService | None:
    if not config.control_plane:
        return None
    return ControlPlaneService(
        "control-plane",
        ControlPlaneServiceArgs(
            stack=config.stack,
            image=config.control_plane.image,
            cpu=config.control_plane.cpu,
            memory=config.control_plane.memory,
            capacity=config.service_capacity(config.control_plane.capacity),
            parked=config.parked,
            health_path=config.control_plane.health_path,
            port=config.control_plane.port,
            revision=config.revision,
            cluster_arn=cluster.arn,
            vpc_id=network.vpc_id,
            public_subnet_ids=network.public_subnet_ids,
            private_subnet_ids=network.private_subnet_ids,
            database_endpoint=database.endpoint if database else None,
            database_secret_arn=database.secret_arn if database else None,
            cache_endpoint=cache.endpoint if cache else None,
            cache_secret_arn=cache.secret_arn if cache else None,
            endpoint=_endpoint(config.control_plane.endpoint),
            tags=tags,
        ),
    )


def _inference(
    config: StackConfig,
    network: Network,
    cluster: aws.ecs.Cluster,
    *,
    pools: Mapping[str, GpuPool],
    association: pulumi.Resource | None,
    tags: Mapping[str, str],
) -> InferenceService | None:
    if not config.inference:
        return None
    serving = pools[config.inference.pool]
    return InferenceService(
        "inference",
        InferenceServiceArgs(
            stack=config.stack,
            image=config.inference.image,
            desired_per_colour=0 if config.parked else config.inference.desired_per_colour,
            gpus_per_task=config.inference.gpus_per_task,
            memory=config.inference.memory,
            health_path=config.inference.health_path,
            port=config.inference.port,
            revision=config.revision,
            cluster_arn=cluster.arn,
            capacity_provider_name=serving.capacity_provider_name,
            capacity_provider_association=association,
            host_security_group_id=serving.security_group_id,
            live_colour=config.inference.live_colour,
            scale_to_zero_after_seconds=(
                int(config.inference.scale_to_zero_after.total_seconds())
                if config.inference.scale_to_zero_after
                else None
            ),
            vpc_id=network.vpc_id,
            public_subnet_ids=network.public_subnet_ids,
            private_subnet_ids=network.private_subnet_ids,
            endpoint=_endpoint(config.inference.endpoint),
            tags=tags,
        ),
    )


def hub_environment(config: StackConfig) -> dict[str, str]:
    """An organisation's hub: with the central sweep its reaper reads the spokes from their parameter,
    and its meter takes the member accounts' events."""
    organisation = config.organisation
    if organisation is None:
        return {}
    environment = {}
    if organisation.sweep == "central":
        environment[settings.SPOKES_PARAMETER] = spokes_parameter(config.stack)
    if organisation.spokes == "stacks":
        # The meter takes the listed accounts' events; a StackSet's accounts join their OU later and
        # are not known here: the meter, budget and reconciler learn them from the spokes parameter
        # (hub_member_accounts_environment).
        members = sorted({placement.account_id for placement in organisation.placements()})
        environment[settings.MEMBER_ACCOUNTS] = ",".join(members)
    return environment


def hub_member_accounts_environment(config: StackConfig) -> dict[str, str]:
    """The hub's meter, budget and reconciler learn their member accounts from the spokes parameter,
    in either form: with ``spokes: stackset`` that is the only way, as accounts join the OUs after
    the deploy (lambdas/aws/spoke_list.py)."""
    if config.organisation is None:
        return {}
    return {settings.SPOKES_PARAMETER: spokes_parameter(config.stack)}


def _guardrails(
    config: StackConfig,
    network: Network,
    pools: Mapping[str, GpuPool],
    database: Database | None,
    tags: Mapping[str, str],
) -> Guardrails:
    nightly = config.nightly
    return Guardrails(
        "guardrails",
        GuardrailsArgs(
            stack=config.stack,
            region=config.region,
            parked=config.parked,
            sweep_every=config.guardrails.sweep_every,
            # Every row of the settings table, as the stack file set it or by the table's default.
            tuning=config.guardrails,
            alarm_email=config.guardrails.alarm_email,
            alarm_topic_arn=config.guardrails.alarm_topic_arn,
            pool_caps={name: pool.max_runtime for name, pool in config.pools.items()},
            tenants=sorted(config.tenants),
            hub_environment=hub_environment(config),
            member_accounts_environment=hub_member_accounts_environment(config),
            nightly=(
                NightlyStart(
                    pool=nightly.pool,
                    cron=nightly.cron,
                    timezone=nightly.timezone,
                    capacity=nightly.capacity,
                    calendar=nightly.calendar,
                    autoscaling_group_arn=pools[nightly.pool].autoscaling_group_arn,
                )
                if nightly
                else None
            ),
            autoscaling_group_arns=[pool.autoscaling_group_arn for pool in pools.values()],
            database_secret_arn=database.secret_arn if database else None,
            database_layer_arns=config.guardrails.database_layer_arns,
            stack_budgets=budgets_json(budgets_of_config(config.tenants)),
            vpc_id=network.vpc_id,
            subnet_ids=network.private_subnet_ids,
            tags=tags,
        ),
    )


def _admit_clients(
    database: Database | None,
    cache: Cache | None,
    control_plane: ControlPlaneService | None,
    guardrails: Guardrails,
) -> None:
    """Who may reach the data stores: their clients' security groups, never a CIDR."""
    if control_plane is not None:
        for store in (database, cache):
            if store is not None:
                store.admit("control-plane", control_plane.tasks_security_group_id)
    if database is not None and guardrails.database_security_group_id is not None:
        database.admit("guardrails", guardrails.database_security_group_id)
