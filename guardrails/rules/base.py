"""What a sweep rule is: a name, a filter that says why a host matches, and an action.

Shaped after Cloud Custodian's policies (resource, filters, actions) so that each rule reads on its
own and the set in force is one explicit tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from guardrails.deadlines import Deadline
from guardrails.hosts import Host
from guardrails.settings_table import DEFAULTS
from guardrails.storage import Storage

# "terminate": snapshot every volume, then terminate (hosts stopped too long, when configured).
Action = Literal["stop", "terminate", "report"]
# The stop path (lambdas/aws/stop_path.py): which call a stop makes depends on the host (stand-alone:
# stop; spot: terminate; in an Auto Scaling group: leave it), so a rule that stops needs them all.
STOP_PATH_PERMISSIONS = (
    "ec2:StopInstances",
    "ec2:TerminateInstances",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
)
RUNNING = frozenset({"running"})
STOPPED = frozenset({"stopped"})


@dataclass(frozen=True)
class SweepPolicy:
    """What the sweep enforces; built from :class:`guardrails.settings.Settings`."""

    stack: str | None
    default_cap: timedelta
    max_exemption: timedelta
    reap_untagged: bool = DEFAULTS.reap_untagged
    pool_caps: Mapping[str, timedelta] = field(default_factory=dict)
    max_runtime_ceiling: timedelta = DEFAULTS.max_runtime_ceiling
    stopped_retention: timedelta = DEFAULTS.stopped_retention  # a host stopped longer is reported
    terminate_stopped: bool = DEFAULTS.terminate_stopped  # and, when on, snapshotted and terminated


@dataclass(frozen=True)
class Subject:
    """One host as the rules see it; ``deadline`` is None for hosts parkbrake does not manage."""

    host: Host
    deadline: Deadline | None
    now: datetime
    policy: SweepPolicy
    orphan: str | None = None  # why a managed host belongs to no existing stack
    storage: Storage | None = None  # a stopped host's volumes and their monthly cost, when listed


@dataclass(frozen=True)
class Finding:
    rule: str
    action: Action
    reason: str


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    # Why the rule applies to the subject, or None when it does not.
    filter: Callable[[Subject], str | None]
    action: Callable[[SweepPolicy], Action]
    states: frozenset[str] = RUNNING  # the EC2 states of the hosts it judges
    # Beside the rule, as Cloud Custodian's actions carry theirs: the settings table's rows it reads
    # (guardrails.settings_table, by name) and the IAM actions its actions need at most (its switches
    # on). tests/components/test_rule_permissions.py checks the reaper's policy against them.
    settings: tuple[str, ...] = ()
    permissions: tuple[str, ...] = ()

    def evaluate(self, subject: Subject) -> Finding | None:
        reason = self.filter(subject)
        return None if reason is None else Finding(self.name, self.action(subject.policy), reason)


def always(action: Action) -> Callable[[SweepPolicy], Action]:
    def fixed(_policy: SweepPolicy) -> Action:
        return action

    return fixed


def instant(moment: datetime) -> str:
    """UTC instants in reasons and tables: ``2025-01-31T22:00:00Z``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
