"""The FAKE Kubernetes API server (tests/cli/k8s/fake_api_server.py) in a process of its own, for the
controller's benchmark: there the API server's work (TLS, JSON, the watch streams) does not share the
controller's interpreter, as a cluster's API server never does.

:func:`fake_api_process` starts a ``multiprocessing`` manager (spawned: a fresh interpreter, not a
fork of one with threads) that holds one :class:`FakeApiServer` and forwards the methods a driver
needs (``EXPOSED``) over a local socket; ``put_all`` writes a batch in one call, as Kueue's own
process would, so that none of Kueue's part runs in the driver's interpreter.
``time.monotonic`` is the system's CLOCK_MONOTONIC on Linux, so the times ``patches_after`` returns
compare with the caller's own.
"""

from __future__ import annotations

import multiprocessing
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.managers import BaseManager
from pathlib import Path
from typing import Any

from tests.cli.k8s.fake_api_server import FakeApiServer

EXPOSED = (
    "put", "put_all", "get", "pid", "patch_count", "patches_after", "patched_after", "drop_watches", "address",
)  # fmt: skip


def _served(directory: str) -> FakeApiServer:
    return FakeApiServer(Path(directory))


class FakeApiProcess(BaseManager):
    """The manager process the fake runs in."""


FakeApiProcess.register("FakeApiServer", _served, exposed=EXPOSED)


@contextmanager
def fake_api_process() -> Iterator[Any]:
    """A proxy of a FakeApiServer running in another process (its methods in ``EXPOSED``)."""
    with tempfile.TemporaryDirectory(prefix="fake-kube-") as directory:
        manager = FakeApiProcess(ctx=multiprocessing.get_context("spawn"))
        manager.start()
        try:
            fake = manager.FakeApiServer(directory)  # type: ignore[attr-defined]
            yield fake
            fake.drop_watches()
        finally:
            manager.shutdown()
