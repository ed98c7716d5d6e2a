"""Run a Pulumi program offline under the SDK's mock engine and collect what it registers.

This is how ``parkbrake plan`` and the component tests see a stack without the Pulumi CLI or a
cloud account: every resource the real program declares is registered with a mock monitor, which
records its type, name, parent and inputs (Pulumi's own camelCase property names).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime import mocks, rpc
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

ACCOUNT_ID = "123456789012"
MOCK_AMI = "ami-0mockgpuoptimized0"
MOCK_VPC_CIDR = "10.40.0.0/16"


@dataclass(frozen=True)
class RegisteredResource:
    type: str
    name: str
    urn: str
    parent: str | None
    custom: bool
    inputs: dict[str, Any]
    ignore_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False
    # URNs of the resources it explicitly depends on (``depends_on``).
    dependencies: tuple[str, ...] = ()
    # The URN of the explicit provider it is declared through (``provider=``), or None for the default.
    provider: str | None = None

    @property
    def is_component(self) -> bool:
        return not self.custom


@dataclass(frozen=True)
class OfflineRun:
    project: str
    stack: str
    resources: list[RegisteredResource]

    def of_type(self, type_token: str) -> list[RegisteredResource]:
        return [resource for resource in self.resources if resource.type == type_token]

    def named(self, type_token: str, name: str) -> RegisteredResource:
        matches = [resource for resource in self.of_type(type_token) if resource.name == name]
        if len(matches) != 1:
            known = sorted(resource.name for resource in self.of_type(type_token))
            raise KeyError(f"{len(matches)} {type_token} named {name!r}; registered: {known}")
        return matches[0]

    def children_of(self, parent: RegisteredResource) -> Iterator[RegisteredResource]:
        return (resource for resource in self.resources if resource.parent == parent.urn)


def _mock_id(type_token: str, name: str) -> str:
    return f"{name}-{hashlib.sha256(f'{type_token}/{name}'.encode()).hexdigest()[:12]}"


class OfflineMocks(mocks.Mocks):
    """Answers resource registrations and provider calls with deterministic, plausible values."""

    def __init__(self, region: str) -> None:
        self.region = region

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        resource_id = _mock_id(args.typ, args.name)
        package, _, rest = args.typ.partition(":")
        service = rest.partition(":")[0].split("/")[0]
        arn = f"arn:aws:{service}:{self.region}:{ACCOUNT_ID}:{args.name}"
        outputs: dict[str, Any] = {"id": resource_id, "arn": arn, "name": args.name, **args.inputs}
        if package == "aws":
            outputs.update(_service_outputs(args.typ, args.name, arn, self.region))
            outputs.update(_s3_outputs(args.typ, args.inputs, resource_id))
        elif package == "random":
            outputs.update(_random_outputs(args.typ, resource_id))
        return resource_id, outputs

    def call(self, args: mocks.MockCallArgs) -> dict[str, Any]:  # type: ignore[override]
        if args.token == "aws:ssm/getParameter:getParameter":
            return {"name": args.args.get("name"), "value": MOCK_AMI, "type": "String"}
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            zones = [f"{self.region}{letter}" for letter in "abc"]
            return {"names": zones, "zoneIds": [f"use1-az{i}" for i in range(1, 4)], "id": self.region}
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT_ID, "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/plan", "id": ACCOUNT_ID}
        if args.token in ("aws:index/getRegion:getRegion", "aws:index/region:Region"):
            return {"name": self.region, "region": self.region, "id": self.region}
        if args.token == "aws:ec2/getVpc:getVpc":
            return {"id": args.args.get("id"), "cidrBlock": MOCK_VPC_CIDR}
        if args.token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
        return {}


def _random_outputs(type_token: str, resource_id: str) -> dict[str, Any]:
    """The values pulumi-random generates, derived from the resource so every run is the same."""
    if type_token == "random:index/randomId:RandomId":
        return {"hex": resource_id[-8:]}
    if type_token == "random:index/randomPassword:RandomPassword":
        return {"result": f"offline-{resource_id}"}
    return {}


def _service_outputs(type_token: str, name: str, arn: str, region: str) -> dict[str, Any]:
    """Outputs that real providers compute and that other resources consume."""
    if type_token == "aws:lb/loadBalancer:LoadBalancer":
        return {"dnsName": f"{name}.{region}.elb.amazonaws.com", "arnSuffix": f"app/{name}/0123456789abcdef"}
    if type_token == "aws:lb/targetGroup:TargetGroup":
        return {"arnSuffix": f"targetgroup/{name}/0123456789abcdef"}
    if type_token == "aws:rds/cluster:Cluster":
        return {
            "endpoint": f"{name}.cluster.{region}.rds.amazonaws.com",
            "port": 5432,
            # RDS creates the managed master-user secret itself; consumers read its ARN from here.
            "masterUserSecrets": [
                {
                    "secretArn": f"arn:aws:secretsmanager:{region}:{ACCOUNT_ID}:secret:rds!cluster-{name}",
                    "secretStatus": "active",
                }
            ],
        }
    if type_token == "aws:elasticache/replicationGroup:ReplicationGroup":
        return {"primaryEndpointAddress": f"{name}.cache.amazonaws.com", "port": 6379}
    if type_token == "aws:lambda/function:Function":
        return {"invokeArn": f"arn:aws:apigateway:{region}:lambda:path/functions/{arn}/invocations"}
    return {}


def _s3_outputs(type_token: str, inputs: dict[str, Any], resource_id: str) -> dict[str, Any]:
    """A bucket's ARN has neither region nor account (``arn:aws:s3:::<bucket>``); a versioned object's
    upload returns its version id, made up here from the resource."""
    if type_token == "aws:s3/bucket:Bucket" and inputs.get("bucket"):
        return {"arn": f"arn:aws:s3:::{inputs['bucket']}"}
    if type_token == "aws:s3/bucketObjectv2:BucketObjectv2":
        return {"versionId": f"offline.{resource_id[-12:]}"}
    return {}


class RecordingMonitor(mocks.MockMonitor):
    """The SDK's mock monitor, also remembering each resource's parent and whether it is custom."""

    def __init__(self, offline_mocks: mocks.Mocks) -> None:
        super().__init__(offline_mocks)
        self.parents: dict[str, str | None] = {}
        self.custom: dict[str, bool] = {}
        self.inputs: dict[str, dict[str, Any]] = {}
        self.ignore_changes: dict[str, tuple[str, ...]] = {}
        self.delete_before_replace: dict[str, bool] = {}
        self.dependencies: dict[str, tuple[str, ...]] = {}
        self.providers: dict[str, str | None] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.parents[response.urn] = request.parent or None
            self.custom[response.urn] = bool(request.custom)
            self.inputs[response.urn] = dict(rpc.deserialize_properties(request.object))
            self.ignore_changes[response.urn] = tuple(request.ignoreChanges)
            self.delete_before_replace[response.urn] = bool(request.deleteBeforeReplace)
            self.dependencies[response.urn] = tuple(request.dependencies)
            # A provider reference is "<urn>::<id>"; the default provider's URN names it "default…".
            provider = request.provider.rsplit("::", 1)[0] if request.provider else None
            self.providers[response.urn] = None if not provider or "::default" in provider else provider
        return response


def _parent_below_stack(parent_urn: str | None) -> str | None:
    """The parent's URN, or None when the parent is the stack itself."""
    if not parent_urn or parent_urn.split("::")[2] == "pulumi:pulumi:Stack":
        return None
    return parent_urn


