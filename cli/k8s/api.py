"""A small Kubernetes API client over HTTPS (the standard library's): list, watch, get, merge-patch and
delete, authenticated with a bearer token. In a pod it is the service account's
(:meth:`KubernetesApi.in_cluster`); elsewhere ``--server``, ``--token-file`` and ``--ca-file``.

``park --now`` uses it (a few verbs on ClusterQueues and NodeClaims); the budget controller uses
lightkube (cli/k8s/kube.py).
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from guardrails.errors import InputError, ParkbrakeError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MERGE_PATCH = "application/merge-patch+json"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/workloads"
CLUSTER_QUEUES = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
NODE_CLAIMS = "/apis/karpenter.sh/v1/nodeclaims"


class ApiError(ParkbrakeError):
    """The API server answered with an error status (``status``: 404, 409, 410, …)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API: {status} {message}")
        self.status = status


def workload_path(namespace: str, name: str, *, status: bool = False) -> str:
    path = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads/{name}"
    return f"{path}/status" if status else path


class KubernetesApi:
    def __init__(self, server: str, *, token: str | None, ca_file: str | None, timeout: float = 30) -> None:
        parts = urlsplit(server)
        if parts.scheme not in {"https", "http"} or not parts.hostname:
            raise InputError(f"--server: {server!r} is not an https:// URL of a Kubernetes API server")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.token = token
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=ca_file) if parts.scheme == "https" else None
        self._local = threading.local()  # one kept-alive connection per thread

    @classmethod
    def in_cluster(cls, environ: Mapping[str, str], root: Path = SERVICE_ACCOUNT) -> KubernetesApi:
        """The API server of the pod's cluster, as its service account's token and CA reach it."""
        host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (root / "token").is_file():
            raise InputError(
                "--server: not given and not in a pod (no KUBERNETES_SERVICE_HOST or service-account token); "
                "give --server, --token-file and --ca-file"
            )
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        return cls(server, token=(root / "token").read_text().strip(), ca_file=str(root / "ca.crt"))

    def _connection(self, timeout: float | None = None) -> http.client.HTTPConnection:
        if self.context is not None:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout or self.timeout, context=self.context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> Any:
        payload = None if body is None else json.dumps(body).encode()
        for attempt in range(2):  # a kept-alive connection the server closed is made again once
            connection = getattr(self._local, "connection", None) or self._connection()
            self._local.connection = connection
            try:
                connection.request(method, path, payload, self._headers(content_type if payload else None))
                response = connection.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException, OSError):
                connection.close()
                self._local.connection = None
                if attempt:
                    raise
                continue
            if response.status >= 400:
                raise ApiError(response.status, _message(data))
            return json.loads(data) if data else None
        raise AssertionError("unreachable")

    def list(self, path: str) -> tuple[list[dict[str, Any]], str]:
        """Every object at ``path``, and the list's resourceVersion to watch from."""
        document = self.request("GET", path)
        return list(document.get("items") or []), str(document["metadata"]["resourceVersion"])

    def watch(
        self, path: str, resource_version: str, *, timeout_seconds: int = 300
    ) -> Iterator[dict[str, Any]]:
        """Events (``type``, ``object``) after ``resource_version`` until the server ends the watch; a
        410 (the version is too old) raises ApiError for the caller to list again."""
        query = urlencode(
            {
                "watch": "1",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(timeout_seconds),
            }
        )
        connection = self._connection(timeout=timeout_seconds + 30)
        try:
            connection.request("GET", f"{path}?{query}", headers=self._headers())
            response = connection.getresponse()
            if response.status >= 400:
                raise ApiError(response.status, _message(response.read()))
            while line := response.readline():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiError(int(status.get("code", 500)), str(status.get("message", "watch error")))
                yield event
        finally:
            connection.close()

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Any:
        return self.request("PATCH", path, dict(patch), content_type=MERGE_PATCH)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message", data[:200].decode(errors="replace")))
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")
