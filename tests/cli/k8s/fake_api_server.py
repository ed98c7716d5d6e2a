"""A FAKE Kubernetes API server, for the budget controller's tests (in process) and benchmark (in a process
of its own: tests/cli/k8s/fake_api_process.py).

Not Kubernetes: a small HTTPS server (its own throwaway CA, a bearer token) that implements just what
the controller and ``park`` call — list and watch (from a resourceVersion, 410 once compacted; the
stream chunked as the API server's is) of Workloads, AdmissionChecks, ClusterQueues and NodeClaims;
GET; JSON merge patch of a Workload's status and a ClusterQueue's spec; server-side apply of a
status subresource (:func:`apply_status`, a small model of structured-merge-diff's list-map rules);
all conditional on ``metadata.resourceVersion`` (409 when stale); POST of an Event; DELETE of a
NodeClaim. Kueue's rules are a separate fake (tests/cli/k8s/kueue_fake.py) that changes objects here
as Kueue would. Faults can be injected (:meth:`FakeApiServer.fail`, :meth:`FakeApiServer.cut_watches`).
Every answer goes out as one write on a TCP_NODELAY socket (one segment, no Nagle delay).
"""

from __future__ import annotations

import bisect
import ipaddress
import json
import os
import re
import socket
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
    (re.compile(r"^/apis/kueue\.x-k8s\.io/v1beta2/admissionchecks(/(?P<name>[^/]+)(?P<sub>/status)?)?$"), "admissionchecks"),
    (re.compile(r"^/apis/karpenter\.sh/v1/nodeclaims(/(?P<name>[^/]+))?$"), "nodeclaims"),
    (re.compile(r"^/apis/karpenter\.sh/v1/nodepools(/(?P<name>[^/]+))?$"), "nodepools"),
    (re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments(/(?P<name>[^/]+))?$"), "deployments"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$"), "events"),
]  # fmt: skip
APPLY_PATCH = "application/apply-patch+yaml"
# The status lists that are maps (``+listType=map``): list → key (apis/kueue/v1beta2/workload_types.go,
# ``admissionChecks`` keyed by name; metav1.Condition lists keyed by type).
LIST_MAPS = {"admissionChecks": "name", "conditions": "type"}
Path_ = tuple[str, str, str]  # (list, key, field) a manager owns in status


def apply_status(
    status: dict[str, Any], applied: dict[str, Any], owned: set[Path_]
) -> tuple[dict[str, Any], set[Path_]]:
    """Server-side apply of ``applied`` (one manager's status) onto ``status``, as structured-merge-diff
    merges list-maps (sigs.k8s.io/structured-merge-diff v4 ``merge/update.go``): each applied entry's
    fields are set, every other entry and field is kept, and a field this manager applied before and
    omits now is removed (``owned``: what it owned; returns the new status and what it owns now)."""
    result = json_copy(status)
    now_owned: set[Path_] = set()
    for field, value in applied.items():
        key = LIST_MAPS.get(field)
        if key is None:
            result[field] = json_copy(value)
            now_owned.add((field, "", ""))
            continue
        entries = result.setdefault(field, [])
        for item in value:
            found = next((entry for entry in entries if entry.get(key) == item[key]), None)
            if found is None:
                found = {key: item[key]}
                entries.append(found)
            for name, part in item.items():
                found[name] = json_copy(part)
                now_owned.add((field, str(item[key]), name))
    for field, item_key, name in owned - now_owned:
        if not item_key:
            result.pop(field, None)
            continue
        for entry in result.get(field) or []:
            if entry.get(LIST_MAPS[field]) == item_key and name != LIST_MAPS[field]:
                entry.pop(name, None)
    return result, now_owned


