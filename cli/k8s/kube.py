"""The controller's Kubernetes client: lightkube (typed resources, list/watch, server-side apply), with
the resources it reads and writes and the two writes it makes.

The writes are server-side applies of a status subresource under the controller's own field manager
(``parkbrake-budget``): the API server merges the entry it sends into ``status.admissionChecks`` (a
list-map keyed by name: apis/kueue/v1beta2/workload_types.go) and keeps every other entry and field
(Kueue's ``retryCount``, ``podSetUpdates``, other checks). The applied object carries the
resourceVersion it was decided from, so a Workload changed since answers 409 and is decided again.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightkube import Client, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta

from guardrails.errors import InputError

FIELD_MANAGER = "parkbrake-budget"
CONTROLLER_NAME = "parkbrake.dev/budget"  # the AdmissionChecks' spec.controllerName this controller serves
KUEUE = "kueue.x-k8s.io"

Workload = create_namespaced_resource(KUEUE, "v1beta2", "Workload", "workloads")
AdmissionCheck = create_global_resource(KUEUE, "v1beta2", "AdmissionCheck", "admissionchecks")
NodeClaim = create_global_resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims")


def client_from_options(server: str | None, token_file: Path | None, ca_file: Path | None) -> Client:
    """``--server`` (with its token and CA files), else the pod's own service account."""
    from lightkube.core.exceptions import ConfigError

    if server is None:
        try:
            return Client(KubeConfig.from_service_account(), field_manager=FIELD_MANAGER)
        except (ConfigError, KeyError):
            raise InputError(
                "--server: not given and not in a pod (no KUBERNETES_SERVICE_HOST or service-account token); "
                "give --server, --token-file and --ca-file"
            ) from None
    if not server.startswith(("https://", "http://")):
        raise InputError(f"--server: {server!r} is not an https:// URL of a Kubernetes API server")
    token = token_file.read_text().strip() if token_file else None
    cluster = Cluster(server=server, certificate_auth=str(ca_file) if ca_file else None)
    config = KubeConfig.from_one(cluster=cluster, user=User(token=token) if token else None)
    return Client(config, field_manager=FIELD_MANAGER, trust_env=False)


def apply_check_entry(
    client: Client, workload: Mapping[str, Any], entry: Mapping[str, Any]
) -> dict[str, Any]:
    """Apply the check's own entry onto ``workload``'s status, conditional on its resourceVersion. The
    body is the applied object as JSON (what ``Client.apply`` of a ``Workload.Status`` sends), given to
    ``Client.patch`` as a dict: no model built and serialised again for each of a burst's writes."""
    from lightkube.types import PatchType

    meta = workload["metadata"]
    body = {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "resourceVersion": meta["resourceVersion"],
        },
        "status": {"admissionChecks": [dict(entry)]},
    }
    return dict(
        client.patch(
            Workload.Status,
            meta["name"],
            body,
            namespace=meta["namespace"],
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
    )


def apply_check_active(client: Client, name: str, condition: Mapping[str, Any]) -> None:
    """Apply the AdmissionCheck's ``Active`` condition (the only status field this controller owns)."""
    body = AdmissionCheck.Status(
        apiVersion=f"{KUEUE}/v1beta2",
        kind="AdmissionCheck",
        metadata=ObjectMeta(name=name),
        status={"conditions": [dict(condition)]},
    )
    client.apply(body, name, field_manager=FIELD_MANAGER, force=True)


def workload_event(client: Client, workload: Mapping[str, Any], reason: str, message: str, at: str) -> None:
    """A Warning Event on the Workload (``kubectl describe workload`` shows it)."""
    from lightkube.models.core_v1 import EventSource, ObjectReference
    from lightkube.resources.core_v1 import Event

    meta = workload["metadata"]
    event = Event(
        metadata=ObjectMeta(generateName=f"{meta['name']}.", namespace=meta["namespace"]),
        involvedObject=ObjectReference(
            apiVersion=f"{KUEUE}/v1beta2",
            kind="Workload",
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta.get("uid"),
        ),
        reason=reason,
        message=message[:1024],
        type="Warning",
        source=EventSource(component=FIELD_MANAGER),
        firstTimestamp=at,  # type: ignore[arg-type]
        lastTimestamp=at,  # type: ignore[arg-type]
        count=1,
    )
    client.create(event, namespace=meta["namespace"])
