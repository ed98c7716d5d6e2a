"""What the guardrails saved: the GPU-hours and dollars each stop avoided, by a stated, conservative
counterfactual, every figure traceable to its decision in ``parkbrake log``.

The counterfactual (docs/ledger.md, "What the guardrails saved"): had the guardrail not stopped the
host, it would have run on from the stop until the *first* of

- its next start (``next-start``): whoever started it again wanted it then, so the stop saved
  nothing after it (it may have saved nothing at all: the host was wanted back at once);
- the end of the billing period (``period-end``): a saving is counted in the month it happened;
- one more cap from the stop (``cap``): the host's cap (its pool's, or the default), as if the
  next guardrail would have stopped it one cap later.

Each bound can only shorten the counterfactual run, so the figure is a floor, never an estimate of
the most that could have run. A stop whose host was not running when it was decided (a stopped
host retired, a stop that failed) avoided nothing and is not counted. The price is the ledger's
for the host's key at the stop; the hours are instance-hours × the host's accelerators.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from guardrails.ledger import MS_PER_HOUR, from_ms
from guardrails.ledger import usd as usd_of

# Every guardrail a saving is counted for, in the report's order.
GUARDRAILS = ("cap", "deadline", "idle self-stop", "sweep", "nightly schedule", "park", "budget stop")
# Guardrails that stop hosts without a per-host decision in the log today: their stops are not counted
# (nothing would trace them), and the report says so rather than showing them as zero savings.
UNLOGGED = ("idle self-stop", "nightly schedule", "park")
# The decision kinds that stop hosts, read from the log.
STOP_KINDS = ("stop", "budget-stop")
# Actors whose stops name the guardrail themselves (a log that gains these decisions is counted).
GUARDRAIL_OF_ACTOR = {
    "deadline": "deadline",
    "agent": "idle self-stop",
    "launcher": "nightly schedule",
    "park": "park",
}


def guardrail_of(kind: str, actor: str, rule: str | None) -> str:
    """The guardrail behind a stop decision: the budget's; the host's own deadline schedule; the
    sweep's backstop for a host past its cap (rule ``past-deadline``: ``cap``); the sweep's other
    rules (orphaned, untagged, unreclaimed Karpenter nodes: ``sweep``)."""
    if kind == "budget-stop":
        return "budget stop"
    if actor in GUARDRAIL_OF_ACTOR:
        return GUARDRAIL_OF_ACTOR[actor]
    return "cap" if rule == "past-deadline" else "sweep"


@dataclass(frozen=True)
class StoppedHost:
    """One host a stop decision stopped, as the ledger metered it."""

    decision_id: int
    decided_at: datetime
    kind: str
    actor: str
    rule: str | None
    instance_id: str
    tenant: str
    pool: str
    instance_type: str
    accelerators: int
    cap_ms: int
    stopped_ms: int  # its interval's end: the stop as metered
    next_start_ms: int | None  # its next interval's start, if it started again
    usd_per_hour: Decimal | None  # the ledger's price for its key at the stop (None: unpriced)


@dataclass(frozen=True)
class Saving:
    host: StoppedHost
    guardrail: str
    avoided_until_ms: int
    bound: str  # next-start, period-end or cap: which bound ended the counterfactual run

    @property
    def avoided_ms(self) -> int:
        return self.avoided_until_ms - self.host.stopped_ms

    @property
    def gpu_hours(self) -> Decimal:
        return (Decimal(self.avoided_ms * self.host.accelerators) / MS_PER_HOUR).quantize(Decimal("0.000001"))

    @property
    def usd(self) -> Decimal:
        price = self.host.usd_per_hour
        return Decimal(0) if price is None else usd_of(price * self.avoided_ms)

    def as_dict(self) -> dict[str, Any]:
        host = self.host
        return {
            "decision_id": host.decision_id,
            "decided_at": host.decided_at.isoformat(),
            "kind": host.kind,
            "actor": host.actor,
            "guardrail": self.guardrail,
            "tenant": host.tenant,
            "pool": host.pool,
            "instance_id": host.instance_id,
            "instance_type": host.instance_type,
            "stopped_at": from_ms(host.stopped_ms).isoformat(),
            "avoided_until": from_ms(self.avoided_until_ms).isoformat(),
            "bound": self.bound,
            "gpu_hours": str(self.gpu_hours),
            "usd": str(self.usd),
            "unpriced": host.usd_per_hour is None,
        }


def saving_of(host: StoppedHost, *, period_end_ms: int) -> Saving:
    """The counterfactual run of one stopped host, bounded as the module says (ties: the earlier bound
    in next-start, period-end, cap order names it)."""
    bounds = [("cap", host.stopped_ms + host.cap_ms), ("period-end", period_end_ms)]
    if host.next_start_ms is not None:
        bounds.append(("next-start", host.next_start_ms))
    order = {"next-start": 0, "period-end": 1, "cap": 2}
    bound, until_ms = min(bounds, key=lambda item: (item[1], order[item[0]]))
    return Saving(host, guardrail_of(host.kind, host.actor, host.rule), max(until_ms, host.stopped_ms), bound)


@dataclass(frozen=True)
class SavingsTotal:
    tenant: str
    pool: str
    guardrail: str
    stops: int
    gpu_hours: Decimal
    usd: Decimal
    decision_ids: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "pool": self.pool,
            "guardrail": self.guardrail,
            "stops": self.stops,
            "gpu_hours": str(self.gpu_hours),
            "usd": str(self.usd),
            "decision_ids": list(self.decision_ids),
        }


def totals(savings: Iterable[Saving]) -> list[SavingsTotal]:
    """Per tenant, pool and guardrail (in :data:`GUARDRAILS` order): stops, hours, dollars, decisions."""
    groups: dict[tuple[str, str, str], list[Saving]] = {}
    for saving in savings:
        groups.setdefault((saving.host.tenant, saving.host.pool, saving.guardrail), []).append(saving)
    rank = {name: number for number, name in enumerate(GUARDRAILS)}
    return [
        SavingsTotal(
            tenant,
            pool,
            guardrail,
            len(group),
            sum((saving.gpu_hours for saving in group), Decimal(0)),
            sum((saving.usd for saving in group), Decimal(0)),
            tuple(sorted({saving.host.decision_id for saving in group})),
        )
        for (tenant, pool, guardrail), group in sorted(
            groups.items(), key=lambda item: (item[0][0], item[0][1], rank[item[0][2]])
        )
    ]


def savings_markdown(month: str, savings: Sequence[Saving], *, tenant: str | None = None) -> str:
    """The savings as a markdown section (for the invoice: ``guardrails.invoice`` may append it)."""
    rows = [row for row in totals(savings) if tenant is None or row.tenant == tenant]
    lines = [
        f"### What the guardrails saved, {month}",
        "",
        "Counterfactual: each stopped host would have run on until its next start, the period's end or "
        "one more cap, whichever came first (a floor; see docs/ledger.md).",
        "",
        "| tenant | pool | guardrail | stops | GPU-hours avoided | USD avoided | decisions (parkbrake log) |",
        "|---|---|---|--:|--:|--:|---|",
    ]
    lines += [
        f"| {row.tenant} | {row.pool} | {row.guardrail} | {row.stops} | {row.gpu_hours} | {row.usd} | "
        + ", ".join(f"#{number}" for number in row.decision_ids)
        + " |"
        for row in rows
    ]
    total_usd = sum((row.usd for row in rows), Decimal(0))
    total_hours = sum((row.gpu_hours for row in rows), Decimal(0))
    lines += ["", f"**Avoided: {total_hours} GPU-hours, {total_usd} USD**"]
    return "\n".join(lines)


def by_guardrail(savings: Iterable[Saving]) -> Mapping[str, Decimal]:
    """USD avoided per guardrail (every guardrail named, zero where nothing was counted)."""
    result = dict.fromkeys(GUARDRAILS, Decimal(0))
    for saving in savings:
        result[saving.guardrail] += saving.usd
    return result
