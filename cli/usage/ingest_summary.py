"""What ``ledger ingest`` and ``ledger migrate`` say for people: the answer first, the detail on request.

A file of a day's events can hold thousands of lines that were not appended (already in the
ledger, not an accelerator host); one line each buried the totals. The summary counts them per
outcome and reason; the lines themselves follow only up to a limit, or all with ``--verbose``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from guardrails.plurals import counted

LINES_SHOWN = 20  # lines not appended listed without --verbose
OUTCOMES = ("appended", "duplicate", "skipped", "unattributed")  # the order the summary counts them in


def _reason_kind(reason: str) -> str:
    """A reason without the line number it names, so repeats of different lines count together."""
    return re.sub(r"^repeats line \d+$", "repeats an earlier line of the file", reason)


def ingest_summary(lines: Sequence[Mapping[str, Any]], *, verbose: bool) -> list[str]:
    """The counts per outcome and reason, then the lines not appended (all of them if ``verbose``)."""
    outcomes = Counter(line["outcome"] for line in lines)
    reasons = Counter(
        (line["outcome"], _reason_kind(line["reason"])) for line in lines if line["outcome"] != "appended"
    )
    total = ", ".join(f"{outcomes[outcome]:,} {outcome}" for outcome in OUTCOMES if outcomes[outcome])
    text = [f"read {counted(len(lines), 'event')}: {total or 'nothing to append'}"]
    count_width = max((len(f"{count:,}") for count in reasons.values()), default=1)
    for (outcome, reason), count in sorted(
        reasons.items(), key=lambda item: (OUTCOMES.index(item[0][0]), -item[1])
    ):
        text.append(f"  {count:>{count_width},} {outcome}: {reason}")
    missed = [line for line in lines if line["outcome"] != "appended"]
    shown = missed if verbose else missed[:LINES_SHOWN]
    if shown:
        text.append(
            "lines not appended:"
            if verbose or len(missed) <= LINES_SHOWN
            else f"the first {counted(len(shown), 'line')} not appended:"
        )
    text += [
        f"  line {line['line']}: {line['event_id']} {line['outcome']}: {line['reason']}" for line in shown
    ]
    if len(missed) > len(shown):
        text.append(f"  … {len(missed) - len(shown):,} more; --verbose lists all")
    return text


def prices_summary(recorded: Sequence[str]) -> str:
    """``recorded 423 prices: us-east-1 141, …`` from ``sync_prices``' ``type in region`` list."""
    regions = Counter(item.rsplit(" in ", 1)[-1] for item in recorded)
    per_region = ", ".join(f"{region} {count:,}" for region, count in sorted(regions.items()))
    return (
        f"recorded {counted(len(recorded), 'price')} (instance type × region) in "
        f"{counted(len(regions), 'region')}: {per_region}"
    )
