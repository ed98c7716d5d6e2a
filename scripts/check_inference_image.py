"""Build the inference service's image and prove that it serves, from the host, against a real PostgreSQL.

    python scripts/check_inference_image.py        # or: make image-check

1. The base: ``--python-image`` (default ``python:3.11-slim``) when it is here or can be pulled; else a
   local stand-in for it, ``parkbrake-local/python:3.11-slim``, made from Debian bookworm's packages
   (debootstrap; bookworm's python3 is 3.11) with a virtual environment first on ``PATH``, so ``python``
   and ``pip`` resolve as in the official image. Making the stand-in needs root, debootstrap and
   deb.debian.org; it carries the host's local CAs (``/usr/local/share/ca-certificates``), so pip inside
   the build trusts a TLS-inspecting proxy the host trusts.
2. The build: ``services/inference/Dockerfile`` on the committed ``HEAD`` (``git archive``: the image
   holds exactly the commit its revision label names), ``--build-arg REVISION=$(git rev-parse HEAD)``,
   on the default bridge network when it reaches PyPI, else the host's.
3. The container, as built (its command; the API's port 8080 and, for this check to read, the metrics
   port 9464 published on 127.0.0.1, which the task definition never publishes), against a throwaway
   PostgreSQL (``PARKBRAKE_DATABASE_URL`` when set, reachable from the container, else pgserver's
   socket mounted into it), migrated with ``parkbrake ledger migrate``, the service logging in as a role
   granted ``parkbrake_inference``, with a key from ``parkbrake keys create``.

Every check prints PASS or FAIL; the exit status is 1 if any failed (2 if the image could not be built).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import numpy as np
import psycopg

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.postgres import postgres_url  # noqa: E402  (the repository root is on the path only now)

STAND_IN = "parkbrake-local/python:3.11-slim"
OFFICIAL = "python:3.11-slim"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
STAND_IN_VENV = "/opt/python"
REFERENCE = REPO_ROOT / "tests/services/inference/reference/vectors.json"
SERVICE_ROLE = "inference_login"
CONTAINER_SOCKET_DIR = "/run/postgresql"
NOBODY = 65534
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")  # ONNX Runtime colours its log lines
STOP_TIMEOUT_S = 40  # the service's drain (30 s) and a margin: a clean drain exits well inside it
LONG_TEXT = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)  # past the 256-token cut


def run(*command: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    result = subprocess.run(command, env=env, capture_output=True, check=False)
    if check and result.returncode != 0:
        raise SystemExit(
            f"{' '.join(command[:4])} … exited {result.returncode}:\n{result.stderr.decode(errors='replace')}"
        )
    return result.stdout.decode(errors="replace").strip()


def container_log(container: str) -> str:
    """The service's log: it writes to stderr, which ``docker logs`` hands back on its own stderr."""
    result = subprocess.run(
        ["docker", "logs", container], check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    return result.stdout.decode(errors="replace")


def log(message: str) -> None:
    print(message, flush=True)


@dataclass
class Checks:
    results: list[tuple[str, bool, str]] = field(default_factory=list)

    def record(self, name: str, passed: bool, detail: str) -> None:
        self.results.append((name, passed, detail))
        log(f"{'PASS' if passed else 'FAIL'} {name}: {detail}")

    @property
    def failed(self) -> list[str]:
        return [name for name, passed, _ in self.results if not passed]


# --- 1. the base image -------------------------------------------------------------------------------


def succeeds(*command: str, timeout: float | None = None) -> bool:
    try:
        return subprocess.run(command, check=False, capture_output=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def image_present(name: str) -> bool:
    return succeeds("docker", "image", "inspect", name)


def base_image(wanted: str) -> str:
    if image_present(wanted):
        return wanted
    log(f"pulling {wanted}")
    if succeeds("docker", "pull", wanted, timeout=600):
        return wanted
    if wanted != OFFICIAL:
        raise SystemExit(f"--python-image {wanted}: not here and could not be pulled")
    log(f"{OFFICIAL} cannot be pulled here: using the local stand-in {STAND_IN}")
    if not image_present(STAND_IN):
        build_stand_in()
    return STAND_IN


def build_stand_in() -> None:
    """python:3.11-slim's equivalent from Debian bookworm's packages, imported as ``STAND_IN``."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise SystemExit(
            f"making the stand-in {STAND_IN} needs root and debootstrap (apt-get install debootstrap); "
            "or pass --python-image with a Python 3.11 image you have"
        )
    started = time.monotonic()
    rootfs = Path(tempfile.mkdtemp(prefix="parkbrake-python-rootfs-", dir="/var/tmp"))
    rootfs.chmod(0o755)  # mkdtemp's 0700 becomes the image's /: the service's user could reach nothing
    proc = rootfs / "proc"
    try:
        log(f"debootstrap bookworm into {rootfs}")
        run("debootstrap", "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR)
        run("mount", "-t", "proc", "proc", str(proc))
        chroot = ("chroot", str(rootfs), "env", "DEBIAN_FRONTEND=noninteractive")
        run(
            *chroot,
            "apt-get",
            "install",
            "-y",
            "--no-install-recommends",
            "python3",
            "python3-venv",
            "ca-certificates",
        )
        for certificate in Path("/usr/local/share/ca-certificates").glob("*.crt"):
            shutil.copy(certificate, rootfs / "usr/local/share/ca-certificates" / certificate.name)
        run(*chroot, "update-ca-certificates")
        # A virtual environment: Debian's own pip refuses to install into the system Python (PEP 668).
        run(*chroot, "python3", "-m", "venv", STAND_IN_VENV)
        run(*chroot, "apt-get", "clean")
        run("umount", str(proc))
        for cleared in ("var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / cleared)
        archive = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        path = f"{STAND_IN_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        subprocess.run(
            [
                "docker",
                "import",
                "--change",
                f"ENV PATH={path}",
                "--change",
                "ENV LANG=C.UTF-8",
                "--change",
                'CMD ["python3"]',
                "-",
                STAND_IN,
            ],
            stdin=archive.stdout,
            check=True,
            capture_output=True,
        )
        if archive.wait() != 0:
            raise SystemExit("tar of the stand-in's root failed")
    finally:
        subprocess.run(["umount", str(proc)], check=False, capture_output=True)
        shutil.rmtree(rootfs, ignore_errors=True)
    log(f"made {STAND_IN} in {time.monotonic() - started:.0f} s")


# --- 2. the build ------------------------------------------------------------------------------------


def build_network(base: str) -> str:
    """``default`` when a container on the bridge reaches PyPI, else ``host``."""
    probe = "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=20)"
    for network in ("default", "host"):
        if succeeds("docker", "run", "--rm", f"--network={network}", base, "python", "-c", probe):
            return network
    raise SystemExit(f"a container from {base} reaches https://pypi.org on neither the bridge nor the host")


def build(base: str, revision: str, image: str) -> float:
    if run("git", "-C", str(REPO_ROOT), "status", "--porcelain"):
        log("note: uncommitted changes are not in the image; it is built from HEAD")
    network = build_network(base)
    context = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", "HEAD"], capture_output=True, check=True
    ).stdout
    command = [
        "docker",
        "build",
        "-f",
        "services/inference/Dockerfile",
        f"--network={network}",
        "--build-arg",
        f"PYTHON_IMAGE={base}",
        "--build-arg",
        f"REVISION={revision}",
        "-t",
        image,
        "-",
    ]
    log(f"building {image} on {base} (network {network}, context {len(context) / 1e6:.1f} MB)")
    started = time.monotonic()
    result = subprocess.run(command, input=context, check=False, capture_output=True)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        sys.stderr.write(
            result.stdout.decode(errors="replace")[-6000:] + result.stderr.decode(errors="replace")
        )
        log(f"FAIL build: docker build exited {result.returncode} after {seconds:.0f} s")
        raise SystemExit(2)
    return seconds


# --- 3. the container --------------------------------------------------------------------------------


class Headers(dict[str, str]):
    """Response headers by name, in any case (RFC 9110: names are case-insensitive; uvicorn sends
    them lower-case)."""

    def __init__(self, items: Any) -> None:
        super().__init__((name.lower(), value) for name, value in items)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def call(url: str, body: object = None, headers: dict[str, str] | None = None, timeout: float = 300) -> Reply:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, Headers(response.headers.items()), response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, Headers(error.headers.items()), error.read())


@contextmanager
def service_database() -> Iterator[tuple[str, str, list[str]]]:
    """(the owner's URL, the service's URL as the container sees it, ``docker run`` mount options)."""
    with postgres_url("parkbrake-image-check-") as owner_url:
        parkbrake("ledger", "migrate", database_url=owner_url)
        with psycopg.connect(owner_url, autocommit=True) as connection:
            if not connection.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s", (SERVICE_ROLE,)
            ).fetchone():
                connection.execute(f"CREATE ROLE {SERVICE_ROLE} LOGIN PASSWORD 'image-check'")
            connection.execute(f"GRANT parkbrake_inference TO {SERVICE_ROLE}")
        parts = urlsplit(owner_url)
        query = parse_qs(parts.query)
        address = f"{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        mounts: list[str] = []
        socket_dir = query.get("host", [""])[0]
        if socket_dir.startswith("/"):
            # pgserver listens on a socket only, inside its data folder (mode 0700): the container gets
            # the socket alone, in a folder its user may enter.
            socket = f".s.PGSQL.{query.get('port', [parts.port or 5432])[0]}"
            mounts = ["-v", f"{socket_dir}/{socket}:{CONTAINER_SOCKET_DIR}/{socket}"]
            query["host"] = [CONTAINER_SOCKET_DIR]
        service_url = parts._replace(
            netloc=f"{SERVICE_ROLE}:image-check@{address}", query=urlencode(query, doseq=True)
        ).geturl()
        yield owner_url, service_url, mounts


def parkbrake(*arguments: str, database_url: str) -> str:
    """The project's CLI from the repository's environment, on ``database_url``."""
    environment = {**os.environ, "PARKBRAKE_DATABASE_URL": database_url}
    return run(str(REPO_ROOT / ".venv/bin/parkbrake"), *arguments, "--output", "json", env=environment)


def wait_until_ready(base_url: str, checks: Checks) -> None:
    statuses: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            status = call(base_url + "/healthz", timeout=5).status
        except (OSError, http.client.HTTPException):
            time.sleep(0.05)  # not listening yet: docker-proxy accepts, then resets or echoes
            continue
        if not statuses or statuses[-1] != status:
            statuses.append(status)
        if status == 200:
            break
        time.sleep(0.05)
    checks.record(
        "healthz 503 until warm, then 200",
        statuses[-2:] == [503, 200] if statuses else False,
        f"statuses seen in order: {statuses}",
    )


def check_serving(base_url: str, key: str, revision: str, checks: Checks) -> None:
    version = json.loads(call(base_url + "/version").body)
    checks.record("/version is the commit", version.get("revision") == revision, f"{version}")

    reference = json.loads(REFERENCE.read_text())["items"]
    auth = {"Authorization": f"Bearer {key}"}
    request = {"model": "all-MiniLM-L6-v2", "input": [item["text"] for item in reference]}
    reply = call(base_url + "/v1/embeddings", request, auth)
    data = json.loads(reply.body).get("data", []) if reply.status == 200 else []
    got = np.array([row["embedding"] for row in data], dtype=np.float64)
    want = np.array([item["embedding"] for item in reference], dtype=np.float64)
    if reply.status == 200 and got.shape == want.shape:
        cosines = (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
        checks.record(
            "embeddings match the reference",
            bool(cosines.min() >= 0.999),
            f"{len(data)} × {got.shape[1]} dims, cosine {cosines.min():.7f}–{cosines.max():.7f}",
        )
    else:
        checks.record("embeddings match the reference", False, f"status {reply.status}, shape {got.shape}")

    keyed = {**auth, "Idempotency-Key": f"image-check-{time.time_ns()}"}
    first = call(base_url + "/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": "hello world"}, keyed)
    again = call(base_url + "/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": "hello world"}, keyed)
    checks.record(
        "an Idempotency-Key replay is the same bytes",
        first.status == again.status == 200
        and first.body == again.body
        and again.headers.get("Idempotent-Replayed") == "true"
        and "Idempotent-Replayed" not in first.headers,
        f"statuses {first.status}, {again.status}; {len(again.body)} bytes, identical: {first.body == again.body}; "
        f"Idempotent-Replayed: {again.headers.get('Idempotent-Replayed')}",
    )

    models = call(base_url + "/v1/models")
    listed = (
        [item.get("id") for item in json.loads(models.body).get("data", [])] if models.status == 200 else []
    )
    checks.record(
        "GET /v1/models lists the model", listed == ["all-MiniLM-L6-v2"], f"status {models.status}, {listed}"
    )
    server = models.headers.get("Server", "")
    checks.record(
        "the Server header names no versions",
        server == "parkbrake-inference",
        f"Server: {server}",
    )

    anonymous = call(base_url + "/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": "hello"})
    checks.record(
        "no API key is 401",
        anonymous.status == 401 and "WWW-Authenticate" in anonymous.headers,
        f"status {anonymous.status}, WWW-Authenticate: {anonymous.headers.get('WWW-Authenticate')}",
    )


def check_metrics_port(base_url: str, metrics_url: str, checks: Checks) -> None:
    """/metrics names tenants: served on its own port, and not on the one the load balancer routes."""
    on_api_port = call(base_url + "/metrics")
    on_metrics_port = call(metrics_url + "/metrics")
    checks.record(
        "/metrics is on the metrics port only",
        on_api_port.status == 404
        and on_metrics_port.status == 200
        and b"parkbrake_inference_model_passes_total" in on_metrics_port.body,
        f"API port: {on_api_port.status}; metrics port: {on_metrics_port.status}",
    )


def check_container(container: str, image: str, revision: str, checks: Checks) -> None:
    labels = json.loads(run("docker", "inspect", "-f", "{{json .Config.Labels}}", image))
    checks.record(
        "image labels are the commit",
        labels.get("org.opencontainers.image.revision") == revision == labels.get("parkbrake.revision"),
        f"org.opencontainers.image.revision={labels.get('org.opencontainers.image.revision')}",
    )
    status = run("docker", "exec", container, "cat", "/proc/1/status")
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    checks.record(f"the service runs as uid {NOBODY}", set(uids) == {str(NOBODY)}, f"PID 1 Uid: {uids}")
    health = ""
    for _ in range(60):  # the image's HEALTHCHECK runs every 10 s
        health = run("docker", "inspect", "-f", "{{.State.Health.Status}}", container)
        if health != "starting":
            break
        time.sleep(1)
    checks.record("the image's HEALTHCHECK reports healthy", health == "healthy", health)


def in_flight(metrics_url: str) -> float:
    for line in call(metrics_url + "/metrics").body.decode().splitlines():
        if line.startswith("parkbrake_inference_in_flight_requests "):
            return float(line.split()[1])
    return 0.0


def check_drain(  # noqa: PLR0917 (the container's addresses and the check's size)
    container: str, base_url: str, metrics_url: str, key: str, inputs: int, checks: Checks
) -> None:
    """SIGTERM (``docker stop``) while a long request runs: it finishes, /healthz turns 503, exit 0.

    ``inputs`` long texts make a pass of seconds (about 9 s for 48 on two shared cores) and well
    inside the 30 s drain.
    """
    replies: list[Reply] = []
    request = {"model": "all-MiniLM-L6-v2", "input": [f"{index} {LONG_TEXT}" for index in range(inputs)]}
    long_request = threading.Thread(
        target=lambda: replies.append(
            call(base_url + "/v1/embeddings", request, {"Authorization": f"Bearer {key}"})
        )
    )
    long_request.start()
    while long_request.is_alive() and in_flight(metrics_url) < 1:
        time.sleep(0.01)
    started = time.monotonic()
    stop = subprocess.Popen(
        ["docker", "stop", "-t", str(STOP_TIMEOUT_S), container], stdout=subprocess.DEVNULL
    )
    draining_status = None
    while stop.poll() is None and draining_status is None:
        try:
            reply = call(base_url + "/healthz", timeout=2)
            draining_status = reply.status if reply.status != 200 else None
        except (OSError, http.client.HTTPException):
            break
        time.sleep(0.05)
    stop.wait()
    stop_seconds = time.monotonic() - started
    long_request.join()
    exit_code = run("docker", "inspect", "-f", "{{.State.ExitCode}}", container)
    logs = container_log(container).splitlines()
    run_status = replies[0].status if replies else None
    checks.record("healthz is 503 while draining", draining_status == 503, f"status {draining_status}")
    checks.record(
        "SIGTERM drains the request in flight",
        run_status == 200 and any("draining: 1 request(s) in flight" in line for line in logs),
        f"in-flight request's status {run_status}; log: {[line for line in logs if 'drain' in line]}",
    )
    checks.record(
        "the container exits 0 within the stop timeout",
        exit_code == "0" and stop_seconds < STOP_TIMEOUT_S,
        f"exit code {exit_code} after {stop_seconds:.1f} s (timeout {STOP_TIMEOUT_S} s)",
    )


def check_device(container: str, on_gpu: bool, checks: Checks) -> None:
    """The service's "model loaded on …" line, and what ONNX Runtime said about its providers."""
    expected = "gpu" if on_gpu else "cpu"
    lines = [
        ANSI_ESCAPE.sub("", line)[:240]
        for line in container_log(container).splitlines()
        if "model loaded on" in line or "ExecutionProvider" in line or "providers_cuda" in line
    ]
    checks.record(
        f"the model runs on the {expected.upper()} ({'a GPU' if on_gpu else 'no GPU'} here)",
        any(f"model loaded on {expected}; ready" in line for line in lines),
        "log:\n    " + "\n    ".join(lines),
    )


def check_image(image: str, revision: str, checks: Checks) -> None:
    # A GPU reaches the container through the NVIDIA container toolkit's --gpus.
    on_gpu = bool(shutil.which("nvidia-smi")) and succeeds("nvidia-smi", "-L")
    with service_database() as (owner_url, service_url, mounts):
        key = str(
            json.loads(parkbrake("keys", "create", "--tenant", "image-check", database_url=owner_url))["key"]
        )
        container = run(
            "docker",
            "run",
            "-d",
            "-p",
            "127.0.0.1::8080",
            "-p",
            "127.0.0.1::9464",
            *(["--gpus", "all"] if on_gpu else []),
            *mounts,
            "-e",
            f"PARKBRAKE_DATABASE_URL={service_url}",
            image,
        )
        try:
            base_url = "http://" + run("docker", "port", container, "8080/tcp").splitlines()[0]
            metrics_url = "http://" + run("docker", "port", container, "9464/tcp").splitlines()[0]
            log(f"container {container[:12]} on {base_url}, metrics on {metrics_url}")
            wait_until_ready(base_url, checks)
            check_serving(base_url, key, revision, checks)
            check_metrics_port(base_url, metrics_url, checks)
            check_container(container, image, revision, checks)
            check_device(container, on_gpu, checks)
            check_drain(container, base_url, metrics_url, key, 2048 if on_gpu else 48, checks)
        finally:
            log("container log:\n" + container_log(container))
            subprocess.run(["docker", "rm", "-f", container], check=False, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--python-image", default=OFFICIAL, help="the base of both stages (default: %(default)s)"
    )
    arguments = parser.parse_args()
    revision = run("git", "-C", str(REPO_ROOT), "rev-parse", "HEAD")
    image = f"parkbrake-inference:{revision[:12]}"
    checks = Checks()
    base = base_image(arguments.python_image)
    seconds = build(base, revision, image)
    size = int(run("docker", "image", "inspect", "-f", "{{.Size}}", image))
    checks.record("build", True, f"{image} from {base} in {seconds:.0f} s, {size / 2**30:.2f} GiB")
    check_image(image, revision, checks)
    log(
        f"{len(checks.results) - len(checks.failed)} of {len(checks.results)} checks passed"
        + (f"; failed: {', '.join(checks.failed)}" if checks.failed else "")
    )
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
