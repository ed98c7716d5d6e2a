"""Database under the offline engine: Aurora Serverless v2, private, encrypted, parked at 0 ACU."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pulumi_aws as aws
from offline_outputs import capture

from components.database import Database, DatabaseArgs, managed_secret_arn
from stacks.offline import OfflineRun, RegisteredResource, run_offline

REGION = "us-east-1"
TAGS = {"parkbrake:managed": "true", "parkbrake:stack": "dev", "parkbrake:revision": "abc123"}
CLUSTER = "aws:rds/cluster:Cluster"
INSTANCE = "aws:rds/clusterInstance:ClusterInstance"
SUBNET_GROUP = "aws:rds/subnetGroup:SubnetGroup"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
PARAMETER_GROUP = "aws:rds/clusterParameterGroup:ClusterParameterGroup"
RANDOM_ID = "random:index/randomId:RandomId"


def database_args(**overrides: Any) -> DatabaseArgs:
    fields: dict[str, Any] = {
        "stack": "dev",
        "min_acu": 0.5,
        "max_acu": 4,
        "storage_gb": 20,
        "parked": False,
        "vpc_id": "vpc-0abc",
        "subnet_ids": ["subnet-private-a", "subnet-private-b"],
        "tags": TAGS,
    }
    return DatabaseArgs(**{**fields, **overrides})


def build(args: DatabaseArgs) -> tuple[OfflineRun, dict[str, Any]]:
    outputs: dict[str, Any] = {}

    def program() -> None:
        database = Database("database", args)
        capture(
            {
                "endpoint": database.endpoint,
                "port": database.port,
                "security_group_id": database.security_group_id,
            },
            into=outputs,
        )

    return run_offline(program, stack="dev", region=REGION), outputs


def only(run: OfflineRun, type_token: str) -> RegisteredResource:
    (resource,) = run.of_type(type_token)
    return resource


def scaling(run: OfflineRun) -> dict[str, Any]:
    return dict(only(run, CLUSTER).inputs["serverlessv2ScalingConfiguration"])


def test_unparked_database_scales_between_the_configured_acu() -> None:
    run, _ = build(database_args(min_acu=0.5, max_acu=4))

    assert scaling(run) == {"minCapacity": 0.5, "maxCapacity": 4}


def test_parked_database_drops_to_zero_acu_and_pauses_but_keeps_its_data() -> None:
    run, _ = build(database_args(min_acu=2, max_acu=8, parked=True, auto_pause_after=timedelta(minutes=10)))

    assert scaling(run) == {"minCapacity": 0, "maxCapacity": 8, "secondsUntilAutoPause": 600}
    cluster = only(run, CLUSTER)
    assert only(run, INSTANCE).inputs["instanceClass"] == "db.serverless"
    assert cluster.inputs["deletionProtection"] is True
    assert cluster.inputs["skipFinalSnapshot"] is False
    # A suffix of its own per cluster: a second destroy of the stack must not collide with the first snapshot.
    suffix = only(run, RANDOM_ID)
    assert suffix.inputs["byteLength"] == 4
    assert cluster.inputs["finalSnapshotIdentifier"].startswith("parkbrake-dev-postgres-final-")
    assert cluster.inputs["finalSnapshotIdentifier"] != "parkbrake-dev-postgres-final-"
    assert cluster.inputs["applyImmediately"] is True, "parking must not wait for a maintenance window"


def test_a_configured_floor_of_zero_pauses_unparked_too() -> None:
    run, _ = build(database_args(min_acu=0, max_acu=2))

    assert scaling(run) == {"minCapacity": 0, "maxCapacity": 2, "secondsUntilAutoPause": 300}


def test_cluster_is_aurora_postgresql_serverless_v2_that_can_reach_zero_acu() -> None:
    run, _ = build(database_args())

    cluster = only(run, CLUSTER)
    assert cluster.inputs["engine"] == only(run, INSTANCE).inputs["engine"] == "aurora-postgresql"
    assert cluster.inputs["engineMode"] == "provisioned"
    # A major version with automatic minor upgrades: a pinned minor would make `pulumi up` downgrade.
    assert cluster.inputs["engineVersion"] == "16"
    assert cluster.inputs["allowMajorVersionUpgrade"] is False
    assert only(run, INSTANCE).inputs["autoMinorVersionUpgrade"] is True
    assert "engineVersion" not in only(run, INSTANCE).inputs


def test_the_cluster_refuses_connections_without_tls() -> None:
    run, _ = build(database_args())

    parameters = only(run, PARAMETER_GROUP)
    assert parameters.inputs["family"] == "aurora-postgresql16"
    assert parameters.inputs["parameters"] == [
        {"name": "rds.force_ssl", "value": "1", "applyMethod": "immediate"}
    ]
    assert only(run, CLUSTER).inputs["dbClusterParameterGroupName"] == parameters.name


def test_database_is_encrypted_and_private() -> None:
    run, outputs = build(database_args())

    cluster = only(run, CLUSTER)
    assert cluster.inputs["storageEncrypted"] is True
    assert only(run, INSTANCE).inputs["publiclyAccessible"] is False
    assert only(run, SUBNET_GROUP).inputs["subnetIds"] == ["subnet-private-a", "subnet-private-b"]
    access = only(run, SECURITY_GROUP)
    assert access.inputs["vpcId"] == "vpc-0abc"
    assert "ingress" not in access.inputs  # clients are admitted by security group (test_data_store), no CIDR
    assert cluster.inputs["vpcSecurityGroupIds"] == [outputs["security_group_id"]]


def test_password_is_generated_by_rds_into_secrets_manager_and_never_an_input() -> None:
    run, outputs = build(database_args())

    cluster = only(run, CLUSTER)
    assert cluster.inputs["manageMasterUserPassword"] is True
    assert not {"masterPassword", "masterPasswordWo"} & set(cluster.inputs)
    assert set(outputs) == {"endpoint", "port", "security_group_id"}
    assert outputs["endpoint"] == "database-cluster.cluster.us-east-1.rds.amazonaws.com"
    assert outputs["port"] == 5432


def test_secret_arn_is_the_managed_master_user_secret() -> None:
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rds!cluster-abc-Xy12Zw"
    provider_shape = aws.rds.outputs.ClusterMasterUserSecret(secret_arn=arn, secret_status="active")

    assert managed_secret_arn([provider_shape]) == arn
    assert managed_secret_arn([{"secret_arn": arn, "kms_key_id": "k"}]) == arn
    assert managed_secret_arn([]) is None
    assert managed_secret_arn(None) is None


def test_every_database_resource_is_a_tagged_child_of_the_component() -> None:
    run, _ = build(database_args())

    (component,) = run.of_type("parkbrake:aws:Database")
    children = list(run.children_of(component))
    assert {child.type for child in children} == {
        CLUSTER, INSTANCE, SUBNET_GROUP, SECURITY_GROUP, PARAMETER_GROUP, RANDOM_ID,
    }  # fmt: skip
    assert [child.urn for child in children] == [
        resource.urn for resource in run.resources if resource.custom
    ]
    assert all(TAGS.items() <= child.inputs["tags"].items() for child in children if child.type != RANDOM_ID)
    (cluster,) = (child for child in children if child.type == CLUSTER)
    assert cluster.inputs["tags"]["parkbrake:storage-gb"] == "20"  # priced by the estimate


def test_park_switch_changes_only_the_scaling_floor() -> None:
    def declared(run: OfflineRun) -> dict[str, dict[str, Any]]:
        """Every resource's inputs by name, the scaling configuration left out."""
        return {
            resource.name: {
                key: value
                for key, value in resource.inputs.items()
                if key != "serverlessv2ScalingConfiguration"
            }
            for resource in run.resources
        }

    unparked, _ = build(database_args())
    parked, _ = build(database_args(parked=True))

    assert declared(parked) == declared(unparked)
    assert scaling(parked) != scaling(unparked)
