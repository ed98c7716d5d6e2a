"""Fair shares of the service between tenants and between short and long requests.

- :class:`TenantSlots`: at most ``PARKBRAKE_INFERENCE_TENANT_WORKERS`` of a tenant's requests run
  the model at once; the rest wait their turn on the event loop, in arrival order, holding no worker
  and no thread. So one tenant's burst (or its retries of a long request) leaves workers free for
  the others, whose requests start at once. Used on the event loop only (no locks): a tenant's
  semaphore exists while it has a request running or waiting, so the table holds only active
  tenants however many there are.
- :class:`LongRuns`: a run of more than ``LONG_RUN_TOKENS`` runs on a thread of lower CPU priority,
  so a short request beside it (another tenant's one sentence) gets the cores first instead of
  sharing them equally with it. On a GPU the pass itself is on the device; the CPU side (tokenizing,
  encoding the response) still yields.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import anyio
from prometheus_client import Gauge


@dataclass
class _Share:
    slots: anyio.Semaphore
    users: int = 0  # running or waiting for a slot


class TenantSlots:
    def __init__(self, per_tenant: int, waiting: Gauge) -> None:
        self._per_tenant = per_tenant
        self._waiting = waiting  # requests waiting for a slot now
        self._shares: dict[str, _Share] = {}

    @asynccontextmanager
    async def hold(self, tenant: str) -> AsyncIterator[None]:
        """One of ``tenant``'s slots for the block; waits on the event loop while all are taken."""
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = _Share(anyio.Semaphore(self._per_tenant))
        share.users += 1
        queued = share.slots.value == 0
        if queued:
            self._waiting.inc()
        try:
            try:
                await share.slots.acquire()
            finally:
                if queued:
                    self._waiting.dec()
            try:
                yield
            finally:
                share.slots.release()
        finally:
            share.users -= 1
            if share.users == 0:
                del self._shares[tenant]


T = TypeVar("T")
# Runs whose texts may hold more tokens than this (most_tokens' bound: a batch of eight full inputs)
# run at lower priority; a one-sentence request is about twenty.
LONG_RUN_TOKENS = 2048
LONG_RUN_NICE = 10


class LongRuns:
    """Threads for long runs, each at nice ``LONG_RUN_NICE`` for its whole life (an unprivileged
    process may raise a thread's nice value but never lower it again, so the threads are kept for
    long runs alone rather than lent back to the workers). Linux keeps the nice value per thread:
    ``setpriority(PRIO_PROCESS, tid)`` changes that thread only (man 2 setpriority, NOTES / BUGS);
    elsewhere the call fails and the runs keep the process's priority."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="long-run", initializer=_lower_priority
        )

    def run(self, work: Callable[[], T]) -> T:
        """``work`` on a low-priority thread; this thread (the request's worker) waits for it."""
        return self._pool.submit(work).result()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False)


def _lower_priority() -> None:
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LONG_RUN_NICE)
