"""The budget admission check's controller: watch Kueue Workloads, decide each one whose quota is
reserved on a gated ClusterQueue, write the ``parkbrake-budget`` check's state, release reservations
of Workloads that finished, were evicted or deleted, and send a tenant's admitted Workloads back
(``Retry``, which Kueue evicts) when its budget's ``stop`` action fires.

One list + watch (from the list's resourceVersion, again after a dropped connection, listed anew
after a 410) feeds worker threads; a Workload always goes to the same worker (by uid), so its
events are handled in order, and each worker holds one ledger connection (its own LedgerStore).
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.k8s.admission import ACTOR, KIND_OF_STATE, BudgetCheck, CheckDecision
from cli.k8s.api import NODE_CLAIMS, WORKLOADS, ApiError, KubernetesApi, workload_path
from cli.k8s.workload import BUDGET_CHECK, WorkloadError, check_entry, condition, workload_request
from cli.options import output_option, project_dir_option, stack_option
from guardrails.decisions import Decision
from guardrails.runway import budget_decisions

if TYPE_CHECKING:
    from cli.k8s.workload import WorkloadRequest
    from guardrails.pricing import PriceTable
    from stacks.config import StackConfig

Clock = Callable[[], datetime]
STOP_RETRY = timedelta(hours=1)


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_patch(
    workload: dict[str, Any], state: str, message: str, now: datetime, requeue_after: timedelta | None
) -> dict[str, Any]:
    """A merge patch of ``status.admissionChecks`` with the budget check's entry set (the list is a map
    keyed by name, which a merge patch replaces whole: the other checks' entries are kept as read). The
    resourceVersion makes it conditional: a Workload changed since it was read answers 409."""
    entry: dict[str, Any] = {
        "name": BUDGET_CHECK,
        "state": state,
        "message": message[:32768],
        "lastTransitionTime": stamp(now),
    }
    if requeue_after is not None:
        entry["requeueAfterSeconds"] = int(requeue_after.total_seconds())
    entries = [
        entry if item.get("name") == BUDGET_CHECK else item
        for item in (workload.get("status") or {}).get("admissionChecks") or []
    ]
    return {
        "metadata": {"resourceVersion": workload["metadata"]["resourceVersion"]},
        "status": {"admissionChecks": entries},
    }


class Controller:
    def __init__(
        self,
        api: KubernetesApi,
        config: StackConfig,
        prices: PriceTable,
        checks: Sequence[BudgetCheck],
        *,
        clock: Clock | None = None,
    ) -> None:
        if len(checks) < 2:
            raise ValueError("the controller needs one check per worker and one for the budget sweep")
        self.api, self.config, self.prices = api, config, prices
        self.workers, self.sweeper = list(checks[:-1]), checks[-1]
        self.clock = clock or (lambda: datetime.now(UTC))
        self.queues: list[queue.Queue[tuple[str, dict[str, Any]] | None]] = [
            queue.Queue() for _ in self.workers
        ]
        self.lock = threading.Lock()
        self.admitted: dict[str, dict[str, dict[str, Any]]] = {}  # tenant → uid → Workload (Ready)
        self.released: set[str] = set()  # uids already given back: a finished Workload's events add nothing
        self.outcomes: queue.Queue[tuple[str, str]] = queue.Queue()  # (Workload name, what was done)
        self.threads: list[threading.Thread] = []

    # --- the watch --------------------------------------------------------------------------------

    def dispatch(self, kind: str, workload: dict[str, Any]) -> None:
        uid = str(workload.get("metadata", {}).get("uid", ""))
        self.queues[zlib.crc32(uid.encode()) % len(self.queues)].put((kind, workload))

    def watch(self, stop: threading.Event, *, timeout_seconds: int = 300, backoff: float = 1.0) -> None:
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    items, version = self.api.list(WORKLOADS)
                    for item in items:
                        self.dispatch("ADDED", item)
                for event in self.api.watch(WORKLOADS, version, timeout_seconds=timeout_seconds):
                    version = str(event["object"]["metadata"]["resourceVersion"])
                    if event["type"] != "BOOKMARK":
                        self.dispatch(event["type"], event["object"])
                    if stop.is_set():
                        return
            except ApiError as error:
                if error.status == 410:  # the version is compacted away: list again
                    version = None
                    continue
                self._report("watch", str(error))
                stop.wait(backoff)
            except (OSError, ValueError) as error:  # a dropped or garbled stream: watch again from version
                self._report("watch", f"reconnecting: {error}")
                stop.wait(backoff)

    def start(self, stop: threading.Event, *, stop_every: timedelta = timedelta(minutes=1)) -> None:
        for index, check in enumerate(self.workers):
            self.threads.append(threading.Thread(target=self._work, args=(index, check), daemon=True))
        self.threads.append(threading.Thread(target=self._sweep, args=(stop, stop_every), daemon=True))
        self.threads.append(threading.Thread(target=self.watch, args=(stop,), daemon=True))
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        for work in self.queues:
            work.put(None)

    def _work(self, index: int, check: BudgetCheck) -> None:
        while (item := self.queues[index].get()) is not None:
            kind, workload = item
            try:
                self.handle(check, kind, workload)
            except Exception as error:  # one Workload's failure must not end the worker
                self._report(workload.get("metadata", {}).get("name", "?"), repr(error))

    def _sweep(self, stop: threading.Event, every: timedelta) -> None:
        while not stop.wait(every.total_seconds()):
            for name, duty in (("budget sweep", self.enforce_stops), ("node reclaim", self.reclaim_nodes)):
                try:
                    duty()
                except Exception as error:
                    self._report(name, repr(error))

    def reclaim_nodes(self) -> list[str]:
        """Delete the NodeClaims of the stack's NodePools past their cap and drain (cli/k8s/reclaim.py),
        each a ``stop`` decision of its instance; the names deleted."""
        from cli.k8s.reclaim import overdue_nodeclaims
        from stacks.kubernetes_config import kubernetes_config, nodepool_name

        caps = {nodepool_name(p.tenant, p.name): p.max_runtime for p in self.config.pools.values()}
        grace = kubernetes_config(self.config).termination_grace_period
        claims, _ = self.api.list(NODE_CLAIMS)
        now = self.clock()
        deleted = []
        for reclaim in overdue_nodeclaims(claims, caps, grace, now):
            try:
                self.api.delete(f"{NODE_CLAIMS}/{reclaim.nodeclaim}")
            except ApiError as error:
                if error.status != 404:
                    raise
            details = {
                "action": "delete-nodeclaim",
                "nodeclaim": reclaim.nodeclaim,
                "nodepool": reclaim.nodepool,
            }
            tenant = next(
                (
                    p.tenant
                    for p in self.config.pools.values()
                    if nodepool_name(p.tenant, p.name) == reclaim.nodepool
                ),
                None,
            )
            self.sweeper.decisions.append(
                [
                    Decision(
                        "stop",
                        ACTOR,
                        reclaim.reason,
                        now,
                        reclaim.instance_id or f"nodeclaim/{reclaim.nodeclaim}",
                        tenant,
                        details,
                    )
                ],
                origin=f"k8s:nodeclaim:{reclaim.nodeclaim}",
            )
            deleted.append(reclaim.nodeclaim)
        return deleted

    def _report(self, subject: str, message: str) -> None:
        print(json.dumps({"controller": subject, "error": message}), file=sys.stderr)
        self.outcomes.put((subject, f"error: {message}"))

    # --- one Workload -------------------------------------------------------------------------------

    def handle(self, check: BudgetCheck, kind: str, workload: dict[str, Any]) -> str:
        """What one event of one Workload calls for; returns what was done (for logs and tests)."""
        entry = check_entry(workload)
        name = str(workload.get("metadata", {}).get("name", "?"))
        if entry is None:
            return self._done(name, "not gated")
        uid = str(workload["metadata"].get("uid", ""))
        reserved = condition(workload, "QuotaReserved") and "admission" in (workload.get("status") or {})
        # Evicted counts while the check is past Pending: Kueue resets the check to Pending when it
        # reserves quota again, and a Pending check with quota is decided, whatever the conditions say.
        gone = (
            "deleted" if kind == "DELETED"
            else "finished" if condition(workload, "Finished")
            else "evicted" if not reserved or (condition(workload, "Evicted") and entry.get("state") != "Pending")
            else None
        )  # fmt: skip
        if gone is not None:
            self._forget(uid)
            return self._done(name, self._release(check, workload, gone))
        if entry.get("state") == "Ready":
            tenant = str(workload["status"]["admission"]["clusterQueue"])
            with self.lock:
                self.admitted.setdefault(tenant, {})[uid] = workload
            return self._done(name, "ready")
        if entry.get("state") != "Pending":
            return self._done(name, f"left {entry.get('state')}")
        now = self.clock()
        try:
            request = workload_request(workload, self.config, self.prices)
        except WorkloadError as error:
            self._log_unreadable(check, workload, str(error), now)
            self._patch(workload, "Rejected", f"unreadable Workload: {error}", now, None)
            return self._done(name, "Rejected")
        decision = check.decide(request, now=now, version=str(workload["metadata"]["resourceVersion"]))
        self._patch(workload, decision.state, decision.message, now, decision.requeue_after)
        self.released.discard(uid)
        return self._done(name, decision.state)

    def _done(self, name: str, outcome: str) -> str:
        self.outcomes.put((name, outcome))
        return outcome

    def _forget(self, uid: str) -> None:
        with self.lock:
            for workloads in self.admitted.values():
                workloads.pop(uid, None)

    def _release(self, check: BudgetCheck, workload: dict[str, Any], why: str) -> str:
        uid = str(workload["metadata"].get("uid", ""))
        if uid in self.released:
            return f"{why}, released before"
        request = _subject(workload)
        released = check.release(request, now=self.clock(), why=why) if request else None
        self.released.add(uid)
        return f"{why}, released {released}" if released is not None else f"{why}, nothing held"

    def _patch(
        self, workload: dict[str, Any], state: str, message: str, now: datetime, requeue: timedelta | None
    ) -> None:
        meta = workload["metadata"]
        path = workload_path(meta["namespace"], meta["name"], status=True)
        for _attempt in range(3):
            try:
                self.api.merge_patch(path, check_patch(workload, state, message, now, requeue))
                return
            except ApiError as error:
                if error.status == 404:
                    return  # deleted meanwhile: its DELETED event releases what it held
                if error.status != 409:
                    raise
                workload = self.api.request("GET", workload_path(meta["namespace"], meta["name"]))
        raise ApiError(409, f"workload {meta['namespace']}/{meta['name']} kept changing; not patched")

    def _log_unreadable(
        self, check: BudgetCheck, workload: dict[str, Any], reason: str, now: datetime
    ) -> None:
        meta = workload["metadata"]
        queue_name = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
        details = {"uid": meta.get("uid"), "namespace": meta.get("namespace"), "name": meta.get("name")}
        check.decisions.append(
            [
                Decision(
                    KIND_OF_STATE["Rejected"], ACTOR, f"unreadable Workload: {reason}", now,
                    f"workload/{meta.get('namespace')}/{meta.get('name')}",
                    queue_name if queue_name in self.config.tenants else None, details,
                )
            ],
            origin=f"k8s:{meta.get('uid')}:{meta.get('resourceVersion')}",
        )  # fmt: skip

    # --- the budget's stop action ------------------------------------------------------------------

    def enforce_stops(self) -> list[str]:
        """Send the admitted Workloads of each tenant whose budget's ``stop`` fires back (Retry: Kueue
        evicts them and the finished reservation is released); the names sent back."""
        with self.lock:
            tenants = sorted(tenant for tenant, workloads in self.admitted.items() if workloads)
        if not tenants:
            return []
        now = self.clock()
        check = self.sweeper
        sent: list[str] = []
        for status in check.store.runways(now=now, default_cap=check.default_cap, tenants=tenants):
            stops = [decision for decision in budget_decisions(status) if decision.action == "stop"]
            if not stops:
                continue
            with self.lock:
                workloads = list(self.admitted.get(status.tenant, {}).values())
            for workload in workloads:
                message = f"budget stop: {stops[0].reason}"
                self._patch(workload, "Retry", message, now, STOP_RETRY)
                request = _subject(workload)
                if request is not None:
                    decision = CheckDecision("Retry", message, request, requeue_after=STOP_RETRY)
                    check._log(decision, now=now, version=f"stop:{status.period_start.isoformat()}")
                self._forget(str(workload["metadata"]["uid"]))
                sent.append(str(workload["metadata"]["name"]))
        return sent


def _subject(workload: dict[str, Any]) -> WorkloadRequest | None:
    """Enough of a Workload to find its reservation (uid, name, tenant), however little else it says."""
    from cli.k8s.workload import WorkloadRequest

    meta = workload.get("metadata") or {}
    tenant = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or (
        workload.get("spec") or {}
    ).get("queueName")
    if not meta.get("uid"):
        return None
    return WorkloadRequest(
        str(meta["uid"]), str(meta.get("namespace")), str(meta.get("name")), str(tenant or "-"),
        "", 0, 0, 0, timedelta(0), "", "",
    )  # fmt: skip


def run_forever(controller: Controller, *, stop_every: timedelta, output: str = "text") -> None:
    """Run until SIGTERM or Ctrl-C (a Deployment's rollout ends the old pod with SIGTERM), printing
    what was done with each Workload: a line each, or (json) one JSON object a line."""
    import signal

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    controller.start(stop, stop_every=stop_every)
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


def api_from_options(server: str | None, token_file: Path | None, ca_file: Path | None) -> KubernetesApi:
    """``--server`` (with its token and CA files), else the pod's own service account."""
    import os

    if server is None:
        return KubernetesApi.in_cluster(os.environ)
    token = token_file.read_text().strip() if token_file else None
    return KubernetesApi(server, token=token, ca_file=str(ca_file) if ca_file else None)


server_options = [
    click.option("--server", help="The API server's URL (default: in a pod, the pod's cluster)."),
    click.option(
        "--token-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="A bearer token for --server (in a pod: the service account's).",
    ),
    click.option(
        "--ca-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="The CA bundle that signed --server's certificate.",
    ),
]


def with_server_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(server_options):
        command = option(command)
    return command


@click.command()
@stack_option
@project_dir_option
@with_server_options
@click.option(
    "--workers", default=4, show_default=True, type=click.IntRange(1, 64),
    help="Threads deciding Workloads, each with one ledger connection (one more for the budget sweep).",
)  # fmt: skip
@click.option(
    "--stop-every", default="1m", show_default=True,
    help="How often tenants' budgets are checked for their stop action.",
)  # fmt: skip
@output_option
def controller(
    *, stack: str, project_dir: Path, server: str | None, token_file: Path | None, ca_file: Path | None,
    workers: int, stop_every: str, output: str,
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
    from guardrails.durations import parse_duration

    config, prices = kubernetes_stack(stack, project_dir)
    api = api_from_options(server, token_file, ca_file)
    checks = [budget_check(config) for _ in range(workers + 1)]
    every = parse_duration(stop_every)
    click.echo(f"parkbrake-budget controller: {workers} workers watching {api.host}", err=True)
    try:
        run_forever(Controller(api, config, prices, checks), stop_every=every, output=output)
    finally:
        for check in checks:
            check.store.close()
