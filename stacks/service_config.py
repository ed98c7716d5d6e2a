"""The stack config's service sections (the control plane, the inference service and their endpoints) and
the GPU hosts' tools: their typed model and their parsers, used by :mod:`stacks.config`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from guardrails.capacity import Capacity
from guardrails.names import COLOURS
from stacks.validation import Section


class ServedPool(Protocol):
    """What the inference section checks of the pool it names (a :class:`stacks.config.GpuPoolConfig`):
    a protocol, not an import, because :mod:`stacks.config` imports this module."""

    @property
    def role(self) -> str: ...

    @property
    def instance_type(self) -> str: ...

    @property
    def capacity(self) -> Capacity: ...


# Fargate's allowed memory (MiB) for each CPU size (units of 1/1024 vCPU).
FARGATE_MEMORY = {
    256: range(512, 2048 + 1, 512),
    512: range(1024, 4096 + 1, 1024),
    1024: range(2048, 8192 + 1, 1024),
    2048: range(4096, 16384 + 1, 1024),
    4096: range(8192, 30720 + 1, 1024),
}
IMAGE = re.compile(r"[\w.\-/:]+(@sha256:[0-9a-f]{64})?")
HEALTH_PATH = re.compile(r"/[\w\-./]*")
DEFAULT_SCALE_TO_ZERO_AFTER = timedelta(
    minutes=15
)  # inference.scale_to_zero_after: no request this long, zero tasks
CERTIFICATE_ARN = re.compile(r"arn:aws[\w-]*:acm:[a-z0-9-]+:\d{12}:certificate/[\w-]+")
ENDPOINT_KEYS = {"internal", "certificate_arn", "requests_per_ip"}


@dataclass(frozen=True)
class EndpointConfig:
    """How a service is reached: ``internal`` (VPC only), or public behind HTTPS and a WAF rate limit."""

    internal: bool = False
    certificate_arn: str | None = None
    requests_per_ip: int = 2000  # per five minutes, WAF's window


@dataclass(frozen=True)
class ControlPlaneConfig:
    image: str
    cpu: int
    memory: int
    capacity: Capacity
    health_path: str = "/healthz"
    port: int = 8080
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)


@dataclass(frozen=True)
class InferenceConfig:
    image: str
    pool: str
    desired_per_colour: int
    gpus_per_task: int = 1
    memory: int = 8192
    health_path: str = "/healthz"
    port: int = 8080
    # Which colour serves; `parkbrake deploy` flips it after a successful blue-green deploy.
    live_colour: str = "blue"
    # No request for this long → the service (and so its GPU pool) scales to zero; None: never.
    scale_to_zero_after: timedelta | None = DEFAULT_SCALE_TO_ZERO_AFTER
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)


def capacity(section: Section, *, minimum_max: int = 1) -> Capacity:
    capacity = Capacity(
        min=section.integer("min", 0),
        desired=section.integer("desired"),
        max=section.integer("max", minimum=minimum_max, maximum=1000),
    )
    if section.has("desired") and section.has("max") and not capacity.min <= capacity.desired <= capacity.max:
        section.problems.add(
            section.path,
            f"capacities must satisfy min ≤ desired ≤ max; got min {capacity.min}, "
            f"desired {capacity.desired}, max {capacity.max}",
        )
    return capacity


def control_plane(root: Section) -> ControlPlaneConfig | None:
    if not root.has("control_plane"):
        return None
    section = root.section(
        "control_plane",
        {"image", "cpu", "memory", "min", "desired", "max", "health_path", "port", *ENDPOINT_KEYS},
    )
    cpu = section.integer("cpu", 512, minimum=256)
    memory = section.integer("memory", 1024, minimum=512)
    if cpu not in FARGATE_MEMORY:
        section.problems.add(
            section.at("cpu"),
            f"{cpu} is not a Fargate CPU size; use one of {', '.join(map(str, FARGATE_MEMORY))}",
        )
    elif memory not in FARGATE_MEMORY[cpu]:
        allowed = FARGATE_MEMORY[cpu]
        section.problems.add(
            section.at("memory"),
            f"{memory} MiB does not fit cpu {cpu}; use {allowed.start}–{allowed.stop - 1} in steps of {allowed.step}",
        )
    return ControlPlaneConfig(
        image=section.string("image", pattern=IMAGE, hint="a container image reference"),
        cpu=cpu,
        memory=memory,
        capacity=capacity(section),
        health_path=section.string(
            "health_path", "/healthz", pattern=HEALTH_PATH, hint="a path such as /healthz"
        ),
        port=section.integer("port", 8080, minimum=1, maximum=65535),
        endpoint=_endpoint(section),
    )


def _endpoint(section: Section) -> EndpointConfig:
    """A public endpoint without a certificate parses: the policy pack, not the parser, refuses it."""
    return EndpointConfig(
        internal=section.boolean("internal", False),
        certificate_arn=section.string(
            "certificate_arn", None, pattern=CERTIFICATE_ARN, hint="an ACM certificate ARN"
        )
        or None,
        # WAF's rate-based rules accept 10 to 2,000,000,000 requests per window.
        requests_per_ip=section.integer("requests_per_ip", 2000, minimum=10, maximum=2_000_000_000),
    )


def inference(
    root: Section, pools: Mapping[str, ServedPool], priced: dict[str, Any]
) -> InferenceConfig | None:
    if not root.has("inference"):
        return None
    section = root.section(
        "inference",
        {
            "image",
            "pool",
            "desired_per_colour",
            "gpus_per_task",
            "memory",
            "health_path",
            "port",
            "live_colour",
            "scale_to_zero_after",
            "scale_to_zero",
            *ENDPOINT_KEYS,
        },
    )
    pool_name = section.string("pool", hint="the name of an inference pool")
    # CloudWatch evaluates an alarm over at most a day.
    scale_to_zero_after = section.duration(
        "scale_to_zero_after", DEFAULT_SCALE_TO_ZERO_AFTER, ceiling=timedelta(days=1)
    )
    pool = pools.get(pool_name)
    gpus = section.integer("gpus_per_task", 1, minimum=1, maximum=16)
    desired = section.integer("desired_per_colour", minimum=1)
    if pool_name and pool is None:
        section.problems.add(
            section.at("pool"), f'"{pool_name}" is not a pool; use one of {", ".join(sorted(pools))}'
        )
    elif pool is not None:
        if pool.role != "inference":
            section.problems.add(
                section.at("pool"), f'"{pool_name}" is a {pool.role} pool; use an inference pool'
            )
        accelerators = priced[pool.instance_type].accelerators if pool.instance_type in priced else None
        if accelerators is not None and gpus > accelerators:
            section.problems.add(
                section.at("gpus_per_task"),
                f"{gpus} is more than the {accelerators} GPU(s) of {pool.instance_type}",
            )
        if desired > pool.capacity.max:
            section.problems.add(
                section.at("desired_per_colour"),
                f"{desired} is above pools.{pool_name}.max ({pool.capacity.max})",
            )
    return InferenceConfig(
        image=section.string("image", pattern=IMAGE, hint="a container image reference"),
        pool=pool_name,
        desired_per_colour=desired,
        gpus_per_task=gpus,
        memory=section.integer("memory", 8192, minimum=512),
        # parkbrake-inference's own: /healthz turns 200 once the model is warm; port 8080 in its image.
        health_path=section.string(
            "health_path", "/healthz", pattern=HEALTH_PATH, hint="a path such as /healthz"
        ),
        port=section.integer("port", 8080, minimum=1, maximum=65535),
        live_colour=section.choice("live_colour", COLOURS, "blue"),
        scale_to_zero_after=scale_to_zero_after if section.boolean("scale_to_zero", True) else None,
        endpoint=_endpoint(section),
    )


HOSTS_KEYS = {"tools_artifact", "tools_sha256", "ami_id", "agent_package"}
SHA256 = re.compile(r"[0-9a-f]{64}")
AMI_ID = re.compile(r"ami-[0-9a-f]{8,17}")


@dataclass(frozen=True)
class HostsConfig:
    """Where the GPU hosts' tools come from: exactly one of the stack's pinned artifact, a baked AMI, or
    (refused by the policy pack) a requirement installed from the public index at boot."""

    tools_artifact: Path | None = None
    tools_sha256: str | None = None
    ami_id: str | None = None
    agent_package: str | None = None


def hosts(root: Section, project_dir: Path) -> HostsConfig:
    """How the GPU hosts get their tools; a stack without pools (an organisation's hub) may leave it out."""
    if not root.has("hosts") and not root.raw.get("pools"):
        return HostsConfig()
    section = root.section("hosts", HOSTS_KEYS, required=True)
    chosen = [key for key in ("tools_artifact", "ami_id", "agent_package") if section.has(key)]
    if len(chosen) != 1 and not section.problems.has(section.path):
        section.problems.add(
            section.path,
            "needs exactly one of tools_artifact (with tools_sha256: the pinned artifact the stack uploads), "
            f"ami_id (an AMI with the host tools baked in) or agent_package; got {', '.join(chosen) or 'none'}",
        )
    if section.has("tools_artifact"):
        return _artifact(section, project_dir)
    return HostsConfig(
        ami_id=section.string("ami_id", None, pattern=AMI_ID, hint="an AMI id such as ami-0abc1234") or None,
        agent_package=section.string("agent_package", None, hint="a pip requirement") or None,
    )


def _artifact(section: Section, project_dir: Path) -> HostsConfig:
    path = Path(section.string("tools_artifact", hint="a path to the host-tools tarball"))
    sha256 = section.string("tools_sha256", pattern=SHA256, hint="the artifact's SHA-256, 64 hex digits")
    local = path if path.is_absolute() else project_dir / path
    # Checked when the file is here; a missing one stops `pulumi up` at the upload, not `plan`.
    if sha256 and local.is_file():
        actual = hashlib.sha256(local.read_bytes()).hexdigest()
        if actual != sha256:
            section.problems.add(
                section.at("tools_sha256"),
                f"{sha256} is not the SHA-256 of {path} ({actual}); rebuild it with "
                "scripts/build_host_tools.py and paste the hash it prints",
            )
    return HostsConfig(tools_artifact=path, tools_sha256=sha256 or None)
