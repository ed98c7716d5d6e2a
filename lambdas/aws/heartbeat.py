"""The dead-man's switch and the guardrails' counters, in CloudWatch.

Each guardrail reports success, and only success: ``record_success`` puts the heartbeat metric that a
CloudWatch alarm treating missing data as breaching watches, so a guardrail that errors (a missing IAM
permission, say) pages within one period instead of failing silently. It is a ``PutMetricData`` call,
so a role that cannot reach CloudWatch also goes quiet and pages. :func:`last_successes` reads the
heartbeats back for ``parkbrake exporter`` to republish to Prometheus.

Counters (actions taken, findings seen) and the last-success time go to CloudWatch through the
embedded metric format: one JSON line per metric on standard output, which Lambda ships to CloudWatch
Logs and CloudWatch turns into metrics (aws-lambda-powertools writes the format).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

from guardrails import names

# The Guardrail dimension's values: one heartbeat (and one alarm) per guardrail.
REAPER = "reaper"
DEADLINE = "deadline"
LAUNCHER = "launcher"
# The ledger's guardrails name themselves (lambdas.engines.metering, lambdas.engines.budgeting); every heartbeat writer, in order.
GUARDRAILS = (REAPER, DEADLINE, LAUNCHER, "meter", "budget")
# How far back the exporter looks for a guardrail's last success (a day of minute datapoints).
LOOKBACK = timedelta(days=1)
GUARDRAIL_DIMENSION = "Guardrail"
# The stack's own dimension: two stacks in one region must not mask each other's silent guardrail.
STACK_DIMENSION = "Stack"

# The Prometheus name under which `parkbrake exporter` republishes each guardrail's last success.
LAST_SUCCESS_METRIC = "parkbrake_guardrail_last_success_timestamp_seconds"
# The CloudWatch metrics the guardrails write in the embedded metric format.
ACTIONS_EMF = "GuardrailActions"
LAST_SUCCESS_EMF = "GuardrailLastSuccess"
FINDINGS_EMF = "GuardrailFindings"


def count_action(guardrail: str, action: str, reason: str, amount: int = 1) -> None:
    """``reason`` is a short code (a rule name, a refusal kind), never free text: it is a dimension."""
    if amount:
        emit(ACTIONS_EMF, amount, MetricUnit.Count, Guardrail=guardrail, Action=action, Reason=reason)


def record_findings(guardrail: str, *, stack: str | None, counts: Mapping[str, int]) -> None:
    """How many hosts each kind of finding (unmanaged, orphaned, ...) is about now; zeros too, so an
    alarm on a kind sees data every run and clears when the hosts are gone."""
    for finding, count in counts.items():
        emit(FINDINGS_EMF, count, MetricUnit.Count, **_emf_dimensions(guardrail, stack), Finding=finding)


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
    emit(LAST_SUCCESS_EMF, now.timestamp(), MetricUnit.Seconds, **_emf_dimensions(guardrail, stack))


def emit(name: str, value: float, unit: MetricUnit, **dimensions: str) -> None:
    """One metric in the embedded metric format, with exactly ``dimensions`` (no implicit service)."""
    # service="": no implicit "service" dimension (POWERTOOLS_SERVICE_NAME) that the alarms do not name
    metrics = AmazonCloudWatchEMFProvider(
        namespace=names.heartbeat_namespace(), service="", metric_set={}, dimension_set={}
    )
    metrics.add_metric(name=name, unit=unit, value=value)
    for dimension, dimension_value in dimensions.items():
        metrics.add_dimension(name=dimension, value=dimension_value)
    metrics.flush_metrics()


def _emf_dimensions(guardrail: str, stack: str | None) -> dict[str, str]:
    return {dimension["Name"]: dimension["Value"] for dimension in _dimensions(guardrail, stack)}


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
