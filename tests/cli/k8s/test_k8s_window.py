"""``parkbrake k8s window`` against the FAKE API server: the nightly pool's NodePool opened in its window,
closed (limit "0", its nodes deleted) outside it and on closed days, left alone while parked by
``park --now``; and the eks stack rendered with a nightly schedule: the CronJob that runs it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from click.testing import CliRunner
from holiday_calendar import CHRISTMAS, ics

from cli.k8s.api import KubernetesApi
from cli.k8s.park import park_now
from cli.k8s.window import apply_window
from cli.main import parkbrake
from guardrails.pricing import PriceTable
from stacks.config import NightlyConfig, StackConfig
from stacks.kubernetes_objects import kubernetes_objects
from stacks.kubernetes_validation import validate_object
from stacks.offline import run_offline
from stacks.platform import build_platform
from tests.cli.k8s.conftest import REPOSITORY
from tests.cli.k8s.fake_api_server import FakeApiServer, fake_api_server
from tests.cli.k8s.test_k8s_park import claim, put_cluster

OPEN = datetime.fromisoformat("2025-01-14T03:00:00+00:00")  # 02:00 + 1h, within research-training's 8h
CLOSED = datetime.fromisoformat("2025-01-14T12:00:00+00:00")


def nightly(config: StackConfig, calendar: str | None = None) -> StackConfig:
    return dataclasses.replace(config, nightly=NightlyConfig("training", "0 2 * * *", "UTC", 2, calendar))


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with fake_api_server() as server:
        put_cluster(server)
        server.put("nodeclaims", claim("research-training-b3c4d", "research-training"))
        yield server


def api_of(fake: FakeApiServer) -> KubernetesApi:
    return KubernetesApi(fake.url, token=fake.token_file.read_text(), ca_file=str(fake.ca_file))


def limit(fake: FakeApiServer) -> Any:
    return fake.get("nodepools", "", "research-training")["spec"]["limits"]["nvidia.com/gpu"]


def test_open_sets_the_nightly_capacity_and_closed_sets_0_and_deletes_its_nodes(
    fake: FakeApiServer, eks: StackConfig, prices: PriceTable
) -> None:
    config = nightly(eks)

    window, opened = apply_window(api_of(fake), config, prices, OPEN, dry_run=False)

    assert window.open
    assert limit(fake) == "8"  # 2 nodes x 4 GPUs of g5.12xlarge
    assert opened.nodeclaims == []

    window, closed = apply_window(api_of(fake), config, prices, CLOSED, dry_run=False)

    assert not window.open
    assert limit(fake) == "0"
    assert sorted(closed.nodeclaims) == ["research-training-b3c4d", "research-training-x7k2p"]
    assert "product-inference-a1b2c" not in fake.deleted  # another pool's nodes stay
    _, again = apply_window(api_of(fake), config, prices, CLOSED, dry_run=False)
    assert [item.status for item in again.objects] == ["unchanged"]


def test_a_closed_day_keeps_the_pool_closed_and_a_dry_run_changes_nothing(
    fake: FakeApiServer, eks: StackConfig, prices: PriceTable
) -> None:
    config = nightly(eks, ics(CHRISTMAS))
    christmas = datetime.fromisoformat("2025-12-25T03:00:00+00:00")

    window, planned = apply_window(api_of(fake), config, prices, christmas, dry_run=True)

    assert window.reason == "closed day 2025-12-25: Christmas"
    assert [(item.name, item.status, item.after) for item in planned.objects if item.kind == "nodepool"] == [
        ("research-training", "planned", "0")
    ]
    assert limit(fake) == "16"
    assert fake.deleted == []


def test_a_pool_parked_by_park_now_is_left_to_unpark_now(
    fake: FakeApiServer, eks: StackConfig, prices: PriceTable
) -> None:
    config = nightly(eks)
    park_now(api_of(fake), config, parking=True, dry_run=False)

    _, result = apply_window(api_of(fake), config, prices, OPEN, dry_run=False)

    assert limit(fake) == "0"
    assert [item.status for item in result.objects] == ["unchanged"]
    assert "parked by park --now" in result.objects[0].change


def test_the_stack_runs_the_window_as_the_brakes_account_and_leaves_it_the_limit(eks: StackConfig) -> None:
    rendered = kubernetes_objects(nightly(eks))
    (cron_job,) = [body for body in rendered if body["kind"] == "CronJob"]

    assert cron_job["spec"]["schedule"] == "*/5 * * * *"  # the stack's sweep_every
    assert cron_job["spec"]["suspend"] is False
    assert cron_job["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "parkbrake-park"
    assert pod["containers"][0]["command"] == ["parkbrake", "k8s", "window", "--stack", "eks"]
    (parked,) = [
        body for body in kubernetes_objects(nightly(eks).with_parked(True)) if body["kind"] == "CronJob"
    ]
    assert parked["spec"]["suspend"] is True
    verdict = validate_object(cron_job, eks.kubernetes.kubernetes_version if eks.kubernetes else "1.33")
    assert verdict.errors == [], verdict.errors


def test_only_the_unparked_nightly_pool_leaves_its_limit_to_the_window(eks: StackConfig) -> None:
    def ignored(config: StackConfig) -> dict[str, tuple[str, ...]]:
        run = run_offline(lambda: build_platform(config), stack="eks", region=config.region)
        return {
            r.inputs["metadata"]["name"]: r.ignore_changes
            for r in run.of_type("kubernetes:karpenter.sh/v1:NodePool")
        }

    assert ignored(nightly(eks)) == {
        "research-training": ("spec.limits",), "research-large": (), "product-inference": (),
    }  # fmt: skip
    assert set(ignored(nightly(eks).with_parked(True)).values()) == {()}  # parked: "0", applied


def test_a_missing_nodepool_fails_and_a_stack_without_nightly_is_exit_2(
    fake: FakeApiServer, eks: StackConfig, prices: PriceTable
) -> None:
    fake.remove("nodepools", "", "research-training")
    _, result = apply_window(api_of(fake), nightly(eks), prices, OPEN, dry_run=False)
    assert result.errors == [
        "nodepool research-training: no such NodePool on the cluster: apply the stack (pulumi up)"
    ]

    outcome = CliRunner().invoke(
        parkbrake,
        ["k8s", "window", "--stack", "eks", "--project-dir", str(REPOSITORY), "--server", fake.url,
         "--token-file", str(fake.token_file), "--ca-file", str(fake.ca_file)],
    )  # fmt: skip
    assert outcome.exit_code == 2
    assert "no parkbrake:nightly section" in outcome.output
