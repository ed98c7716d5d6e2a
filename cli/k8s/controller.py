"""The budget admission check's controller: Kueue's external AdmissionCheck controller for
``parkbrake.dev/budget``, on lightkube (docs/architecture.md says why), laid out as Kueue lays its
own: one reconciler per resource — AdmissionChecks (cli/k8s/check_reconciler.py), Workloads
(cli/k8s/workload_reconciler.py), budget stops (cli/k8s/stop_reconciler.py), NodeClaims
(cli/k8s/nodeclaim_reconciler.py).

Informers (cli/k8s/informer.py) list and watch Workloads and AdmissionChecks, reconnecting however a
watch ends; each change queues the object's key on a work queue (cli/k8s/workqueue.py) that hands a
key to one worker at a time, retries every failure after a per-key backoff, and is refilled with every
Workload each ``resync`` so none waits on an unrelated event. The workers share one ledger connection
per ``--workers`` (a BudgetCheck each, lent for each ledger call: cli/k8s/admission.py CheckPool), four
workers a connection: a connection is not idle while its worker writes to the API server, and under
a burst the decisions that wait for a connection are decided together, one statement a step for the
batch; one more connection runs the budget stops and NodeClaim reclaim every ``sweep_every``.
/healthz (cli/k8s/metrics.py) fails once any of these loops has died.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.k8s.admission import CheckPool
from cli.k8s.check_reconciler import CheckReconciler
from cli.k8s.informer import Informer, object_key
from cli.k8s.kube import AdmissionCheck, Workload
from cli.k8s.metrics import HEALTH_PORT, ControllerMetrics, serve_health
from cli.k8s.nodeclaim_reconciler import NodeClaimReconciler
from cli.k8s.server_options import with_server_options
from cli.k8s.stop_reconciler import StopReconciler
from cli.k8s.workload_reconciler import Key, Undecided, WorkloadReconciler, own_entry, stamp
from cli.k8s.workqueue import WorkQueue
from cli.options import DURATION, output_option, project_dir_option, stack_option
from guardrails.plurals import counted

if TYPE_CHECKING:
    from lightkube import Client

    from cli.k8s.admission import BudgetCheck
    from guardrails.pricing import PriceTable
    from stacks.config import StackConfig

Clock = Callable[[], datetime]
# Workers deciding on the ledger while others write their entries; those waiting are one batch next.
WORKERS_PER_CONNECTION = 4
__all__ = ["Controller", "stamp"]


class Controller:
    def __init__(
        self,
        client: Client,
        config: StackConfig,
        prices: PriceTable,
        checks: Sequence[BudgetCheck],
        *,
        clock: Clock | None = None,
        resync: timedelta = timedelta(minutes=3),
        sweep_every: timedelta = timedelta(minutes=1),
        undecided_after: timedelta = timedelta(minutes=10),
        watch_seconds: int = 300,
        max_backoff: float = 30.0,
    ) -> None:
        if len(checks) < 2:
            raise ValueError("the controller needs one check per worker and one for the sweeps")
        self.client = client
        self.workers, self.sweeper = list(checks[:-1]), checks[-1]
        self.lender = CheckPool(self.workers)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.resync, self.sweep_every = resync, sweep_every
        self.metrics = ControllerMetrics()
        self.queue: WorkQueue[Key] = WorkQueue(max_delay=max_backoff)
        self.check_queue: WorkQueue[str] = WorkQueue(max_delay=max_backoff)
        self.workloads = Informer(client, Workload, self._on_workload, watch_seconds=watch_seconds)
        self.admission_checks = Informer(client, AdmissionCheck, self._on_check, watch_seconds=watch_seconds)
        self.check_reconciler = CheckReconciler(
            client, self.admission_checks, clock=self.clock, on_change=self.enqueue_all
        )
        checks_of = self.check_reconciler.checks
        self.workload_reconciler = WorkloadReconciler(
            client, config, prices, self.workloads, checks=checks_of, metrics=self.metrics,
            clock=self.clock, undecided_after=undecided_after,
        )  # fmt: skip
        self.stop_reconciler = StopReconciler(
            client, self.workloads, checks_of, self.metrics, clock=self.clock
        )
        self.nodeclaim_reconciler = NodeClaimReconciler(client, config, self.metrics, clock=self.clock)
        self.outcomes: queue.Queue[tuple[str, str]] = queue.Queue()  # (what, what was done)
        self.threads: list[threading.Thread] = []
        self.decided_at: dict[Key, float] = {}  # monotonic time of each Workload's last write (benchmark)

    # --- events into the queues ---------------------------------------------------------------------

    def _on_workload(self, kind: str, workload: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.workload_reconciler.deleted(workload)
        self.queue.add(object_key(workload))

    def _on_check(self, kind: str, check: dict[str, Any]) -> None:
        self.check_queue.add(object_key(check)[1])

    def sync(self) -> None:
        """List AdmissionChecks and Workloads once, as the watches' first list does (tests)."""
        self.admission_checks.relist()
        self.check_reconciler.refresh()
        self.workloads.relist()

    def enqueue_all(self) -> None:
        for workload in self.workloads.items():
            self.queue.add(object_key(workload))

    def resync_pending(self) -> int:
        """Queue every Workload whose check entry is still Pending; how many."""
        checks = self.check_reconciler.checks()
        pending = [
            object_key(w)
            for w in self.workloads.items()
            if (own_entry(w, checks) or {}).get("state") == "Pending"
        ]
        for key in pending:
            self.queue.add(key)
        return len(pending)

    # --- the loops -----------------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        loops: list[tuple[str, Callable[..., None], tuple[Any, ...]]] = [
            ("watch workloads", self.workloads.run, (stop,)),
            ("watch admissionchecks", self.admission_checks.run, (stop,)),
            ("admissionchecks", self._check_worker, ()),
            ("sweeps", self._sweep, (stop,)),
            ("resync", self._resync, (stop,)),
        ]
        loops += [
            (f"worker {n}", self._worker, (self.lender,))
            for n in range(WORKERS_PER_CONNECTION * len(self.workers))
        ]
        for name, target, args in loops:
            self.threads.append(threading.Thread(target=target, args=args, name=name, daemon=True))
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.queue.shutdown()
        self.check_queue.shutdown()

    def alive(self) -> bool:
        """Every loop still running (the liveness probe's answer)."""
        return bool(self.threads) and all(thread.is_alive() for thread in self.threads)

    def handle(self, check: BudgetCheck | CheckPool, key: Key) -> str:
        """Reconcile one Workload now (the workers' step; tests call it directly)."""
        outcome = self.workload_reconciler.reconcile(check, key)
        if outcome in {"Ready", "Retry", "Rejected"}:
            self.decided_at[key] = time.monotonic()
        self.outcomes.put((f"{key[0]}/{key[1]}", outcome))
        return outcome

    def _worker(self, check: CheckPool) -> None:
        while (key := self.queue.get()) is not None:
            try:
                self.handle(check, key)
                self.queue.forget(key)
            except Undecided as error:
                self.queue.add_rate_limited(key)
                self.outcomes.put((f"{key[0]}/{key[1]}", f"undecided: {error}"))
            except Exception as error:  # any failure: this key again after its backoff
                self.metrics.errors.labels(reconciler="workloads").inc()
                self.queue.add_rate_limited(key)
                self._report(f"{key[0]}/{key[1]}", repr(error))
            finally:
                self.queue.done(key)

    def _check_worker(self) -> None:
        while (name := self.check_queue.get()) is not None:
            try:
                self.outcomes.put((f"admissioncheck/{name}", self.check_reconciler.reconcile(name)))
                self.check_queue.forget(name)
            except Exception as error:
                self.metrics.errors.labels(reconciler="admissionchecks").inc()
                self.check_queue.add_rate_limited(name)
                self._report(f"admissioncheck/{name}", repr(error))
            finally:
                self.check_queue.done(name)

    def _sweep(self, stop: threading.Event) -> None:
        while not stop.wait(self.sweep_every.total_seconds()):
            for name, reconciler in (
                ("stops", self.stop_reconciler),
                ("nodeclaims", self.nodeclaim_reconciler),
            ):
                try:
                    done = reconciler.reconcile(self.sweeper)
                    if done:
                        self.outcomes.put((name, ", ".join(done)))
                except Exception as error:  # the next sweep tries again
                    self.metrics.errors.labels(reconciler=name).inc()
                    self._report(name, repr(error))

    def _resync(self, stop: threading.Event) -> None:
        while not stop.wait(self.resync.total_seconds()):
            self.resync_pending()
            for name in self.check_reconciler.checks():  # and the checks stay Active
                self.check_queue.add(name)
            self.metrics.watch_restarts.labels(resource="workloads").set(self.workloads.failures)
            self.metrics.watch_restarts.labels(resource="admissionchecks").set(self.admission_checks.failures)

    def _report(self, subject: str, message: str) -> None:
        print(json.dumps({"controller": subject, "error": message[:500]}), file=sys.stderr)
        self.outcomes.put((subject, f"error: {message}"))


