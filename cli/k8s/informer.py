"""One resource's list + watch into a cache, as client-go's informer: every object listed, then every
change watched from the list's resourceVersion, each handed to ``on_change`` (with the object as it
was last seen, for a deletion). A watch the server ends cleanly is resumed by lightkube from the last
resourceVersion seen; one that ends in any other way — a 410, a stream cut mid-chunk (IncompleteRead),
a socket error, a garbled line — lists again after a backoff (a list is also a full resync: every
object handed over again). The loop never ends but on ``stop``: the liveness probe watches its
thread."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import Any

from lightkube import Client

Handler = Callable[[str, dict[str, Any]], None]  # (ADDED | MODIFIED | DELETED | LISTED, object)


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Informer:
    def __init__(
        self,
        client: Client,
        resource: Any,
        on_change: Handler,
        *,
        watch_seconds: int = 300,
        max_backoff: float = 30.0,
    ) -> None:
        self.client, self.resource, self.on_change = client, resource, on_change
        self.watch_seconds, self.max_backoff = watch_seconds, max_backoff
        self.cache: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()  # set after the first list
        self.failures = 0  # watches ended by an error, for the metric and tests

    def items(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.cache.values())

    def get(self, key: tuple[str, str]) -> dict[str, Any] | None:
        with self.lock:
            return self.cache.get(key)

    def run(self, stop: threading.Event) -> None:
        backoff = 0.1
        while not stop.is_set():
            try:
                version = self.relist()
                backoff = 0.1
                self._watch(version, stop)
            except Exception as error:  # every way a list or watch can fail: list again
                self.failures += 1
                name = getattr(self.resource, "_api_info", None)
                print(json.dumps({"informer": str(name and name.plural), "error": repr(error)[:300]}),
                      file=sys.stderr)  # fmt: skip
                stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def relist(self) -> str:
        """List every object into the cache, handing each over; the list's resourceVersion."""
        listed = self.client.list(self.resource, **self._scope())
        objects = {object_key(dict(item)): _plain(item) for item in listed}
        with self.lock:
            gone = [self.cache[key] for key in self.cache.keys() - objects.keys()]
            self.cache = objects
        for obj in gone:
            self.on_change("DELETED", obj)
        for obj in objects.values():
            self.on_change("LISTED", obj)
        self.synced.set()
        return str(listed.resourceVersion)

    def _watch(self, version: str, stop: threading.Event) -> None:
        from lightkube.types import OnErrorAction, OnErrorResult

        def end(_error: Exception, _count: int) -> OnErrorResult:
            return OnErrorResult(OnErrorAction.RAISE)

        events = self.client.watch(
            self.resource, resource_version=version, server_timeout=self.watch_seconds, on_error=end,
            **self._scope(),
        )  # fmt: skip
        for kind, item in events:
            if stop.is_set():
                return
            if kind in {"BOOKMARK", "ERROR"}:
                continue
            obj = _plain(item)
            key = object_key(obj)
            with self.lock:
                if kind == "DELETED":
                    obj = self.cache.pop(key, obj)
                else:
                    self.cache[key] = obj
            self.on_change(kind, obj)

    def _scope(self) -> dict[str, Any]:
        from lightkube.core.resource import NamespacedResource

        return {"namespace": "*"} if issubclass(self.resource, NamespacedResource) else {}


def _plain(item: Any) -> dict[str, Any]:
    """The object as JSON decodes it (generic resources are dicts already)."""
    return item.to_dict() if hasattr(item, "to_dict") else dict(item)
