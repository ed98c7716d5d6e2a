"""Leaving the host's Auto Scaling group before it shuts itself down (``--release-from-group``).

A GPU pool's launch template shuts its hosts down into ``terminate``, and a group whose host
terminates launches a replacement unless its desired capacity was lowered first. So before the OS
shutdown, the host asks the instance metadata service (IMDSv2, no IAM needed) which instance and
group it is, and removes itself with ``TerminateInstanceInAutoScalingGroup`` and
``ShouldDecrementDesiredCapacity=True`` — the reaper's own stop path for a host in a group.

Every failure here is reported and never raised: the OS shutdown runs next whatever happened, so a
missing permission cannot keep a host paying. A replacement the group launches then is capped by its
own deadline schedule and the sweep.
"""

from __future__ import annotations

import http.client
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from guardrails.hosts import AUTOSCALING_GROUP_TAG
from guardrails.settings import process_variable
from guardrails.settings_table import IMDS_ENDPOINT

IMDS_ENDPOINT_VARIABLE = IMDS_ENDPOINT
# The AWS SDKs' own variable for the endpoint, honoured when parkbrake's is not set.
AWS_IMDS_ENDPOINT_VARIABLE = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
DEFAULT_IMDS_ENDPOINT = "http://169.254.169.254"
# IMDS answers within milliseconds on EC2; off EC2 nothing answers, and the shutdown must not wait.
IMDS_TIMEOUT_SECONDS = 2.0
# The token is used for three reads, right away.
TOKEN_TTL_SECONDS = 60
TOKEN_PATH = "/latest/api/token"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
INSTANCE_ID_PATH = "/latest/meta-data/instance-id"
REGION_PATH = "/latest/meta-data/placement/region"
GROUP_TAG_PATH = f"/latest/meta-data/tags/instance/{AUTOSCALING_GROUP_TAG}"

AutoscalingFor = Callable[[str], Any]  # region -> an autoscaling client


class MetadataUnreachable(Exception):
    """Nothing answered at the metadata endpoint: this is not an EC2 host."""


class MetadataError(Exception):
    """The metadata service answered, but not with what was asked for."""


class NoSessionToken(MetadataError):
    """The token request was refused or is unknown: this metadata service does not serve IMDSv2."""


class TokenRejected(MetadataError):
    """A read answered 401: the session token expired or was never valid; a new one is needed."""


@dataclass(frozen=True)
class HostIdentity:
    instance_id: str
    region: str
    group: str | None  # None: the instance has no aws:autoscaling:groupName tag


class InstanceMetadata:
    """IMDSv2 at ``endpoint``: a session token first (PUT), then reads that present it."""

    def __init__(self, endpoint: str, *, timeout: float = IMDS_TIMEOUT_SECONDS) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._timeout = timeout
        # The metadata service is link-local: an HTTP(S)_PROXY from the environment must not see it.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._session: tuple[str, float] | None = None  # a token kept for read(), and when to renew it

    @classmethod
    def from_environment(cls) -> InstanceMetadata:
        return cls(
            process_variable(os.environ, IMDS_ENDPOINT_VARIABLE)
            or os.environ.get(AWS_IMDS_ENDPOINT_VARIABLE)
            or DEFAULT_IMDS_ENDPOINT
        )

    def _token(self, ttl_seconds: int) -> str:
        try:
            token = self._request("PUT", TOKEN_PATH, {TOKEN_TTL_HEADER: str(ttl_seconds)})
        except MetadataError as error:
            raise NoSessionToken(str(error)) from None
        if token is None:
            raise NoSessionToken(f"the metadata service has no {TOKEN_PATH} (IMDSv2)")
        return token

    def read(self, path: str, *, ttl_seconds: int = 21600) -> str | None:
        """One read with a session token kept between calls (None on 404): for a watcher that polls.

        The token is renewed a minute before its TTL runs out, and at once when a read answers 401
        (the service restarted, or the token was revoked).
        """
        if self._session is None or time.monotonic() >= self._session[1]:
            self._session = (self._token(ttl_seconds), time.monotonic() + ttl_seconds - 60)
        try:
            return self._request("GET", path, {TOKEN_HEADER: self._session[0]})
        except TokenRejected:
            self._session = (self._token(ttl_seconds), time.monotonic() + ttl_seconds - 60)
            return self._request("GET", path, {TOKEN_HEADER: self._session[0]})

    def identity(self) -> HostIdentity:
        """This host's instance id, region and group; raises MetadataUnreachable or MetadataError."""
        presented = {TOKEN_HEADER: self._token(TOKEN_TTL_SECONDS)}
        instance_id = self._request("GET", INSTANCE_ID_PATH, presented)
        region = self._request("GET", REGION_PATH, presented)
        if not instance_id or not region:
            raise MetadataError("the metadata service does not report this host's instance id and region")
        # 404 when the instance has no such tag, and also when tags in metadata are not enabled.
        group = self._request("GET", GROUP_TAG_PATH, presented)
        return HostIdentity(instance_id, region, group or None)

    def _request(self, method: str, path: str, headers: dict[str, str]) -> str | None:
        """The body as text; None on 404."""
        request = urllib.request.Request(f"{self.endpoint}{path}", method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self._timeout) as response:
                body: bytes = response.read()
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if error.code == 401:
                raise TokenRejected(f"{method} {path} answered HTTP 401 {error.reason}") from None
            raise MetadataError(f"{method} {path} answered HTTP {error.code} {error.reason}") from None
        except urllib.error.URLError as error:
            raise MetadataUnreachable(f"{self.endpoint}: {error.reason}") from None
        except (TimeoutError, ConnectionError) as error:
            raise MetadataUnreachable(f"{self.endpoint}: {error or type(error).__name__}") from None
        except http.client.HTTPException as error:
            raise MetadataError(f"{method} {path}: {error!r}") from None
        return body.decode().strip()


