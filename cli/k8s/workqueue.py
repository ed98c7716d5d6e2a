"""A work queue of keys, as client-go's (``k8s.io/client-go/util/workqueue``): a key queued twice is
queued once; a key is never handed to two workers at once (one added while it is worked on is
handed out again when that work is done); a failed key comes back after a per-key exponential
backoff, a succeeded one forgets its failures; a key can be added after a delay (a resync, a
requeue)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class WorkQueue(Generic[Key]):
    def __init__(
        self,
        *,
        base_delay: float = 0.05,
        max_delay: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_delay, self.max_delay, self.clock = base_delay, max_delay, clock
        self.condition = threading.Condition()
        self.queue: deque[Key] = deque()
        self.dirty: set[Key] = set()  # queued, or to be queued again when done
        self.processing: set[Key] = set()
        self.failures: dict[Key, int] = {}
        self.waiting: list[tuple[float, int, Key]] = []  # (when, tiebreak, key) added after a delay
        self.order = itertools.count()
        self.shut = False

    def __len__(self) -> int:
        with self.condition:
            return len(self.queue)

    def add(self, key: Key) -> None:
        with self.condition:
            if self.shut or key in self.dirty:
                return
            self.dirty.add(key)
            if key not in self.processing:
                self.queue.append(key)
                self.condition.notify()

    def add_after(self, key: Key, delay: float) -> None:
        if delay <= 0:
            return self.add(key)
        with self.condition:
            heapq.heappush(self.waiting, (self.clock() + delay, next(self.order), key))
            self.condition.notify()

    def add_rate_limited(self, key: Key) -> float:
        """Add ``key`` after its backoff (base x 2^failures, at most max); the delay."""
        with self.condition:
            failures = self.failures.get(key, 0)
            self.failures[key] = failures + 1
        delay = min(self.base_delay * 2**failures, self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        with self.condition:
            self.failures.pop(key, None)

    def get(self, timeout: float | None = None) -> Key | None:
        """The next key to work on (None: shut down, or nothing within ``timeout``)."""
        deadline = None if timeout is None else self.clock() + timeout
        with self.condition:
            while True:
                self._promote()
                if self.queue:
                    key = self.queue.popleft()
                    self.processing.add(key)
                    self.dirty.discard(key)
                    return key
                if self.shut:
                    return None
                wait = self.waiting[0][0] - self.clock() if self.waiting else 1.0
                if deadline is not None:
                    if self.clock() >= deadline:
                        return None
                    wait = min(wait, deadline - self.clock())
                self.condition.wait(max(wait, 0.001))

    def done(self, key: Key) -> None:
        with self.condition:
            self.processing.discard(key)
            if key in self.dirty:
                self.queue.append(key)
                self.condition.notify()

    def shutdown(self) -> None:
        with self.condition:
            self.shut = True
            self.condition.notify_all()

    def _promote(self) -> None:
        now = self.clock()
        while self.waiting and self.waiting[0][0] <= now:
            _, _, key = heapq.heappop(self.waiting)
            if key not in self.dirty:
                self.dirty.add(key)
                if key not in self.processing:
                    self.queue.append(key)
