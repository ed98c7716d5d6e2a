"""The nightly launcher against moto: SSM park state, the pool's Auto Scaling group, the budget gate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from botocore.exceptions import ClientError
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    create_pool,
    group_of,
    guardrail_settings,
    heartbeats,
    managed_tags,
    metric_value,
)

from guardrails import names
from guardrails.decisions import Decision
from guardrails.errors import ParkbrakeError
from guardrails.launch import Admission, AdmissionRequest, required_cost
from guardrails.pricing import load_price_table
from lambdas import launcher
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.engines import launching

NOW = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)


@dataclass
class Gate:
    refusal: str | None = None
    asked: list[tuple[str, Decimal]] = field(default_factory=list)
    caps: list[timedelta] = field(default_factory=list)
    released: list[int] = field(default_factory=list)

    def admit(self, request: AdmissionRequest, now: datetime) -> Admission:
        price = load_price_table().instance(request.instance_type).usd_per_hour
        needed = required_cost(request.hosts, price, request.cap)
        self.asked.append((request.tenant, needed))
        self.caps.append(request.cap)
        return Admission(self.refusal is None, needed, None, None if self.refusal else 1, self.refusal)

    def release(self, reservation_id: int, now: datetime) -> None:
        self.released.append(reservation_id)


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    made = client_factory(aws)
    create_pool(
        made("autoscaling", REGION),
        made("ec2", REGION),
        pool="training",
        instance_type="g5.12xlarge",
        desired=0,
        max_size=3,
        group_tags=managed_tags(max_runtime="2h", tenant="research"),
    )
    return made


def park(clients: ClientFactory, value: str) -> None:
    clients("ssm", REGION).put_parameter(
        Name=names.park_parameter(STACK), Value=value, Type="String", Overwrite=True
    )


def refusals(stdout: str, kind: str) -> float | None:
    return metric_value(stdout, "GuardrailActions", Guardrail="launcher", Action="refuse", Reason=kind)


def start(clients: ClientFactory, event: dict[str, Any], gate: Gate | None = None) -> dict[str, Any]:
    return launcher.handle(event, settings=guardrail_settings(), clients=clients, gate=gate, now=NOW)


def desired(clients: ClientFactory) -> int:
    return int(
        group_of(clients("autoscaling", REGION), names.autoscaling_group(STACK, "training"))[
            "DesiredCapacity"
        ]
    )


def test_starts_the_pool_when_unparked(clients: ClientFactory) -> None:
    park(clients, "false")
    result = start(clients, {"pool": "training"})
    price = load_price_table().instance("g5.12xlarge").usd_per_hour
    assert result == {
        "pool": "training",
        "target": 3,
        "started": 3,
        "refused": None,
        "budget": "not checked",
        "required_usd": str((3 * price * 2).quantize(Decimal("0.01"))),
        "reservation_id": None,
        "instance_types": ["g5.12xlarge"],
        "priced_as": "g5.12xlarge",
        "got": {
            "wanted": 3,
            "started": [{"instance_type": "g5.12xlarge", "zone": f"{REGION}a", "hosts": 3}],
            "pending": 0,
            "short": 0,
            "insufficient_capacity": [],
        },
    }
    assert desired(clients) == 3
    assert (
        len(group_of(clients("autoscaling", REGION), names.autoscaling_group(STACK, "training"))["Instances"])
        == 3
    )
    assert heartbeats(clients)[0]["Dimensions"] == [
        {"Name": "Guardrail", "Value": "launcher"},
        {"Name": "Stack", "Value": STACK},
    ]


def test_refuses_when_parked_and_counts_it(
    clients: ClientFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    park(clients, "true")
    capsys.readouterr()
    result = start(clients, {"pool": "training"}, Gate())
    assert result["refused"]["kind"] == "parked"
    assert result["started"] == 0
    assert desired(clients) == 0
    assert refusals(capsys.readouterr().out, "parked") == 1


def test_refuses_when_at_capacity(clients: ClientFactory) -> None:
    park(clients, "false")
    start(clients, {"pool": "training", "capacity": 2})
    result = start(clients, {"pool": "training", "capacity": 2})
    assert result["refused"]["kind"] == "at-capacity"
    assert desired(clients) == 2


def test_refuses_when_the_budget_gate_refuses(
    clients: ClientFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    park(clients, "false")
    gate = Gate(refusal="runway 20m at the current burn rate")
    result = start(clients, {"pool": "training", "capacity": 2}, gate)
    price = load_price_table().instance("g5.12xlarge").usd_per_hour
    assert gate.asked == [("research", 2 * price * 2)]
    assert result["refused"]["kind"] == "budget"
    assert "runway 20m" in result["refused"]["reason"]
    assert result["budget"] == "checked"
    assert desired(clients) == 0
    assert refusals(capsys.readouterr().out, "budget") == 1


def test_gate_allowing_starts_and_says_so(clients: ClientFactory) -> None:
    park(clients, "false")
    result = start(clients, {"pool": "training", "capacity": 1}, Gate())
    assert (result["started"], result["budget"], result["reservation_id"]) == (1, "checked", 1)
    assert desired(clients) == 1


def test_a_failed_start_gives_the_reservation_back(clients: ClientFactory, aws: str) -> None:
    park(clients, "false")
    gate = Gate()
    with FaultProxy(aws) as proxy:
        proxy.fail("SetDesiredCapacity", "AccessDenied", "not allowed", status=403)
        with pytest.raises(ClientError, match="AccessDenied"):
            start(client_factory(proxy.url), {"pool": "training", "capacity": 1}, gate)
    assert gate.released == [1]
    assert desired(clients) == 0


def test_capacity_beyond_the_group_maximum_is_clamped(clients: ClientFactory) -> None:
    park(clients, "false")
    assert start(clients, {"pool": "training", "capacity": 10})["target"] == 3


def test_missing_or_unreadable_park_state_is_an_error_not_unparked(clients: ClientFactory) -> None:
    with pytest.raises(ParkbrakeError, match="does not exist"):
        start(clients, {"pool": "training"})
    park(clients, "maybe")
    with pytest.raises(ParkbrakeError, match="neither 'true' nor 'false'"):
        start(clients, {"pool": "training"})
    assert desired(clients) == 0
    assert heartbeats(clients) == []


def test_unknown_pool_is_an_error(clients: ClientFactory) -> None:
    park(clients, "false")
    with pytest.raises(ParkbrakeError, match="no Auto Scaling group parkbrake-test-inference"):
        start(clients, {"pool": "inference"})


@pytest.mark.parametrize(
    "event", [{}, {"pool": ""}, {"pool": "training", "capacity": 0}, {"pool": "training", "capacity": True}]
)
def test_malformed_events_are_refused(event: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"pool|capacity"):
        launching.parse_event(event)


def test_a_pool_with_fallback_types_is_admitted_at_its_dearest_type_and_says_which(aws: str) -> None:
    """The group's prioritized overrides are the pool's type and its fallbacks: when EC2 lacks capacity
    for one, the group launches the next, after the admission, so the budget covers the dearest."""
    made = client_factory(aws)
    ec2, autoscaling = made("ec2", REGION), made("autoscaling", REGION)
    types = ["g5.12xlarge", "g6e.12xlarge", "g5.24xlarge"]
    create_pool(
        autoscaling,
        ec2,
        pool="training",
        instance_type="g5.12xlarge",
        overrides=types,
        max_size=3,
        group_tags=managed_tags(max_runtime="2h"),
    )
    park(made, "false")
    prices = load_price_table()
    dearest = max(types, key=lambda name: prices.instance(name).usd_per_hour)
    assert dearest != "g5.12xlarge"
    gate = Gate()

    result = start(made, {"pool": "training", "capacity": 2}, gate)

    assert (result["instance_types"], result["priced_as"]) == (types, dearest)
    assert gate.asked == [
        ("research", required_cost(2, prices.instance(dearest).usd_per_hour, timedelta(hours=2)))
    ]
    assert result["required_usd"] == str(gate.asked[0][1].quantize(Decimal("0.01")))
    assert desired(made) == 2


@dataclass
class Decisions:
    """The decision log's writer, as the ledger's store takes them."""

    appended: list[Decision] = field(default_factory=list)

    def append(self, decisions: Sequence[Decision], *, origin: str) -> dict[str, str]:
        self.appended += decisions
        return {}


def test_start_and_refusal_decisions_carry_the_groups_tenant(clients: ClientFactory) -> None:
    park(clients, "false")
    written = Decisions()
    log = DecisionLog(guardrail="launcher", origin="test", ledger=lambda: written)

    for _ in range(2):  # a start, then a refusal: the group already wants its hosts
        launcher.handle(
            {"pool": "training"},
            settings=guardrail_settings(),
            clients=clients,
            gate=None,
            now=NOW,
            decisions=log,
        )

    assert [(item.kind, item.tenant) for item in written.appended] == [
        ("launch-start", "research"),
        ("launch-refuse", "research"),
    ]
