"""``NightlyWindow``: the nightly schedule on a Kubernetes stack, as a CronJob that keeps the nightly
pool's NodePool open only in its window (``parkbrake k8s window``, guardrails/nightly_window.py).

Every ``every`` minutes (``concurrencyPolicy: Forbid``: one run at a time) the job sets the NodePool's
GPU limit to what the window is now, as the ``parkbrake-park`` account (components/k8s/park_role.py:
NodePools list/patch, NodeClaims list/delete — nothing more is asked). Parked, the CronJob is suspended
(``spec.suspend``, kubernetes ``pkg/apis/batch/types.go`` ``CronJobSpec``) and the rendered limit is "0".
``timeZone`` is left out: the job reads the schedule and its zone from the stack itself, and the CronJob
only has to run it often.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pulumi
import pulumi_kubernetes as k8s

from components.common import child_of
from components.k8s.common import NAME_LABEL, REVISION_LABEL, labels, type_token
from components.k8s.park_role import PARK

WINDOW = "parkbrake-window"


@dataclass
class NightlyWindowArgs:
    stack: str
    namespace: str
    image: str
    revision: str
    pool: str
    parked: bool = False
    every: timedelta = timedelta(minutes=5)

    def __post_init__(self) -> None:
        if not timedelta(minutes=1) <= self.every <= timedelta(minutes=30):
            raise ValueError(f"every must be 1 to 30 minutes; got {self.every}")


def schedule_of(every: timedelta) -> str:
    """A cron expression firing every ``every`` (whole minutes, 1 to 30)."""
    minutes = max(1, int(every.total_seconds()) // 60)
    return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"


class NightlyWindow(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: NightlyWindowArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(type_token("NightlyWindow"), name, None, opts)
        selector = {NAME_LABEL: WINDOW}
        pod_labels = labels(args.stack, {**selector, REVISION_LABEL: args.revision})
        container = {
            "name": "window",
            "image": args.image,
            "command": ["parkbrake", "k8s", "window", "--stack", args.stack],
            "env": [{"name": "PARKBRAKE_REVISION", "value": args.revision}],
            "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
            },
        }
        k8s.batch.v1.CronJob(
            f"{name}-cron-job",
            metadata={"name": WINDOW, "namespace": args.namespace, "labels": labels(args.stack, selector)},
            spec={
                "schedule": schedule_of(args.every),
                "suspend": args.parked,
                "concurrencyPolicy": "Forbid",
                "startingDeadlineSeconds": int(args.every.total_seconds()),
                "successfulJobsHistoryLimit": 1,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "backoffLimit": 0,  # the next run tries again
                        "activeDeadlineSeconds": int(args.every.total_seconds()),
                        "template": {
                            "metadata": {"labels": pod_labels},
                            "spec": {
                                "serviceAccountName": PARK,
                                "restartPolicy": "Never",
                                "containers": [container],
                            },
                        },
                    },
                },
            },
            opts=child_of(self),
        )
        self.register_outputs({"pool": args.pool, "suspended": args.parked})
