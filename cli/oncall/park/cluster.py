"""``park --now`` on a Kubernetes stack: the cluster's brake (cli/k8s/park.py, the function
``parkbrake k8s park --now`` runs) as actions in the same table as the AWS ones.

A stack is a Kubernetes stack when its file has a ``parkbrake:kubernetes`` section; only then is the
whole stack model loaded (an AWS stack's emergency never waits on a typo elsewhere in its file).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cli.oncall.park.actions import Action, ClusterBrake
from cli.oncall.stack_file import read_config_value
from guardrails.errors import InputError

if TYPE_CHECKING:
    from cli.k8s.api import KubernetesApi
    from stacks.config import StackConfig

KUBERNETES_KEY = "parkbrake:kubernetes"


def is_kubernetes_stack(stack: str, project_dir: Path) -> bool:
    from stacks.config import stack_file

    path = stack_file(stack, project_dir)
    try:
        return path.is_file() and read_config_value(path, KUBERNETES_KEY) is not None
    except InputError:
        return False  # an unreadable file: the AWS path says what it finds


def cluster_brake(api: KubernetesApi, config: StackConfig) -> ClusterBrake:
    """The brake on ``config``'s cluster through ``api``, its objects as :class:`Action` rows."""
    from cli.k8s.park import park_now

    def brake(parking: bool, dry_run: bool) -> list[Action]:
        result = park_now(api, config, parking=parking, dry_run=dry_run)
        return [Action(item.kind, item.name, item.change, item.status, item.error) for item in result.objects]

    return brake
