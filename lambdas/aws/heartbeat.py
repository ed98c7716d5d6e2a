"""The dead-man's switch: each guardrail reports success, and only success.

A CloudWatch alarm that treats missing data as breaching pages when the heartbeat stops, so a
guardrail that errors (a missing IAM permission, say) pages within one period instead of failing
silently. The same facts go to prometheus-client for processes that are scraped, and
:func:`last_successes` reads them back from CloudWatch for ``parkbrake exporter`` to republish.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import Counter, Gauge

from guardrails import names

# The Guardrail dimension's values: one heartbeat (and one alarm) per guardrail.
REAPER = "reaper"
DEADLINE = "deadline"
LAUNCHER = "launcher"
# The ledger's guardrails name themselves (lambdas.meter, lambdas.budget); every heartbeat writer, in order.
GUARDRAILS = (REAPER, DEADLINE, LAUNCHER, "meter", "budget")
# How far back the exporter looks for a guardrail's last success (a day of minute datapoints).
LOOKBACK = timedelta(days=1)
GUARDRAIL_DIMENSION = "Guardrail"
# The stack's own dimension: two stacks in one region must not mask each other's silent guardrail.
STACK_DIMENSION = "Stack"

LAST_SUCCESS_METRIC = "parkbrake_guardrail_last_success_timestamp_seconds"
LAST_SUCCESS = Gauge(
    LAST_SUCCESS_METRIC,
    "When the guardrail last completed without an error (Unix time).",
    ["guardrail"],
)
ACTIONS = Counter(
    "parkbrake_guardrail_actions_total",
    "Actions the guardrails took (stop, terminate, remove-from-group, report, refuse, start, schedule, ...).",
    ["guardrail", "action", "reason"],
)


def count_action(guardrail: str, action: str, reason: str, amount: int = 1) -> None:
    """``reason`` is a short code (a rule name, a refusal kind), never free text: it is a label."""
    if amount:
        ACTIONS.labels(guardrail=guardrail, action=action, reason=reason).inc(amount)


def record_success(guardrail: str, *, stack: str | None, cloudwatch: Any, now: datetime) -> None:
    """Call only when the run completed without errors; that is the point of a dead-man's switch.

    ``stack`` is the guardrail's own (``PARKBRAKE_STACK``): the stack's alarm watches that dimension.
    """
    dimensions = _dimensions(guardrail, stack)
    cloudwatch.put_metric_data(
        Namespace=names.heartbeat_namespace(),
        MetricData=[
            {
                "MetricName": names.HEARTBEAT_METRIC,
                "Dimensions": dimensions,
                "Timestamp": now,
                "Value": 1.0,
                "Unit": "Count",
            }
        ],
    )
    LAST_SUCCESS.labels(guardrail=guardrail).set(now.timestamp())


def _dimensions(guardrail: str, stack: str | None) -> list[dict[str, str]]:
    dimensions = [{"Name": GUARDRAIL_DIMENSION, "Value": guardrail}]
    if stack:
        dimensions.append({"Name": STACK_DIMENSION, "Value": stack})
    return dimensions


def last_successes(
    cloudwatch: Any, *, stack: str | None, now: datetime, guardrails: Sequence[str] = GUARDRAILS
) -> dict[str, datetime]:
    """When each guardrail last succeeded within :data:`LOOKBACK`, to the minute (CloudWatch's period start).

    A guardrail with no heartbeat in that window is absent from the answer. One ``GetMetricData``
    call (paginated) for all of them.
    """
    by_id = {f"guardrail{index}": guardrail for index, guardrail in enumerate(guardrails)}
    queries = [
        {
            "Id": query_id,
            "Label": guardrail,
            "MetricStat": {
                "Metric": {
                    "Namespace": names.heartbeat_namespace(),
                    "MetricName": names.HEARTBEAT_METRIC,
                    "Dimensions": _dimensions(guardrail, stack),
                },
                "Period": 60,
                "Stat": "SampleCount",
            },
        }
        for query_id, guardrail in by_id.items()
    ]
    latest: dict[str, datetime] = {}
    pages = cloudwatch.get_paginator("get_metric_data").paginate(
        MetricDataQueries=queries, StartTime=now - LOOKBACK, EndTime=now, ScanBy="TimestampDescending"
    )
    for page in pages:
        for result in page["MetricDataResults"]:
            guardrail = by_id[result["Id"]]
            seen = [
                stamp for stamp, value in zip(result["Timestamps"], result["Values"], strict=True) if value
            ]
            if seen:
                latest[guardrail] = max([*seen, latest.get(guardrail, seen[0])])
    return latest
