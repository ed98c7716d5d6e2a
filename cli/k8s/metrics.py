"""The controller's metrics (Prometheus, on the health port's /metrics) and its liveness: /healthz
answers 200 while every loop of the controller runs, 503 once one has died (the Deployment's
livenessProbe restarts the pod)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from guardrails.names import CONTROLLER_HEALTH_PATH, CONTROLLER_HEALTH_PORT

HEALTH_PORT = CONTROLLER_HEALTH_PORT  # the Deployment's liveness probe GETs HEALTH_PATH here
HEALTH_PATH = CONTROLLER_HEALTH_PATH


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "parkbrake_k8s_check_decisions_total", "Budget check states written, by state.",
            ["state"], registry=self.registry,
        )  # fmt: skip
        self.undecided = Gauge(
            "parkbrake_k8s_check_undecided_workloads",
            "Workloads whose budget check could not be decided (ledger unreachable) for longer than "
            "--undecided-after.",
            registry=self.registry,
        )
        self.errors = Counter(
            "parkbrake_k8s_controller_errors_total", "Reconciles that failed (retried with backoff), by reconciler.",
            ["reconciler"], registry=self.registry,
        )  # fmt: skip
        self.conflicts = Counter(
            "parkbrake_k8s_check_conflicts_total", "Writes answered 409: the Workload was read again and decided again.",
            registry=self.registry,
        )  # fmt: skip
        self.watch_restarts = Gauge(
            "parkbrake_k8s_watch_restarts", "Lists and watches restarted after a failure, by resource.",
            ["resource"], registry=self.registry,
        )  # fmt: skip


def serve_health(
    port: int, alive: Callable[[], bool], metrics: ControllerMetrics, host: str = "0.0.0.0"
) -> ThreadingHTTPServer:
    """Serve /healthz and /metrics on ``port`` (0: any free one; the server's address says which)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            if self.path == HEALTH_PATH:
                ok = alive()
                body, status, kind = (
                    (b"ok\n" if ok else b"a controller loop died\n"),
                    (200 if ok else 503),
                    "text/plain",
                )
            elif self.path == "/metrics":
                body, status, kind = generate_latest(metrics.registry), 200, CONTENT_TYPE_LATEST
            else:
                body, status, kind = b"not found\n", 404, "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
