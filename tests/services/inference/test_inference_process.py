"""``parkbrake-inference`` as a process: killed mid-request, drained on SIGTERM, its revision, its ports."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.services.inference.conftest import Reply, call, model_passes

CONSOLE_SCRIPT = Path(sys.executable).with_name("parkbrake-inference")
# About 2,000 tokens in one pass: long enough (seconds on a CPU) to act while it runs.
SLOW = {"model": "all-MiniLM-L6-v2", "input": [" ".join(["accelerator"] * 300)] * 8}


@contextmanager
def service_process(
    database: str, onnx_file: Path, *arguments: str, **environment: str
) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    env = os.environ | {
        "PARKBRAKE_DATABASE_URL": database,
        "PARKBRAKE_INFERENCE_MODEL": str(onnx_file),
        "PARKBRAKE_REVISION": "0123abc",
        "PARKBRAKE_INFERENCE_METRICS_PORT": "0",
    }
    process = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "--host", "127.0.0.1", "--port", "0", *arguments],
        env=env | environment,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        listening = json.loads(process.stdout.readline())
        url = listening["listening"]
        for _ in range(1200):
            if call(url, "/healthz").status == 200:
                break
            threading.Event().wait(0.05)
        yield process, url, listening["metrics"]
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def claim_state(database: str, key: str) -> str | None:
    with psycopg.connect(database) as connection:
        row = connection.execute("SELECT state FROM inference_idempotency WHERE key = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def wait_for_claim(database: str, key: str) -> None:
    for _ in range(2000):
        if claim_state(database, key) == "running":
            return
        threading.Event().wait(0.005)
    raise AssertionError(f"the request with key {key} never claimed it")


def send_until_killed(url: str, headers: dict[str, str]) -> None:
    with contextlib.suppress(OSError):  # the server dies under it: the connection drops
        call(url, "/v1/embeddings", body=SLOW, headers=headers)


def send_in_background(url: str, api_key: str, idempotency_key: str) -> Callable[[], Reply]:
    replies: list[Reply] = []
    headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": idempotency_key}
    thread = threading.Thread(
        target=lambda: replies.append(call(url, "/v1/embeddings", body=SLOW, headers=headers))
    )
    thread.start()

    def result() -> Reply:
        thread.join(timeout=120)
        return replies[0]

    return result


def test_a_worker_killed_mid_request_leaves_a_claim_that_lapses_and_the_retry_runs_once(
    service_database: str, onnx_file: Path, tenant_key: Callable[[str], str]
):
    api_key, idempotency_key = tenant_key("killed"), str(uuid.uuid4())
    headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": idempotency_key}
    settings = {"PARKBRAKE_INFERENCE_LEASE": "2s", "PARKBRAKE_INFERENCE_WAIT": "1s"}
    with service_process(service_database, onnx_file, **settings) as (doomed, url, _):
        threading.Thread(target=send_until_killed, args=(url, headers), daemon=True).start()
        wait_for_claim(service_database, idempotency_key)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
    assert claim_state(service_database, idempotency_key) == "running"  # killed mid-pass

    with service_process(service_database, onnx_file, **settings) as (_, url, metrics_url):
        retry = call(url, "/v1/embeddings", body=SLOW, headers=headers)
        for _ in range(20):  # 409 while the 2 s lease has not lapsed (each waits 1 s)
            if retry.status != 409:
                break
            retry = call(url, "/v1/embeddings", body=SLOW, headers=headers)
        final = call(url, "/v1/embeddings", body=SLOW, headers=headers)
        passes = model_passes(metrics_url)

    assert retry.status == 200
    assert "Idempotent-Replayed" not in retry.headers
    assert final.body == retry.body
    assert final.headers["Idempotent-Replayed"] == "true"
    assert passes == 1


def test_sigterm_drains_in_flight_requests_and_refuses_new_ones(
    service_database: str, onnx_file: Path, tenant_key: Callable[[str], str]
):
    api_key, idempotency_key = tenant_key("drain"), str(uuid.uuid4())
    with service_process(service_database, onnx_file, PARKBRAKE_INFERENCE_DRAIN="60s") as (process, url, _):
        assert call(url, "/version").json() == {"revision": "0123abc"}
        in_flight = send_in_background(url, api_key, idempotency_key)
        wait_for_claim(service_database, idempotency_key)
        process.send_signal(signal.SIGTERM)
        for _ in range(200):  # the signal is handled asynchronously: wait until the host says it drains
            health = call(url, "/healthz")
            if health.status == 503:
                break
        refused = call(url, "/v1/embeddings", body=SLOW, headers={"Authorization": f"Bearer {api_key}"})
        finished = in_flight()
        exit_code = process.wait(timeout=60)

    assert refused.status == 503
    assert refused.headers["Connection"] == "close"
    assert health.status == 503
    assert health.json() == {"status": "draining"}
    assert finished.status == 200
    assert len(finished.json()["data"]) == 8
    assert claim_state(service_database, idempotency_key) == "done"
    assert exit_code == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_metrics_port_flag_wins_over_the_variable_and_serves_metrics_there(
    service_database: str, onnx_file: Path
):
    flag_port, variable_port = free_port(), free_port()
    with service_process(
        service_database,
        onnx_file,
        "--metrics-port",
        str(flag_port),
        PARKBRAKE_INFERENCE_METRICS_PORT=str(variable_port),
    ) as (_, url, metrics_url):
        scraped = call(f"http://127.0.0.1:{flag_port}", "/metrics")
        on_the_api_port = call(url, "/metrics")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", variable_port), timeout=5):
            raise AssertionError(f"something listens on the variable's port {variable_port}")

    assert metrics_url == f"http://127.0.0.1:{flag_port}"
    assert scraped.status == 200
    assert "parkbrake_inference_requests_total" in scraped.body.decode()
    assert on_the_api_port.status == 404


@pytest.mark.parametrize("value", ["70000", "-1", "9464x", "²"])
def test_a_bad_metrics_port_flag_is_one_line_and_exit_2(value: str):
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "--metrics-port", value],
        check=False,
        env=os.environ | {"PARKBRAKE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: Invalid value for '--metrics-port': {value!r} is not a TCP port (0–65535; 0 picks a free one)"
    ]
