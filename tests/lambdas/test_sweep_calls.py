"""The sweep's API calls per fleet shape, counted at the proxy in front of moto's server: never more
EC2 calls than Cloud Custodian's same sweep, and at most one call more in all (the stack list, which
Custodian has no counterpart for).

The shapes are the benchmark's (``benchmarks/fleet_sweep.py``), scaled down: moto renders 15–30 ms of
XML per listed instance, so 10 hosts a reservation and pages of 3 reservations stand for AWS's pages of
1,000 hosts. Custodian's count is derived (:func:`benchmarks.fleet_sweep.custodian_calls`: its query
pages through every running host, of any type, and its ``stop`` sends every due host in one call);
``python -m benchmarks.fleet_sweep`` measures it beside the derivation.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import ACCOUNT, REGION, client_factory

from benchmarks.fleet_sweep import FleetShape, custodian_calls, live_stacks_parameters, seed_fleet
from benchmarks.harness import STACK
from guardrails.settings import Settings
from lambdas.engines import sweeping

PER_RESERVATION = 10
PAGE = 3  # reservations a page (moto counts MaxResults in reservations)
SHAPES = (
    FleetShape("mixed", 200, gpu_every=4, due_every=8),  # 20 reservations, 5 GPU, 3 of them due
    FleetShape("mixed, larger", 600, gpu_every=4, due_every=8),  # 60 reservations: more pages
    FleetShape("GPU, all due", 250, gpu_every=1, due_every=1),  # every listed host stopped: the tight case
    FleetShape("stopped managed hosts", 200, gpu_every=4, due_every=8, stopped=5),  # one of another stack
)
LARGE = {"mixed, larger", "GPU, all due"}


@pytest.fixture
def proxy(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    # moto scans its ~1,300 default AMIs for every instance it creates; this account needs none.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    urllib.request.urlopen(
        urllib.request.Request(f"{aws}/moto-api/reset", method="POST"), timeout=120
    ).close()
    with FaultProxy(aws) as running:
        yield running


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(shape, id=shape.name, marks=[pytest.mark.slow] if shape.name in LARGE else [])
        for shape in SHAPES
    ],
)
def test_a_sweep_makes_no_more_ec2_calls_than_custodian_and_one_more_call_at_most(
    proxy: FaultProxy, shape: FleetShape
) -> None:
    from moto.backends import get_backend

    clients = client_factory(proxy.url)
    live_stacks_parameters(clients("ssm", REGION))
    overdue = seed_fleet(get_backend("ec2")[ACCOUNT][REGION], shape, per_reservation=PER_RESERVATION)
    settings = Settings(stack=STACK, regions=(REGION,))
    now = datetime.now(UTC)
    proxy.clear()

    plan = sweeping.plan_sweep(settings, now=now, clients=clients, page_size=PAGE)
    report = sweeping.execute_sweep(plan, settings, now=now, clients=clients, dry_run=False)

    assert report.errors == []
    assert sorted(report.outcome.stopped) == sorted(overdue)
    custodian = custodian_calls(shape, per_reservation=PER_RESERVATION, page=PAGE)
    stack_list = proxy.calls["GetParametersByPath"]
    total = sum(proxy.calls.values())
    assert total - stack_list <= custodian
    assert total <= custodian + 1
    # How: every stop in one call, one listing for running and stopped hosts, the stack list read
    # once and only for a host naming another stack (the stopped fleet's first host).
    assert proxy.calls["StopInstances"] == 1
    assert set(proxy.calls) <= {"DescribeInstances", "StopInstances", "GetParametersByPath"}
    assert stack_list == (1 if shape.stopped else 0)


def test_the_derived_custodian_count_pages_every_running_host() -> None:
    """The derivation the bound rests on: pages of every running reservation (an empty listing is a call
    too), and one stop if any host is due."""
    assert custodian_calls(SHAPES[0], per_reservation=10, page=3) == 7 + 1
    assert custodian_calls(SHAPES[2], per_reservation=10, page=3) == 9 + 1
    assert custodian_calls(FleetShape("empty", 0, gpu_every=1, due_every=1), per_reservation=10, page=3) == 1
