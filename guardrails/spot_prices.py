"""Which of EC2's spot price history the ledger records: per (type, region, zone), the changes from
where the ledger's history of that key ends.

EC2's ``DescribeSpotPriceHistory`` for ``[StartTime, EndTime]`` returns every change in the range and
the last change before ``StartTime`` (the price in effect at the start). The ledger accepts a spot
price only within the last 24 hours and after its key's latest row (the prices trigger), so each key
is asked from the later of its latest row and :data:`SPOT_WINDOW` ago; a change from before that
start is the price in effect at the start and is recorded from there. A record that repeats the
price before it is no change and is not recorded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from guardrails.ledger import PriceKey

# How far back the reconciler reads spot history: under the ledger's 24 hours, with an hour's margin
# for a slow run (the trigger measures from its own statement's time).
SPOT_WINDOW = timedelta(hours=23)


@dataclass(frozen=True)
class SpotPrice:
    """A spot price of one key from an instant (epoch milliseconds)."""

    key: PriceKey
    from_ms: int
    usd_per_hour: Decimal


def history_start_ms(latest: SpotPrice | None, now_ms: int) -> int:
    """Where a key's history is read from: just after its latest recorded price, at most a window back."""
    window_start = now_ms - SPOT_WINDOW // timedelta(milliseconds=1)
    return window_start if latest is None else max(latest.from_ms + 1, window_start)


def spot_changes(
    history: Iterable[SpotPrice], latest: Mapping[PriceKey, SpotPrice], *, now_ms: int
) -> list[SpotPrice]:
    """The prices to record from EC2's ``history``, given each key's ``latest`` recorded price."""
    by_key: dict[PriceKey, dict[int, SpotPrice]] = defaultdict(dict)
    for record in sorted(history, key=lambda record: record.from_ms):
        start = history_start_ms(latest.get(record.key), now_ms)
        if record.from_ms > now_ms:
            continue  # not yet in effect (never from EC2; kept out of the ledger all the same)
        at_ms = max(record.from_ms, start)
        by_key[record.key][at_ms] = SpotPrice(record.key, at_ms, record.usd_per_hour)  # the later one wins
    changes = []
    for key in sorted(by_key):
        previous = latest.get(key)
        for at_ms in sorted(by_key[key]):
            price = by_key[key][at_ms]
            if previous is None or price.usd_per_hour != previous.usd_per_hour:
                changes.append(price)
                previous = price
    return changes