def run_offline(
    program: Callable[[], None], *, stack: str, region: str, project: str = "parkbrake"
) -> OfflineRun:
    """Run ``program`` under the mock engine and return every resource it registered, in order."""
    monitor = RecordingMonitor(OfflineMocks(region))
    mocks.set_mocks(monitor.mocks, project=project, stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.settings.SETTINGS.rpc_manager.clear()
    _sync_await(run_pulumi_func(program))
    resources = [
        RegisteredResource(
            type=registration.urn.split("::")[2].split("$")[-1],
            name=registration.urn.split("::")[-1],
            urn=urn,
            parent=_parent_below_stack(monitor.parents.get(urn)),
            custom=monitor.custom.get(urn, True),
            inputs=monitor.inputs.get(urn, {}),
            ignore_changes=monitor.ignore_changes.get(urn, ()),
            delete_before_replace=monitor.delete_before_replace.get(urn, False),
            dependencies=monitor.dependencies.get(urn, ()),
            provider=monitor.providers.get(urn),
        )
        for urn, registration in monitor.get_registered_resources().items()
    ]
    return OfflineRun(project=project, stack=stack, resources=resources)


def jsonable(value: Any) -> Any:
    """Inputs as JSON: assets and archives (the Lambda code) by their kind and path, anything else by str."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    path = getattr(value, "path", None)
    return {"kind": type(value).__name__, "path": path} if path else type(value).__name__


@dataclass(frozen=True)
class InputChange:
    """One input of one resource that differs between the two states, as Pulumi will change it."""

    type: str
    name: str
    input: str  # dotted path into the inputs, e.g. ``desiredCapacity`` or ``target.input``
    before: Any
    after: Any

    @property
    def to_zero(self) -> bool:
        return self.after in (0, "DISABLED") and self.before not in (0, "DISABLED")


def input_changes(before: OfflineRun, after: OfflineRun) -> list[InputChange]:
    """Every input, of every resource declared in both runs, whose value differs (leaf by leaf)."""
    declared = {(resource.type, resource.name): resource for resource in before.resources}
    changes = []
    for resource in after.resources:
        previous = declared.get((resource.type, resource.name))
        if previous is None:
            continue
        old, new = _leaves(jsonable(previous.inputs)), _leaves(jsonable(resource.inputs))
        changes += [
            InputChange(resource.type, resource.name, path, old.get(path), new.get(path))
            for path in sorted(old.keys() | new.keys())
            if old.get(path) != new.get(path)
        ]
    return changes


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [2]}`` → ``{"a.b": 1, "c[0]": 2}``."""
    if isinstance(value, dict):
        return {
            path: leaf
            for key, item in value.items()
            for path, leaf in _leaves(item, f"{prefix}.{key}" if prefix else str(key)).items()
        }
    if isinstance(value, list):
        return {
            path: leaf
            for index, item in enumerate(value)
            for path, leaf in _leaves(item, f"{prefix}[{index}]").items()
        }
    if isinstance(value, float) and value.is_integer():
        return {prefix: int(value)}  # the engine hands every number over as a float: 1.0 is 1
    return {prefix: value}
