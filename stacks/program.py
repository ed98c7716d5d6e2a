"""The Pulumi program: one stack config in, the whole platform declared.

``parked`` is applied here and nowhere else: every pool and service gets its parked capacity,
the nightly schedule is disabled, and the guardrails are built exactly as when unparked.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.cache import Cache, CacheArgs
from components.common import base_tags, child_of
from components.control_plane_service import ControlPlaneService, ControlPlaneServiceArgs
from components.database import Database, DatabaseArgs
from components.gpu_pool import GpuPool, GpuPoolArgs
from components.guardrail_functions import Guardrails, GuardrailsArgs, NightlyStart
from components.inference_service import InferenceService, InferenceServiceArgs
from components.network import Network, NetworkArgs
from guardrails import names
from stacks.config import StackConfig


def build_platform(config: StackConfig) -> None:
    tags = base_tags(config.stack, config.revision)
    network = Network(
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
    cluster = aws.ecs.Cluster(
        "cluster",
        name=names.ecs_cluster(config.stack),
        settings=[{"name": "containerInsights", "value": "enabled"}],
        tags=tags,
    )
    serving_pool = config.inference.pool if config.inference else None
    pools = {
        name: GpuPool(
            name,
            GpuPoolArgs(
                stack=config.stack,
                pool=name,
                role=pool.role,
                instance_type=pool.instance_type,
                tenant=pool.tenant,
                capacity=config.pool_capacity(pool),
                max_runtime=pool.max_runtime,
                capacity_type=pool.capacity_type,
                parked=config.parked,
                revision=config.revision,
                vpc_id=network.vpc_id,
                subnet_ids=network.private_subnet_ids,
                ecs_cluster_name=cluster.name if name == serving_pool else None,
                tags=tags,
            ),
        )
        for name, pool in config.pools.items()
    }
    capacity_providers = [
        pool.capacity_provider_name for pool in pools.values() if pool.capacity_provider_name
    ]
    if capacity_providers:
        aws.ecs.ClusterCapacityProviders(
            "cluster-capacity-providers",
            cluster_name=cluster.name,
            capacity_providers=capacity_providers,
            opts=child_of(cluster),
        )

    database = (
        Database(
            "database",
            DatabaseArgs(
                stack=config.stack,
                min_acu=config.database.min_acu,
                max_acu=config.database.max_acu,
                storage_gb=config.database.storage_gb,
                parked=config.parked,
                vpc_id=network.vpc_id,
                subnet_ids=network.private_subnet_ids,
                ingress_cidr=config.network.cidr,
                tags=tags,
            ),
        )
        if config.database
        else None
    )
    cache = (
        Cache(
            "cache",
            CacheArgs(
                stack=config.stack,
                node_type=config.cache.node_type,
                nodes=config.cache.nodes,
                vpc_id=network.vpc_id,
                subnet_ids=network.private_subnet_ids,
                ingress_cidr=config.network.cidr,
                tags=tags,
            ),
        )
        if config.cache
        else None
    )
    if config.control_plane:
        ControlPlaneService(
            "control-plane",
            ControlPlaneServiceArgs(
                stack=config.stack,
                image=config.control_plane.image,
                cpu=config.control_plane.cpu,
                memory=config.control_plane.memory,
                capacity=config.service_capacity(config.control_plane.capacity),
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
                tags=tags,
            ),
        )
    if config.inference:
        serving = pools[config.inference.pool]
        InferenceService(
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
                host_security_group_id=serving.security_group_id,
                live_colour=config.inference.live_colour,
                vpc_id=network.vpc_id,
                public_subnet_ids=network.public_subnet_ids,
                tags=tags,
            ),
        )

    nightly = config.nightly
    guardrails = Guardrails(
        "guardrails",
        GuardrailsArgs(
            stack=config.stack,
            region=config.region,
            parked=config.parked,
            sweep_every=config.guardrails.sweep_every,
            default_max_runtime=config.guardrails.default_max_runtime,
            max_exemption=config.guardrails.max_exemption,
            reap_untagged=config.guardrails.reap_untagged,
            alarm_email=config.guardrails.alarm_email,
            alarm_topic_arn=config.guardrails.alarm_topic_arn,
            pool_caps={name: pool.max_runtime for name, pool in config.pools.items()},
            nightly=(
                NightlyStart(
                    pool=nightly.pool,
                    cron=nightly.cron,
                    timezone=nightly.timezone,
                    capacity=nightly.capacity,
                    autoscaling_group_arn=pools[nightly.pool].autoscaling_group_arn,
                )
                if nightly
                else None
            ),
            autoscaling_group_arns=[pool.autoscaling_group_arn for pool in pools.values()],
            database_secret_arn=database.secret_arn if database else None,
            database_layer_arns=config.guardrails.database_layer_arns,
            vpc_id=network.vpc_id,
            subnet_ids=network.private_subnet_ids,
            tags=tags,
        ),
    )

    pulumi.export("parked", config.parked)
    pulumi.export("vpcId", network.vpc_id)
    pulumi.export("clusterName", cluster.name)
    pulumi.export("autoscalingGroups", {name: pool.autoscaling_group_name for name, pool in pools.items()})
    pulumi.export("alarmTopicArn", guardrails.topic_arn)
    if database:
        pulumi.export("databaseEndpoint", database.endpoint)
        pulumi.export("databaseSecretArn", database.secret_arn)
