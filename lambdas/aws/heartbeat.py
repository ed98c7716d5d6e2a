"""The dead-man's switch: each guardrail reports success, and only success.

A CloudWatch alarm that treats missing data as breaching pages when the heartbeat stops, so a
guardrail that errors (a missing IAM permission, say) pages within one period instead of failing
silently. The same facts go to prometheus-client for processes that are scraped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import Counter, Gauge

from guardrails import names

# The Guardrail dimension's values: one heartbeat (and one alarm) per guardrail.
REAPER = "reaper"
DEADLINE = "deadline"
LAUNCHER = "launcher"
GUARDRAIL_DIMENSION = "Guardrail"
# The stack's own dimension: two stacks in one region must not mask each other's silent guardrail.
STACK_DIMENSION = "Stack"

LAST_SUCCESS = Gauge(
    "parkbrake_guardrail_last_success_timestamp_seconds",
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
    dimensions = [{"Name": GUARDRAIL_DIMENSION, "Value": guardrail}]
    if stack:
        dimensions.append({"Name": STACK_DIMENSION, "Value": stack})
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
