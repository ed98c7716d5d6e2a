"""A real Valkey or Redis server on 127.0.0.1 for the idempotency store's tests: skipped only off CI."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

SERVERS = ("valkey-server", "redis-server")


def server_binary() -> str:
    """valkey-server, else redis-server; CI (``.ci/run``) installs one, so under CI a missing one fails."""
    for name in SERVERS:
        found = shutil.which(name)
        if found is not None:
            return found
    if os.environ.get("CI"):
        pytest.fail(
            "no valkey-server or redis-server: .ci/run installs it with `apt-get install -y redis-server`"
        )
    pytest.skip("no valkey-server or redis-server here (apt-get install redis-server); CI runs these tests")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def redis_server() -> Iterator[str]:
    """Starts a throwaway server (no persistence) and yields its URL; stops it at the end."""
    binary = server_binary()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="parkbrake-redis-") as folder:
        arguments = ["--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
        process = subprocess.Popen(
            [binary, *arguments, "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            client = redis.Redis.from_url(url)
            for _ in range(200):  # up to 10 s for the server to listen
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if process.poll() is not None:
                        _, errors = process.communicate()
                        raise AssertionError(f"{binary} exited: {errors!r}") from None
                    time.sleep(0.05)
            client.close()
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)
