"""Claims kept alive while their request runs: a long model pass never outlives its lease.

A claim's lease lapses ``PARKBRAKE_INFERENCE_LEASE`` after it was taken, so that a worker that died
frees its key for the retry. A worker that is alive but slow (a request of many long inputs on a
CPU) must not lose its claim to a concurrent retry, which would run the model a second time: one
thread per server renews every claim held longer than a third of the lease, until the response is
stored or the claim released. Requests that finish within a third of the lease (nearly all) cost a
dictionary entry, no round trip.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from lambdas.ledger.connections import LedgerUnavailable
from services.inference.idempotency import IdempotencyStore, Scope
from services.inference.metrics import ServiceMetrics

log = logging.getLogger("parkbrake.inference")


@dataclass
class _Held:
    scope: Scope
    owner: uuid.UUID
    renew_at: float  # time.monotonic()


class LeaseKeeper:
    def __init__(
        self,
        store: IdempotencyStore,
        lease: timedelta,
        metrics: ServiceMetrics,
        now: Callable[[], datetime],
    ) -> None:
        self._store, self._metrics, self._now = store, metrics, now
        self._every = lease.total_seconds() / 3
        self._held: dict[int, _Held] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopped = False
        self._thread: threading.Thread | None = None

    def hold(self, scope: Scope, owner: uuid.UUID) -> int:
        """Keep ``owner``'s claim on ``scope`` alive until :meth:`drop` with the returned token."""
        token = next(self._tokens)
        with self._lock:
            self._held[token] = _Held(scope, owner, time.monotonic() + self._every)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._renew_forever, name="lease-keeper", daemon=True)
                self._thread.start()
        return token

    def drop(self, token: int) -> None:
        with self._lock:
            self._held.pop(token, None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._wake.notify_all()

    def held(self) -> int:
        with self._lock:
            return len(self._held)

    def _renew_forever(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                moment = time.monotonic()
                due = [(token, held) for token, held in self._held.items() if held.renew_at <= moment]
                next_at = min((held.renew_at for held in self._held.values()), default=moment + self._every)
                if not due:
                    self._wake.wait(timeout=max(0.01, min(self._every, next_at - moment)))
                    continue
            for token, held in due:
                self._renew(token, held)

    def _renew(self, token: int, held: _Held) -> None:
        try:
            kept = self._store.renew(held.scope, held.owner, self._now())
        except LedgerUnavailable:
            # Tried again at the next round, a third of the lease later: one failure costs nothing
            # while the lease has two thirds left.
            self._metrics.lease_renewal_errors.inc()
            log.exception("could not renew the claim on %r", held.scope.key)
            with self._lock:
                held.renew_at = time.monotonic() + self._every
            return
        with self._lock:
            if token not in self._held:
                return
            if kept:
                self._metrics.lease_renewals.inc()
                held.renew_at = time.monotonic() + self._every
            else:  # lapsed and taken over: the result will not be stored (lost_claims counts it)
                del self._held[token]
