"""The fake API server in its own process (the controller benchmark's form): a client in this process
reads and writes through it, and the driver sees every write, timed on this process's clock."""

from __future__ import annotations

import time
from pathlib import Path

from cli.k8s.kube import Workload, apply_check_entry, client_from_options
from tests.cli.k8s.fake_api_process import fake_api_process
from tests.cli.k8s.workloads import workload


def test_a_client_here_writes_through_the_other_process_and_the_driver_sees_it() -> None:
    with fake_api_process() as fake:
        stored = fake.put("workloads", workload("train"))
        url, token_file, ca_file = fake.address()
        client = client_from_options(url, Path(token_file), Path(ca_file))
        read = client.get(Workload, "train", namespace="research")
        before = time.monotonic()
        entry = {"name": "parkbrake-budget", "state": "Ready", "message": "budget admits",
                 "lastTransitionTime": "2036-05-05T10:00:00Z"}  # fmt: skip
        apply_check_entry(client, stored, entry)
        ((at, path, body),) = fake.patches_after(0)
        assert fake.patch_count() == 1
        assert fake.patches_after(1) == []
        assert read.metadata is not None
        assert read.metadata.uid == stored["metadata"]["uid"]
        assert before <= at <= time.monotonic()  # one clock for both processes (CLOCK_MONOTONIC)
        assert path.startswith("/apis/kueue.x-k8s.io/v1beta2/namespaces/research/workloads/train/status")
        assert body["status"]["admissionChecks"] == [entry]
        (written,) = [
            check
            for check in fake.get("workloads", "research", "train")["status"]["admissionChecks"]
            if check["name"] == "parkbrake-budget"
        ]
        assert written["state"] == "Ready"


def test_put_all_writes_each_in_turn_and_patched_after_leaves_the_bodies_behind() -> None:
    with fake_api_process() as fake:
        before = time.monotonic()
        times = fake.put_all("workloads", [workload(f"train-{n}") for n in range(3)])
        assert before <= times[0] <= times[1] <= times[2] <= time.monotonic()  # in turn, this clock
        stored = [fake.get("workloads", "research", f"train-{n}") for n in range(3)]
        assert len({document["metadata"]["uid"] for document in stored}) == 3  # each its own object
        url, token_file, ca_file = fake.address()
        client = client_from_options(url, Path(token_file), Path(ca_file))
        entry = {"name": "parkbrake-budget", "state": "Retry", "message": "budget short",
                 "lastTransitionTime": "2036-05-05T10:00:00Z"}  # fmt: skip
        for document in stored[1:]:
            apply_check_entry(client, document, entry)
        assert [path for _, path in fake.patched_after(0)] == [path for _, path, _ in fake.patches_after(0)]
        ((at, path),) = fake.patched_after(1)
        assert "/workloads/train-2/status" in path
        assert at == fake.patches_after(1)[0][0]
