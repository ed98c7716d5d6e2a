"""Fairness under retries and the largest request, for ``python -m benchmarks.inference --fairness``
and ``--largest``.

Fairness: one tenant sends one long request with an ``Idempotency-Key`` and 35 clients retry it
with the same key, each sending again at once when answered 409, until it is done; meanwhile another
tenant sends one-sentence requests one after another. Their latency is set against the same series
with the service otherwise idle, measured in the same run, before and after the storm (target: the
median under the storm ≤ 2× unloaded). With ``--compare CHECKOUT`` the same is measured on that
checkout's service too (the service before the retries were moved off the workers).

Largest: one request of the largest size the token ceiling admits (1,171 inputs of 256 tokens:
299,776 ≤ ``PARKBRAKE_INFERENCE_MAX_REQUEST_TOKENS``), timed end to end through the service.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from services.inference.api import most_tokens
from services.inference.model import MAX_TOKENS

SENTENCE = "The sweep stopped the GPU host at its deadline and the ledger billed 90 seconds."
# 254 bytes, 256 tokens (each letter and comma is one, with [CLS] and [SEP]): as long as an input
# runs, and as many tokens as most_tokens' bound gives it.
LONG_TEXT = "a," * 127
RETRIES = 35


def send(url: str, api_key: str, inputs: list[str], idempotency_key: str | None = None) -> tuple[int, float]:
    """Status and seconds of one request (error statuses returned, not raised)."""
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    body = json.dumps({"model": "all-MiniLM-L6-v2", "input": inputs}).encode()
    request = urllib.request.Request(url + "/v1/embeddings", data=body, headers=headers)
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=900) as response:
            response.read()
            return response.status, time.perf_counter() - started
    except urllib.error.HTTPError as error:
        error.read()
        return error.code, time.perf_counter() - started


def one_sentence_series(
    url: str, api_key: str, samples: int, until: threading.Event | None = None
) -> list[float]:
    """Sequential one-sentence requests (20 ms apart); stops early when ``until`` is set."""
    latencies = []
    for index in range(samples):
        if until is not None and until.is_set():
            break
        status, seconds = send(url, api_key, [f"{SENTENCE} ({index})"])
        assert status == 200, status
        latencies.append(seconds)
        time.sleep(0.02)
    return latencies


def fairness(
    url: str, retrying_key: str, other_key: str, *, samples: int, long_inputs: int
) -> dict[str, Any]:
    """The other tenant's latency, unloaded and under one tenant's retry storm, in one run."""
    one_sentence_series(url, other_key, 10)  # warm
    load_before = os.getloadavg()[0]
    unloaded = one_sentence_series(url, other_key, samples)
    done = threading.Event()
    key, long_request = str(uuid.uuid4()), [LONG_TEXT] * long_inputs
    statuses: list[int] = []

    def original() -> None:
        statuses.append(send(url, retrying_key, long_request, key)[0])
        done.set()

    def retry() -> None:
        while not done.is_set():
            status, _ = send(url, retrying_key, long_request, key)
            if status != 409:  # the stored response: the storm is over for this client
                return

    threads = [threading.Thread(target=original)]
    threads[0].start()
    time.sleep(0.5)  # the original holds the key
    threads += [threading.Thread(target=retry) for _ in range(RETRIES)]
    for thread in threads[1:]:
        thread.start()
    time.sleep(0.5)  # the retries are waiting
    load_during = os.getloadavg()[0]
    storm_started = time.perf_counter()
    loaded = one_sentence_series(url, other_key, samples, until=done)
    measured_for = time.perf_counter() - storm_started
    still_running = not done.is_set()
    for thread in threads:
        thread.join()
    unloaded_after = one_sentence_series(url, other_key, samples)
    baseline = statistics.median(unloaded + unloaded_after)
    return {
        "long_request_inputs": long_inputs,
        "retrying_clients": RETRIES,
        "long_request_status": statuses[0] if statuses else None,
        "other_tenant_samples_unloaded": len(unloaded) + len(unloaded_after),
        "other_tenant_samples_under_storm": len(loaded),
        "storm_outlasted_the_series": still_running,
        "seconds_measured_under_storm": round(measured_for, 2),
        "p50_ms_unloaded": round(baseline * 1000, 2),
        "p50_ms_under_storm": round(statistics.median(loaded) * 1000, 2),
        "max_ms_under_storm": round(max(loaded) * 1000, 2),
        "p50_ratio_under_storm_vs_unloaded": round(statistics.median(loaded) / baseline, 3),
        "load_average_before": round(load_before, 2),
        "load_average_during": round(load_during, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
    }


def largest(url: str, api_key: str, ceiling: int) -> dict[str, Any]:
    """One request of the largest size the token ceiling admits, end to end."""
    inputs = [LONG_TEXT] * (ceiling // MAX_TOKENS)
    assert most_tokens(inputs) <= ceiling < most_tokens([*inputs, LONG_TEXT])
    load_before = os.getloadavg()[0]
    status, seconds = send(url, api_key, inputs)
    return {
        "inputs": len(inputs),
        "tokens_at_most": most_tokens(inputs),
        "status": status,
        "seconds": round(seconds, 1),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
