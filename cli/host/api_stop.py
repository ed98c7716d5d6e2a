"""The host's last resort: stop itself through the EC2 API when the OS shutdown did not take it down.

``shutdown -h now`` can be accepted and still not happen (a unit that never stops, a hung kernel
module, a command that fails outright). A process that is still alive ``after`` the shutdown was
requested proves the host is still running and paying, so it asks EC2 to stop its own instance,
found through IMDSv2. The instance role allows that on its own instance only
(``aws:ARN`` equal to ``${ec2:SourceInstanceARN}``, declared in ``components/gpu_pool.py``).

A host in an Auto Scaling group is terminated rather than stopped: the group would replace a stopped
member anyway, and a spot instance cannot be stopped. Like the group release, this never raises:
every outcome is reported, and a failure leaves the deadline schedule and the sweep to stop the host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from cli.host.group_release import HostIdentity, InstanceMetadata, MetadataError, MetadataUnreachable
from guardrails.clock import Clock

DEFAULT_API_STOP_AFTER = timedelta(seconds=120)

Ec2For = Callable[[str], Any]  # region -> an EC2 client


class IdentitySource(Protocol):
    """Who this host is: IMDSv2 on EC2 (:class:`InstanceMetadata`)."""

    def identity(self) -> HostIdentity: ...


@dataclass(frozen=True)
class ApiStopResult:
    """What stopping through the API came to; the run and agent summaries carry it."""

    action: str | None = None  # "stop" or "terminate"; None when no call was made
    instance_id: str | None = None
    done: bool = False
    error: str | None = None
    on_ec2: bool = True

    @property
    def ok(self) -> bool:
        """The call went through, or there is no EC2 instance to stop (a workstation, a test box)."""
        return self.done or not self.on_ec2

    def describe(self) -> str:
        if not self.on_ec2:
            return "still running after the OS shutdown, and no instance metadata service answered: not an EC2 host"
        if self.done:
            return f"still running after the OS shutdown: asked EC2 to {self.action} {self.instance_id}"
        return (
            f"still running after the OS shutdown, and the EC2 {self.action or 'stop'} failed: {self.error}; "
            "the deadline schedule and the sweep stop this host"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "instance_id": self.instance_id,
            "done": self.done,
            "error": self.error,
            "on_ec2": self.on_ec2,
        }


def _ec2_client(region: str) -> Any:
    from lambdas.clients import client

    return client("ec2", region)


def stop_through_api(
    *, terminate: bool = False, metadata: IdentitySource | None = None, ec2_for: Ec2For = _ec2_client
) -> ApiStopResult:
    """Stop (or terminate) this host's own instance through EC2 now; never raises."""
    metadata = metadata or InstanceMetadata.from_environment()
    try:
        host = metadata.identity()
    except MetadataUnreachable:
        return ApiStopResult(on_ec2=False)
    except MetadataError as error:
        return ApiStopResult(error=f"could not read the instance metadata: {error}")
    action = "terminate" if terminate or host.group is not None else "stop"
    from lambdas.aws.errors import AWS_ERRORS, describe_error

    ec2 = ec2_for(host.region)
    call = ec2.terminate_instances if action == "terminate" else ec2.stop_instances
    try:
        call(InstanceIds=[host.instance_id])
    except AWS_ERRORS as error:
        return ApiStopResult(action, host.instance_id, error=describe_error(error))
    return ApiStopResult(action, host.instance_id, done=True)


@dataclass(frozen=True)
class ApiFallback:
    """How long to give the OS shutdown before stopping through the API (``None``: never)."""

    after: timedelta | None = DEFAULT_API_STOP_AFTER
    terminate: bool = False
    metadata: IdentitySource | None = None
    ec2_for: Ec2For = _ec2_client

    def after_shutdown(self, shutdown_ok: bool, clock: Clock) -> ApiStopResult | None:
        """Wait out the OS shutdown (at once if it failed); still here, stop through the API.

        Returns only when the host did not go down: while the shutdown works, this process is killed
        during the wait, which is the whole point.
        """
        if self.after is None:
            return None
        if shutdown_ok:
            clock.sleep(self.after.total_seconds())
        return stop_through_api(terminate=self.terminate, metadata=self.metadata, ec2_for=self.ec2_for)
