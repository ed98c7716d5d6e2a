"""The nightly launcher's decision: parked, at capacity, budget gate, and the cost it commits."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from guardrails.launch import Admission, AdmissionRequest, PoolState, decide_launch, required_cost

NOW = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)
POOL = PoolState("training", "parkbrake-prod-training", 1, 4, "g5.xlarge", "research", timedelta(minutes=90))
PRICE = Decimal("1.006")


@dataclass
class RecordingGate:
    refusal: str | None = None
    asked: list[tuple[AdmissionRequest, datetime]] = field(default_factory=list)

    def admit(self, request: AdmissionRequest, now: datetime) -> Admission:
        self.asked.append((request, now))
        needed = required_cost(request.hosts, PRICE, request.cap)
        return Admission(self.refusal is None, needed, None, None if self.refusal else 7, self.refusal)

    def release(self, reservation_id: int, now: datetime) -> None:
        raise AssertionError("nothing to release")


def test_required_cost_is_exact() -> None:
    assert required_cost(3, PRICE, timedelta(minutes=90)) == Decimal("4.527")
    assert required_cost(0, PRICE, timedelta(hours=2)) == 0


def test_starts_the_missing_hosts_without_a_gate() -> None:
    decision = decide_launch(POOL, parked=False, target=4, usd_per_hour=PRICE, gate=None, now=NOW)
    assert (decision.start, decision.refusal, decision.budget_checked) == (3, None, False)
    assert decision.required_usd == Decimal("4.527")


def test_parked_refuses_before_anything_else() -> None:
    gate = RecordingGate()
    decision = decide_launch(POOL, parked=True, target=4, usd_per_hour=PRICE, gate=gate, now=NOW)
    assert decision.refusal is not None
    assert decision.refusal.kind == "parked"
    assert decision.start == 0
    assert gate.asked == []


def test_at_capacity_refuses() -> None:
    decision = decide_launch(POOL, parked=False, target=1, usd_per_hour=PRICE, gate=None, now=NOW)
    assert decision.refusal is not None
    assert decision.refusal.kind == "at-capacity"
    assert "already wants 1 hosts" in decision.refusal.reason


def test_gate_is_asked_for_the_hosts_to_start_at_their_cap() -> None:
    gate = RecordingGate(refusal="runway 40m, needs 1h30m")
    decision = decide_launch(POOL, parked=False, target=4, usd_per_hour=PRICE, gate=gate, now=NOW)
    assert gate.asked == [(AdmissionRequest("research", "g5.xlarge", 3, timedelta(minutes=90)), NOW)]
    assert decision.refusal is not None
    assert decision.refusal.kind == "budget"
    assert decision.refusal.reason == (
        "tenant research cannot cover 3 x g5.xlarge for 1h30m ($4.53): runway 40m, needs 1h30m"
    )
    assert (decision.start, decision.budget_checked) == (0, True)


def test_gate_allowing_starts_and_says_it_checked() -> None:
    decision = decide_launch(POOL, parked=False, target=4, usd_per_hour=PRICE, gate=RecordingGate(), now=NOW)
    assert (decision.start, decision.refusal, decision.budget_checked) == (3, None, True)
    assert decision.reservation_id == 7


def test_no_tenant_means_no_budget_to_check_and_refuses() -> None:
    orphan = PoolState("training", "g", 0, 4, "g5.xlarge", None, timedelta(hours=1))
    decision = decide_launch(
        orphan, parked=False, target=2, usd_per_hour=PRICE, gate=RecordingGate(), now=NOW
    )
    assert decision.refusal is not None
    assert decision.refusal.kind == "budget"
