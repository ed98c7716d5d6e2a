"""One ``park --now`` / ``unpark --now`` run's bookkeeping: the actions it reports (one row per
resource, whatever it is: an AWS resource or, on a Kubernetes stack, a cluster object), the result they
make up, and the run that attempts each change so one resource's API error never stops the others.
The steps themselves are in ``emergency.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from botocore.exceptions import ClientError

from cli.oncall.park.records import ParkedBy
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import describe_error

# drift: changed by hand since parking, so not restored without --force
Status = Literal["done", "planned", "unchanged", "skipped", "failed", "drift"]


@dataclass(frozen=True)
class Action:
    kind: str  # ssm-parameter, schedule, autoscaling-group, ecs-service; clusterqueue, nodeclaim
    name: str
    change: str
    status: Status
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "change": self.change,
            "status": self.status,
            "error": self.error,
        }


@dataclass
class EmergencyResult:
    stack: str
    region: str
    parking: bool  # True for park --now, False for unpark --now
    dry_run: bool
    actions: list[Action] = field(default_factory=list)
    reconcile: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Action]:
        """Actions that failed or were held back (drift): each needs a person."""
        return [action for action in self.actions if action.status in ("failed", "drift")]

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "region": self.region,
            "command": "park --now" if self.parking else "unpark --now",
            "dry_run": self.dry_run,
            "actions": [action.as_dict() for action in self.actions],
            "failed": len(self.failed),
            "reconcile": self.reconcile,
        }


# A Kubernetes stack's brake on its cluster (cli/oncall/park/cluster.py): (parking, dry_run) → actions.
ClusterBrake = Callable[[bool, bool], list[Action]]


class PartlyDone(Exception):
    """The change was made, but something that goes with it (its record) was not: report it as failed."""


@dataclass
class Run:
    """One park/unpark: the clients of one region, and the actions so far."""

    stack: str
    region: str
    clients: ClientFactory
    result: EmergencyResult
    parked_by: ParkedBy | None = None
    force: bool = False  # unpark: restore the record even over capacities changed since parking

    def record_fields(self) -> dict[str, str]:
        return self.parked_by.fields() if self.parked_by else {}

    def client(self, service: str) -> Any:
        return self.clients(service, self.region)

    def add(self, kind: str, name: str, change: str, status: Status, error: str | None = None) -> None:
        self.result.actions.append(Action(kind, name, change, status, error))

    def attempt(self, kind: str, name: str, change: str, operation: Callable[[], object]) -> None:
        """Run ``operation`` (not in a dry run); an API error is recorded against this resource only."""
        if self.result.dry_run:
            self.add(kind, name, change, "planned")
            return
        try:
            operation()
        except ClientError as error:
            self.add(kind, name, change, "failed", describe_error(error))
        except PartlyDone as problem:
            self.add(kind, name, change, "failed", str(problem))
        else:
            self.add(kind, name, change, "done")


def write_record(write: Callable[[], object]) -> str | None:
    """Write a record; an error is returned, not raised: in an emergency the scale-down goes ahead anyway."""
    try:
        write()
    except ClientError as error:
        return describe_error(error)
    return None


def drift_message(drift: list[str]) -> str:
    return (
        f"changed since parking ({', '.join(drift)}); not restored: check who changed it, then "
        "unpark --now --force restores the record over it"
    )
