"""The one extra GPU host a blue-green deploy adds to its pool while the new colour starts.

The pool has no spare host, so the deploy raises the Auto Scaling group's desired capacity by one,
and takes a host out again when one colour is gone. Both ends are made safe across interruptions by
a mark on the group, ``parkbrake:deploy-surge`` = the capacity the surge raised it to:

* the mark is written before the capacity is raised, so a crash in between leaves a mark and no
  host, never an unrecorded host; the next run sees the capacity below the mark and raises it;
* removal terminates an *idle* host by id, with the capacity decremented. Lowering the capacity
  instead would let the group choose, maybe the host that serves: the pool has no scale-in
  protection, since parking must reach zero hosts;
* when the capacity is already below the mark (the host went, the mark did not), only the mark goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from guardrails import tags
from guardrails.clock import Clock
from guardrails.errors import ParkbrakeError

SURGE_TAG = tags.DEPLOY_SURGE
# How often a deploy reads AWS again while it waits (for health, a bake, a drain, an idle host).
POLL_SECONDS = 15.0


@dataclass(frozen=True)
class SurgeMark:
    desired: int
    minimum: int
    maximum: int
    surged_to: int | None  # None: no deploy host in the pool

    @property
    def room(self) -> bool:
        """Whether a host can be added (or already was)."""
        return self.surged_to is not None or self.desired < self.maximum


class SurgeHost:
    def __init__(self, autoscaling: Any, group: str, clock: Clock, say: Callable[[str], None]) -> None:
        self.autoscaling = autoscaling
        self.group = group
        self.clock = clock
        self.say = say

    def mark(self) -> SurgeMark:
        found = self._describe()
        mark = tags.as_dict(found.get("Tags")).get(SURGE_TAG)
        return SurgeMark(
            desired=found["DesiredCapacity"],
            minimum=found["MinSize"],
            maximum=found["MaxSize"],
            surged_to=int(mark) if mark and mark.isdigit() else None,
        )

    def add(self, mark: SurgeMark) -> None:
        """Raise the group to one host more, or finish raising it to what an earlier run marked."""
        if mark.surged_to is not None and mark.desired >= mark.surged_to:
            return
        if mark.surged_to is None:
            surged_to = mark.desired + 1
            self.autoscaling.create_or_update_tags(Tags=[self._tag(str(surged_to))])
        else:  # an earlier run marked the group and was stopped before it raised the capacity
            surged_to = mark.surged_to
        self.autoscaling.set_desired_capacity(
            AutoScalingGroupName=self.group, DesiredCapacity=surged_to, HonorCooldown=False
        )
        self.say(f"Added a host to {self.group} for the new colour (desired {mark.desired} → {surged_to})")

    def remove(self, busy_hosts: Callable[[], set[str]], timeout: timedelta) -> str | None:
        """Take the extra host out; a warning when no host became idle within ``timeout``."""
        mark = self.mark()
        if mark.surged_to is None:
            return None
        if mark.desired >= mark.surged_to:
            host = self._idle_host(busy_hosts, timeout)
            if host is None:
                return (
                    f"no host of {self.group} became idle in time; the deploy's extra host is still there "
                    "(run the deploy again to remove it)"
                )
            self.autoscaling.terminate_instance_in_auto_scaling_group(
                InstanceId=host, ShouldDecrementDesiredCapacity=True
            )
            self.say(f"Removed the deploy's extra host {host} from {self.group}")
        self.autoscaling.delete_tags(Tags=[self._tag("")])
        return None

    def _idle_host(self, busy_hosts: Callable[[], set[str]], timeout: timedelta) -> str | None:
        """An in-service host running no task of the service, waiting up to ``timeout`` for one."""
        deadline = self.clock.now() + timeout
        while True:
            busy = busy_hosts()
            instances = self._describe()["Instances"]
            idle = [
                i["InstanceId"]
                for i in instances
                if i["LifecycleState"] == "InService" and i["InstanceId"] not in busy
            ]
            if idle:
                return str(idle[0])
            if self.clock.now() >= deadline:
                return None
            self.clock.sleep(POLL_SECONDS)

    def _describe(self) -> dict[str, Any]:
        groups = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[self.group])
        if not groups["AutoScalingGroups"]:
            raise ParkbrakeError(f"no Auto Scaling group {self.group}")
        found: dict[str, Any] = groups["AutoScalingGroups"][0]
        return found

    def _tag(self, value: str) -> dict[str, Any]:
        return {
            "ResourceId": self.group,
            "ResourceType": "auto-scaling-group",
            "Key": SURGE_TAG,
            "Value": value,
            "PropagateAtLaunch": False,
        }