def json_copy(document: Any) -> Any:
    """A copy of a JSON document (every object here is one): a JSON round trip, several times
    cheaper than ``copy.deepcopy``, so that the fake's own copying does not weigh on what the
    benchmark measures (benchmarks/k8s_controller.py runs the fake in the controller's process)."""
    return json.loads(json.dumps(document))


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return json_copy(patch)
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
        # (version, type, resource, the watch event's line): encoded once, however many watch it
        self.history: list[tuple[int, str, str, bytes]] = []
        self.compacted = 0  # watches from before this version answer 410
        self.cut = False  # the next ended watches end mid-chunk (cut_watches)
        self.generation = 0  # bumped by drop_watches: open watches end
        self.patches: list[tuple[float, str, dict[str, Any]]] = []  # (monotonic time, path, body)
        self.deleted: list[str] = []
        self.events: list[dict[str, Any]] = []  # Events posted (core/v1)
        self.suspensions: list[tuple[str, bool]] = []  # (Job, suspend) as the Kueue fake set them
        self.owners: dict[tuple[str, str, str], dict[str, set[Path_]]] = {}  # object → manager → fields
        self.faults: list[tuple[str, str, int]] = []  # (method, path part, status): answered once each
        self.requests = 0
        self.rbac: Authorizer | None = None  # set: every request is authorised by it (tests/cli/k8s/rbac.py)
        self.log: list[tuple[str, str]] = []  # (method, path without query) of every request
        self.observers: list[Any] = []  # called (under the lock) after each stored change
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def address(self) -> tuple[str, str, str]:
        """(url, token file, CA file): what a client needs, as one call (the process form's proxy
        forwards methods only)."""
        return self.url, str(self.token_file), str(self.ca_file)

    def pid(self) -> int:
        """The process serving (the benchmark reads its CPU)."""
        return os.getpid()

    def patch_count(self) -> int:
        with self.lock:
            return len(self.patches)

    def patches_after(self, start: int) -> list[tuple[float, str, dict[str, Any]]]:
        """The patches received since the first ``start``: (monotonic time, path, body) each."""
        with self.lock:
            return list(self.patches[start:])

    def patched_after(self, start: int) -> list[tuple[float, str]]:
        """The patches received since the first ``start``, without their bodies: (monotonic time, path)
        each (a benchmark's watcher, which copies them out of this process every 50 ms)."""
        with self.lock:
            return [(at, path) for at, path, _ in self.patches[start:]]

    def close(self) -> None:
        self.drop_watches()
        self.server.shutdown()
        self.server.server_close()

    # --- what Kueue, Karpenter or a person would do ------------------------------------------------

    def put(self, resource: str, document: dict[str, Any], *, kind: str | None = None) -> dict[str, Any]:
        """Create or replace an object; returns it as stored (with uid and resourceVersion)."""
        with self.lock:
            stored = json_copy(document)
            meta = stored.setdefault("metadata", {})
            key = (resource, str(meta.get("namespace", "")), str(meta["name"]))
            meta.setdefault(
                "uid", self.objects.get(key, {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
            )
            self._store(resource, key, stored, kind or ("MODIFIED" if key in self.objects else "ADDED"))
            return json_copy(stored)

    def put_all(self, resource: str, documents: list[dict[str, Any]]) -> list[float]:
        """:meth:`put` each of ``documents`` in turn, as Kueue reserving a queue's quota writes one
        Workload after another; the monotonic time each was written at."""
        written = []
        for document in documents:
            written.append(time.monotonic())
            self.put(resource, document)
        return written

    def remove(self, resource: str, namespace: str, name: str) -> None:
        with self.lock:
            stored = self.objects.pop((resource, namespace, name))
            self._record("DELETED", resource, stored)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return json_copy(self.objects[(resource, namespace, name)])

    def fail(self, method: str, path_part: str, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests of ``method`` whose path contains ``path_part`` with
        ``status`` (a 5xx, a 422, a 409)."""
        with self.lock:
            self.faults.extend([(method, path_part, status)] * times)

    def cut_watches(self) -> None:
        """End every open watch in the middle of a chunk (the client reads an IncompleteRead)."""
        with self.lock:
            self.cut = True
            self.generation += 1
            self.lock.notify_all()

    def drop_watches(self) -> None:
        """End every open watch, as a restarted API server or a broken connection would."""
        with self.lock:
            self.cut = False
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
        line = json.dumps({"type": kind, "object": stored}).encode() + b"\n"
        self.history.append((self.version, kind, resource, line))
        for observer in self.observers:
            observer(resource, kind, stored)
        self.lock.notify_all()

    def update_status(self, resource: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace an object's status as a controller's Update would (Kueue's): the fields it changes in
        the list-maps leave every other manager's ownership (sigs.k8s.io/structured-merge-diff)."""
        key = (resource, namespace, name)
        current = self.objects[key]
        before = current.get("status") or {}
        for field, item_key in LIST_MAPS.items():
            old = {e.get(item_key): e for e in before.get(field) or []}
            for entry in status.get(field) or []:
                prior = old.get(entry.get(item_key), {})
                changed = {n for n in set(entry) | set(prior) if entry.get(n) != prior.get(n)}
                for owned in self.owners.get(key, {}).values():
                    owned -= {(field, str(entry.get(item_key)), n) for n in changed}
        self._store(resource, key, {**current, "status": status}, "MODIFIED")

    def _fault(self, method: str, path: str) -> int | None:
        with self.lock:
            for index, (verb, part, status) in enumerate(self.faults):
                if verb == method and part in path:
                    del self.faults[index]
                    return status
        return None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApiServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: dict[str, Any]) -> None:
        self._send_encoded(status, json.dumps(body))

    def _send_encoded(self, status: int, body: str) -> None:
        """The status line, headers and body in one write: one TCP segment for a small answer."""
        data = body.encode()
        head = (
            f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self.wfile.write(head.encode() + data)
        self.wfile.flush()

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
        self.fake.log.append((self.command, self.path.partition("?")[0]))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._error(401, "Unauthorized")
            return False
        if self.fake.rbac is not None and not self.fake.rbac.authorize(self.command, self.path):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))  # the connection stays usable
            self._error(403, f"forbidden: {self.command} {self.path} is not granted by the role")
            return False
        if (status := self.fake._fault(self.command, self.path)) is not None:
            if self.command == "PATCH":  # the body is read, so the kept-alive connection stays usable
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._error(status, f"injected fault {status}")
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
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        seen = since
        while True:
            with fake.lock:
                start = bisect.bisect_right(
                    fake.history, seen, key=lambda entry: entry[0]
                )  # sorted by version
                pending = [entry for entry in fake.history[start:] if entry[2] == resource]
                if not pending:
                    seen = fake.history[-1][0] if fake.history else seen
                    if fake.generation != generation:
                        if fake.cut:  # a chunk that promises more than it sends, then the end
                            self.wfile.write(b'40\r\n{"type": "MODIF')
                        else:
                            self.wfile.write(b"0\r\n\r\n")
                        self.close_connection = True
                        return
                    fake.lock.wait(0.5)
                    continue
            lines = b"".join(line for _, _, _, line in pending)
            seen = pending[-1][0]
            self.wfile.write(f"{len(lines):x}\r\n".encode() + lines + b"\r\n")
            self.wfile.flush()

    def do_PATCH(self) -> None:
        if not self._authorised() or (route := self._route()) is None:
            return
        resource, match, _ = route
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        content_type = self.headers.get("Content-Type")
        if content_type not in {"application/merge-patch+json", APPLY_PATCH}:
            return self._error(415, "the fake takes JSON merge patches and server-side apply only")
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
            if content_type == APPLY_PATCH:
                return self._apply(resource, key, match, body, current)
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
            answer = json.dumps(updated)  # under the lock: the object as this patch left it
        self._send_encoded(200, answer)

    def _apply(
        self, resource: str, key: tuple[str, str, str], match: dict[str, Any], body: dict[str, Any],
        current: dict[str, Any],
    ) -> None:  # fmt: skip
        """Server-side apply of a status subresource (the fake's only apply): ``fieldManager`` is required
        (k8s.io/apiserver ``pkg/endpoints/handlers/patch.go``)."""
        params = dict(part.split("=", 1) for part in self.path.partition("?")[2].split("&") if "=" in part)
        manager = params.get("fieldManager")
        if not manager:
            return self._error(422, "fieldManager is required for apply patch")
        if not match.get("sub"):
            return self._error(415, "the fake applies status subresources only")
        fake = self.fake
        owners = fake.owners.setdefault(key, {})
        status, owners[manager] = apply_status(
            current.get("status") or {}, body.get("status") or {}, owners.get(manager, set())
        )
        updated = {**current, "status": status}
        fake.patches.append((time.monotonic(), self.path, body))
        fake._store(resource, key, updated, "MODIFIED")
        self._send_encoded(200, json.dumps(updated))

    def do_POST(self) -> None:
        if not self._authorised() or (route := self._route()) is None:
            return
        resource, match, _ = route
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if resource != "events":
            return self._error(405, "the fake creates Events only")
        with self.fake.lock:
            self.fake.events.append({**body, "namespace": match.get("ns")})
        self._send(201, body)

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
