"""The one way parkbrake stops a GPU host, used by the reaper, the deadlines and the ledger's hard limits.

- a stand-alone on-demand host is stopped (``StopInstances``, every such host in one call);
- a stand-alone spot host is terminated, or stopped when the policy says so (a one-time spot
  request cannot be stopped);
- a host in an Auto Scaling group is removed with ``TerminateInstanceInAutoScalingGroup`` and the
  group's desired capacity decremented: stopping it alone would make the group replace it. That call
  takes one host, so the removals run side by side on a bounded pool of threads
  (:data:`GROUP_REMOVAL_WORKERS`; boto3 clients are thread-safe, and the adaptive retries' rate
  limiter is shared by the client's threads, so throttling slows them all down together).

One host's error (throttling that outlasted botocore's retries, a missing permission, an instance
that vanished) is recorded against that host and never stops the others: a failed call is split in
halves, and small parts retried host by host, so that the error lands on the host it belongs to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from guardrails.hosts import Host
from lambdas.aws.errors import AWS_ERRORS, describe_error
from lambdas.clients import CONCURRENT_CALLS

log = logging.getLogger(__name__)

SpotAction = Literal["terminate", "stop"]
# How many ids one call takes. EC2 documents no limit on StopInstances' ``InstanceIds`` (the API
# reference's StopInstances page, and botocore's model: ``InstanceIdStringList`` has no ``max``), so one
# call stops the whole set, as Cloud Custodian's ``stop`` action sends it (c7n/resources/ec2.py,
# ``Stop._run_instances_op``). TerminateInstances documents "Up to 1000 instance IDs. We recommend
# breaking up this request into smaller batches" (botocore's model, TerminateInstancesRequest.InstanceIds).
STOP_BATCH_SIZE: int | None = None
TERMINATE_BATCH_SIZE = 1000
# A failed call is split in halves until this many hosts are left, then retried host by host, so that
# one vanished host among 10,000 costs a few dozen calls, not 10,000, and the error lands on its host.
HOST_BY_HOST_BELOW = 16
# Removals from groups in flight at once: at 16, 10,000 hosts leave their groups in a fraction of the
# reaper's timeout (docs/guardrails.md, "Removing 10,000 hosts from their groups"); more would only
# meet Auto Scaling's throttling sooner. The clients' connection pools hold as many connections.
GROUP_REMOVAL_WORKERS = CONCURRENT_CALLS


@dataclass
class StopOutcome:
    stopped: list[str] = field(default_factory=list)  # StopInstances
    terminated: list[str] = field(default_factory=list)  # TerminateInstances (spot)
    removed_from_group: list[str] = field(default_factory=list)  # TerminateInstanceInAutoScalingGroup
    errors: list[dict[str, str]] = field(default_factory=list)  # {"instance_id", "error"}
    dry_run: bool = False

    @property
    def acted(self) -> list[str]:
        """Every host that was (or, in a dry run, would have been) taken off the bill."""
        return [*self.stopped, *self.terminated, *self.removed_from_group]

    def action_of(self, instance_id: str) -> str | None:
        for action, ids in (
            ("stop", self.stopped),
            ("terminate", self.terminated),
            ("remove-from-group", self.removed_from_group),
        ):
            if instance_id in ids:
                return action
        return None


def stop_hosts(
    hosts: Sequence[Host],
    *,
    reason: str,
    ec2: Any,
    autoscaling: Any,
    dry_run: bool = False,
    spot_action: SpotAction = "terminate",
) -> StopOutcome:
    """Take ``hosts`` off the bill; ``reason`` is logged with every action."""
    if spot_action not in ("terminate", "stop"):
        raise ValueError(f"spot_action must be 'terminate' or 'stop', not {spot_action!r}")
    outcome = StopOutcome(dry_run=dry_run)
    in_group = [host for host in hosts if host.autoscaling_group]
    alone = [host for host in hosts if not host.autoscaling_group]
    to_terminate = [host.instance_id for host in alone if host.spot and spot_action == "terminate"]
    to_stop = [host.instance_id for host in alone if not (host.spot and spot_action == "terminate")]
    if dry_run:
        outcome.stopped, outcome.terminated = to_stop, to_terminate
        outcome.removed_from_group = [host.instance_id for host in in_group]
        return outcome

    def stop(ids: list[str]) -> None:
        ec2.stop_instances(InstanceIds=ids)

    def terminate(ids: list[str]) -> None:
        ec2.terminate_instances(InstanceIds=ids)

    _in_batches(
        to_stop, stop, outcome.stopped, outcome, action="stop", reason=reason, batch_size=STOP_BATCH_SIZE
    )
    _in_batches(
        to_terminate,
        terminate,
        outcome.terminated,
        outcome,
        action="terminate",
        reason=reason,
        batch_size=TERMINATE_BATCH_SIZE,
    )
    remove_from_groups(in_group, autoscaling, outcome, reason=reason)
    return outcome


def remove_from_groups(
    hosts: list[Host],
    autoscaling: Any,
    outcome: StopOutcome,
    *,
    reason: str,
    workers: int = GROUP_REMOVAL_WORKERS,
) -> None:
    """Remove each host from its group, ``workers`` at a time, into ``outcome`` in ``hosts``' order.

    Each removal is logged as it happens, so a run cut short by its timeout still leaves a line for
    every host it removed."""

    def remove(host: Host) -> str | None:
        try:
            autoscaling.terminate_instance_in_auto_scaling_group(
                InstanceId=host.instance_id, ShouldDecrementDesiredCapacity=True
            )
        except AWS_ERRORS as error:
            return _logged_error(host.instance_id, error, action="remove-from-group")
        log.info(
            "removed %s from group %s (desired capacity decremented): %s",
            host.instance_id,
            host.autoscaling_group,
            reason,
        )
        return None

    if not hosts:
        return
    with ThreadPoolExecutor(
        max_workers=min(workers, len(hosts)), thread_name_prefix="remove-from-group"
    ) as pool:
        errors = list(pool.map(remove, hosts))
    for host, error in zip(hosts, errors, strict=True):
        if error is None:
            outcome.removed_from_group.append(host.instance_id)
        else:
            outcome.errors.append(
                {"instance_id": host.instance_id, "action": "remove-from-group", "error": error}
            )


def _in_batches(
    ids: list[str],
    call: Callable[[list[str]], None],
    done: list[str],
    outcome: StopOutcome,
    *,
    action: str,
    reason: str,
    batch_size: int | None,
) -> None:
    """``call`` on ``ids`` in batches of ``batch_size`` (None: all at once); a batch that fails is split."""
    size = max(batch_size or len(ids), 1)
    for start in range(0, len(ids), size):
        _call_or_split(ids[start : start + size], call, done, outcome, action=action, reason=reason)


def _call_or_split(
    batch: list[str],
    call: Callable[[list[str]], None],
    done: list[str],
    outcome: StopOutcome,
    *,
    action: str,
    reason: str,
) -> None:
    try:
        call(batch)
    except AWS_ERRORS as error:
        if len(batch) == 1:
            _record_error(outcome, batch[0], error, action=action)
            return
        # One bad id (or one denied resource) fails the whole call; find out which host it was.
        if len(batch) <= HOST_BY_HOST_BELOW:
            log.warning("%s of %d hosts failed (%s); retrying host by host", action, len(batch), error)
            parts = [[instance_id] for instance_id in batch]
        else:
            log.warning("%s of %d hosts failed (%s); retrying in halves", action, len(batch), error)
            parts = [batch[: len(batch) // 2], batch[len(batch) // 2 :]]
        for part in parts:
            _call_or_split(part, call, done, outcome, action=action, reason=reason)
    else:
        log.info("%s %s: %s", action, ", ".join(batch), reason)
        done.extend(batch)


def _logged_error(instance_id: str, error: Exception, *, action: str) -> str:
    message = describe_error(error)
    log.error("could not %s %s: %s", action, instance_id, message)
    return message


def _record_error(outcome: StopOutcome, instance_id: str, error: Exception, *, action: str) -> None:
    message = _logged_error(instance_id, error, action=action)
    outcome.errors.append({"instance_id": instance_id, "action": action, "error": message})
