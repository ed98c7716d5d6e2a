"""Each tenant's share of the workers: at most ``PARKBRAKE_INFERENCE_TENANT_WORKERS`` of its requests
run the model at once; the rest wait their turn on the event loop, in arrival order, holding no
worker and no thread. So one tenant's burst (or its retries of a long request) leaves workers free for
the others, whose requests start at once.

Used on the event loop only (no locks): a tenant's semaphore exists while it has a request running
or waiting, so the table holds only active tenants however many there are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

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