@dataclass(frozen=True)
class ReleaseResult:
    """What leaving the group came to; the run and agent summaries carry it."""

    in_group: bool
    group: str | None = None
    released: bool = False
    error: str | None = None  # why the group could not be left (or the metadata not read)
    instance_id: str | None = None
    on_ec2: bool = True  # False: no metadata service answered

    def describe(self) -> str:
        if not self.on_ec2:
            return "no instance metadata service answered: not an EC2 host, no Auto Scaling group to leave"
        if self.instance_id is None:
            return (
                f"could not read the instance metadata ({self.error}); shutting down without leaving a group"
            )
        if not self.in_group:
            return f"{self.instance_id} is in no Auto Scaling group"
        if self.released:
            return (
                f"{self.instance_id} left Auto Scaling group {self.group}; its desired capacity is one lower, "
                "so no replacement is launched"
            )
        return (
            f"could not leave Auto Scaling group {self.group}: {self.error}; shutting down anyway, and the "
            "group may launch a replacement, which its own deadline or the sweep stops within one cap"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "in_group": self.in_group,
            "group": self.group,
            "released": self.released,
            "error": self.error,
            "instance_id": self.instance_id,
            "on_ec2": self.on_ec2,
        }


def _autoscaling_client(region: str) -> Any:
    from lambdas.clients import client

    return client("autoscaling", region)


def release_from_group(
    metadata: InstanceMetadata | None = None, *, autoscaling_for: AutoscalingFor = _autoscaling_client
) -> ReleaseResult:
    """Remove this host from its Auto Scaling group, lowering desired capacity; never raises."""
    metadata = metadata or InstanceMetadata.from_environment()
    try:
        host = metadata.identity()
    except MetadataUnreachable:
        return ReleaseResult(in_group=False, on_ec2=False)
    except MetadataError as error:
        return ReleaseResult(in_group=False, error=str(error))
    if host.group is None:
        return ReleaseResult(in_group=False, instance_id=host.instance_id)
    # botocore only on this path: hosts outside a group never load it.
    from lambdas.aws.errors import AWS_ERRORS, describe_error

    try:
        autoscaling_for(host.region).terminate_instance_in_auto_scaling_group(
            InstanceId=host.instance_id, ShouldDecrementDesiredCapacity=True
        )
    except AWS_ERRORS as error:
        return ReleaseResult(
            in_group=True, group=host.group, error=describe_error(error), instance_id=host.instance_id
        )
    return ReleaseResult(in_group=True, group=host.group, released=True, instance_id=host.instance_id)
