"""No GPU Deployment without a revision label: what runs on a GPU node is always attributable to a build.

``parkbrake.dev/revision`` on the pod template is what ``verify`` and the ledger's attribution read, the
Kubernetes counterpart of the ``parkbrake:revision`` tag; without it a GPU pod cannot be traced to the image
that was deployed.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.kubernetes_fields import DEPLOYMENT, REVISION_LABEL, requests_gpus, spec
from policies.resources import mapping
from policies.rule import PolicyContext, PolicyRule, ResourceView, per_resource


def revision_problems(deployment: ResourceView, context: PolicyContext) -> Iterator[str]:
    if not requests_gpus(deployment):
        return
    template_labels = mapping(
        mapping(mapping(spec(deployment).get("template")).get("metadata")).get("labels")
    )
    revision = template_labels.get(REVISION_LABEL)
    if not isinstance(revision, str) or not revision.strip():
        yield f"requests GPUs but its pod template has no {REVISION_LABEL} label; label the pods with the revision"


RULE = PolicyRule(
    name="gpu-deployments-have-a-revision",
    description=(
        "Every Deployment whose pods request nvidia.com/gpu labels its pod template with "
        "parkbrake.dev/revision."
    ),
    enforcement="mandatory",
    check=per_resource((DEPLOYMENT,), revision_problems),
)
