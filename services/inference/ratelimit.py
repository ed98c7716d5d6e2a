"""A token bucket per API key, in this process: ``rate`` requests a second sustained, ``burst`` at once.

Each serving host keeps its own buckets, so a key's limit across the fleet is the per-host limit times
the hosts behind the load balancer (documented in docs/inference.md).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str) -> int:
        """0 when the request may go ahead, else the whole seconds to wait (``Retry-After``)."""
        with self._lock:
            now = self._clock()
            bucket = self._buckets.setdefault(key, _Bucket(tokens=float(self.burst), updated=now))
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0
            return max(1, math.ceil((1.0 - bucket.tokens) / self.rate))