def run_forever(controller: Controller, *, output: str = "text") -> None:
    """Run until SIGTERM or Ctrl-C (a Deployment's rollout ends the old pod with SIGTERM), printing
    what was done with each Workload: a line each, or (json) one JSON object a line."""
    import signal

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    controller.start(stop)
    try:
        while not stop.is_set():
            try:
                name, outcome = controller.outcomes.get(timeout=1)
            except queue.Empty:
                continue
            if output == "json":
                click.echo(json.dumps({"workload": name, "outcome": outcome, "at": stamp(datetime.now(UTC))}))
            else:
                click.echo(f"{name}: {outcome}")
    except KeyboardInterrupt:
        stop.set()
    controller.stop()
    time.sleep(0.1)


@click.command()
@stack_option
@project_dir_option
@with_server_options
@click.option(
    "--workers", default=4, show_default=True, type=click.IntRange(1, 64),
    help="Ledger connections deciding Workloads, four worker threads sharing each (one more for the budget sweep).",
)  # fmt: skip
@click.option(
    "--stop-every", type=DURATION, default="1m", show_default=True,
    help="How often tenants' budgets are checked for their stop action (and NodeClaims for their cap).",
)  # fmt: skip
@click.option(
    "--resync-every", type=DURATION, default="3m", show_default=True,
    help="How often every Workload still Pending is decided again, whatever its events.",
)  # fmt: skip
@click.option(
    "--undecided-after", type=DURATION, default="10m", show_default=True,
    help="How long a check may stay undecided (ledger unreachable) before an Event and the metric report it.",
)  # fmt: skip
@click.option(
    "--health-port", default=HEALTH_PORT, show_default=True, type=click.IntRange(0, 65535),
    help="Port of GET /healthz (the liveness probe) and GET /metrics.",
)  # fmt: skip
@output_option
def controller(
    *, stack: str, project_dir: Path, server: str | None, token_file: Path | None, ca_file: Path | None,
    workers: int, stop_every: timedelta, resync_every: timedelta, undecided_after: timedelta,
    health_port: int, output: str,
) -> None:  # fmt: skip
    """Run the budget admission check: gate Kueue Workloads on the ledger until stopped (SIGTERM).

    Deployed by the stack (the parkbrake-budget-controller Deployment); the ledger is
    PARKBRAKE_DATABASE_URL (or PARKBRAKE_DATABASE_SECRET_ARN). Outside a pod give --server,
    --token-file and --ca-file.

    \b
    Example:
      parkbrake k8s controller --stack eks \\
        --server https://127.0.0.1:6443 --token-file t --ca-file ca.crt
    """
    from cli.k8s.check import budget_check, kubernetes_stack
    from cli.k8s.kube import client_from_options

    config, prices = kubernetes_stack(stack, project_dir)
    client = client_from_options(server, token_file, ca_file)
    checks = [budget_check(config) for _ in range(workers + 1)]
    running = Controller(
        client, config, prices, checks, sweep_every=stop_every, resync=resync_every,
        undecided_after=undecided_after,
    )  # fmt: skip
    serve_health(health_port, running.alive, running.metrics)
    click.echo(
        f"parkbrake-budget controller: {counted(workers, 'worker')}; /healthz on :{health_port}", err=True
    )
    try:
        run_forever(running, output=output)
    finally:
        for check in checks:
            check.store.close()
