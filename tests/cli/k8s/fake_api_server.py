"""A FAKE Kubernetes API server, in process, for the budget controller's tests and benchmark.

Not Kubernetes: a small HTTPS server (its own throwaway CA, a bearer token) that implements just what
the controller and ``park`` call — list and watch (from a resourceVersion, 410 once compacted) of
Workloads, ClusterQueues and NodeClaims; GET; JSON merge patch of a Workload's status and a
ClusterQueue's spec, conditional on ``metadata.resourceVersion`` (409 when stale); DELETE of a
NodeClaim. Tests change objects as Kueue would (:meth:`FakeApiServer.put`) and read what the
controller wrote. No admission webhooks, no Kueue: what Kueue does with a check state is not
exercised here (scripts/kind_check.sh does, on a real cluster).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.cli.k8s.rbac import Authorizer

TOKEN = "fake-service-account-token"
# path → (resource, namespace group or None, name group or None, subresource)
ROUTES = [
    (re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta2/workloads$"), "workloads"),
    (re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta2/namespaces/(?P<ns>[^/]+)/workloads/(?P<name>[^/]+)(?P<sub>/status)?$"), "workloads"),
    (re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta2/clusterqueues(/(?P<name>[^/]+))?$"), "clusterqueues"),
    (re.compile(r"^/apis/karpenter\.sh/v1/nodeclaims(/(?P<name>[^/]+))?$"), "nodeclaims"),
    (re.compile(r"^/apis/karpenter\.sh/v1/nodepools(/(?P<name>[^/]+))?$"), "nodepools"),
    (re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments(/(?P<name>[^/]+))?$"), "deployments"),
]  # fmt: skip


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key) files."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake kubernetes CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


class FakeApiServer:
    def __init__(self, directory: Path) -> None:
        self.ca_file, cert, key = _certificates(directory)
        self.token_file = directory / "token"
        self.token_file.write_text(TOKEN)
        self.lock = threading.Condition()
        self.version = 0
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []  # (version, type, resource, object)
        self.compacted = 0  # watches from before this version answer 410
        self.generation = 0  # bumped by drop_watches: open watches end
        self.patches: list[tuple[float, str, dict[str, Any]]] = []  # (monotonic time, path, body)
        self.deleted: list[str] = []
        self.requests = 0
        self.rbac: Authorizer | None = None  # set: every request is authorised by it (tests/cli/k8s/rbac.py)
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.drop_watches()
        self.server.shutdown()
        self.server.server_close()

    # --- what Kueue, Karpenter or a person would do ------------------------------------------------

    def put(self, resource: str, document: dict[str, Any], *, kind: str | None = None) -> dict[str, Any]:
        """Create or replace an object; returns it as stored (with uid and resourceVersion)."""
        with self.lock:
            stored = copy.deepcopy(document)
            meta = stored.setdefault("metadata", {})
            key = (resource, str(meta.get("namespace", "")), str(meta["name"]))
            meta.setdefault(
                "uid", self.objects.get(key, {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
            )
            self._store(resource, key, stored, kind or ("MODIFIED" if key in self.objects else "ADDED"))
            return copy.deepcopy(stored)

    def remove(self, resource: str, namespace: str, name: str) -> None:
        with self.lock:
            stored = self.objects.pop((resource, namespace, name))
            self._record("DELETED", resource, stored)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.objects[(resource, namespace, name)])

    def drop_watches(self) -> None:
        """End every open watch, as a restarted API server or a broken connection would."""
        with self.lock:
            self.generation += 1
            self.lock.notify_all()

    def compact(self) -> None:
        """Forget the history: a watch from an older resourceVersion answers 410 Gone."""
        with self.lock:
            self.compacted = self.version
            self.history.clear()
            self.generation += 1
            self.lock.notify_all()

    def _store(self, resource: str, key: tuple[str, str, str], stored: dict[str, Any], kind: str) -> None:
        self.version += 1
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = stored
        self._record(kind, resource, stored)

    def _record(self, kind: str, resource: str, stored: dict[str, Any]) -> None:
        self.history.append((self.version, kind, resource, copy.deepcopy(stored)))
        self.lock.notify_all()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"kind": "Status", "status": "Failure", "code": status, "message": message})

    def _route(self) -> tuple[str, dict[str, Any], dict[str, str]] | None:
        path, _, query = self.path.partition("?")
        params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        for pattern, resource in ROUTES:
            match = pattern.match(path)
            if match:
                return resource, {k: v for k, v in match.groupdict().items() if v}, params
        self._error(404, f"the fake serves no {path}")
        return None

    def _authorised(self) -> bool:
        self.fake.requests += 1
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._error(401, "Unauthorized")
            return False
        if self.fake.rbac is not None and not self.fake.rbac.authorize(self.command, self.path):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))  # the connection stays usable
            self._error(403, f"forbidden: {self.command} {self.path} is not granted by the role")
            return False
        return True

    def do_GET(self) -> None:
        if not self._authorised() or (route := self._route()) is None:
            return
        resource, match, params = route
        fake = self.fake
        if "name" in match:
            key = (resource, match.get("ns", ""), match["name"])
            with fake.lock:
                found = fake.objects.get(key)
            return self._send(200, found) if found else self._error(404, f"{key[2]} not found")
        if params.get("watch") in {"1", "true"}:
            return self._watch(resource, int(params.get("resourceVersion") or 0))
        with fake.lock:
            items = [
                obj
                for (kind, namespace, _), obj in sorted(fake.objects.items())
                if kind == resource and match.get("ns", namespace) == namespace
            ]
            body = {"kind": "List", "metadata": {"resourceVersion": str(fake.version)}, "items": items}
        self._send(200, body)

    def _watch(self, resource: str, since: int) -> None:
        fake = self.fake
        with fake.lock:
            if since < fake.compacted:
                return self._error(410, f"too old resource version: {since} ({fake.compacted})")
            generation = fake.generation
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")  # the stream ends when the connection does
        self.end_headers()
        seen = since
        while True:
            with fake.lock:
                pending = [entry for entry in fake.history if entry[0] > seen and entry[2] == resource]
                if not pending:
                    if fake.generation != generation:
                        return
                    fake.lock.wait(0.5)
                    continue
            for version, kind, _, obj in pending:
                self.wfile.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                seen = version
            self.wfile.flush()

    def do_PATCH(self) -> None:
        if not self._authorised() or (route := self._route()) is None:
            return
        resource, match, _ = route
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            return self._error(415, "the fake takes JSON merge patches only")
        fake = self.fake
        key = (resource, match.get("ns", ""), match.get("name", ""))
        with fake.lock:
            current = fake.objects.get(key)
            if current is None:
                return self._error(404, f"{key[2]} not found")
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                return self._error(
                    409, "the object has been modified; please apply your changes to the latest version"
                )
            # the status subresource changes status only; the object itself everything but status
            part = (
                {"status": body.get("status")}
                if match.get("sub")
                else {k: v for k, v in body.items() if k != "status"}
            )
            meta_patch = part.pop("metadata", None) or {}
            updated = merge(current, part)
            # of metadata, a patch changes labels and annotations only (never uid or resourceVersion)
            updated["metadata"] = merge(
                current["metadata"], {k: v for k, v in meta_patch.items() if k in {"labels", "annotations"}}
            )
            fake.patches.append((time.monotonic(), self.path, body))
            fake._store(resource, key, updated, "MODIFIED")
            answer = copy.deepcopy(updated)
        self._send(200, answer)

    def do_DELETE(self) -> None:
        if not self._authorised() or (route := self._route()) is None:
            return
        resource, match, _ = route
        key = (resource, match.get("ns", ""), match.get("name", ""))
        with self.fake.lock:
            if key not in self.fake.objects:
                return self._error(404, f"{key[2]} not found")
            self.fake.deleted.append(key[2])
            self.fake.remove(*key)
        self._send(200, {"kind": "Status", "status": "Success"})


@contextmanager
def fake_api_server() -> Iterator[FakeApiServer]:
    with tempfile.TemporaryDirectory(prefix="fake-kube-") as directory:
        fake = FakeApiServer(Path(directory))
        try:
            yield fake
        finally:
            fake.close()
