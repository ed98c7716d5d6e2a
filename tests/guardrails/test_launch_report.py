"""Reading a group's instances and scaling activities as what a start got."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from guardrails.launch_report import Shortfall, launch_report, shortfall_of

SINCE = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)
ICE = (
    "InsufficientInstanceCapacity - We currently do not have sufficient p4d.24xlarge capacity in the "
    "Availability Zone you requested (us-east-1b). Launching EC2 instance failed."
)


def test_only_failed_activities_for_want_of_capacity_are_shortfalls() -> None:
    assert shortfall_of({"StatusCode": "Failed", "StatusMessage": ICE}) == Shortfall(
        "p4d.24xlarge", "us-east-1b", ICE
    )
    assert shortfall_of({"StatusCode": "Successful", "StatusMessage": ICE}) is None
    assert shortfall_of({"StatusCode": "Failed", "StatusMessage": "You are not authorized"}) is None
    bare = "InsufficientInstanceCapacity"
    assert shortfall_of({"StatusCode": "Cancelled", "StatusMessage": bare}) == Shortfall(None, None, bare)


def test_pending_hosts_are_not_short_and_older_refusals_are_not_this_starts() -> None:
    report = launch_report(
        wanted=3,
        instances=[
            {"InstanceType": "p4d.24xlarge", "AvailabilityZone": "us-east-1a", "LifecycleState": "InService"},
            {"InstanceType": "p4d.24xlarge", "AvailabilityZone": "us-east-1a", "LifecycleState": "Pending"},
            {
                "InstanceType": "p4d.24xlarge",
                "AvailabilityZone": "us-east-1a",
                "LifecycleState": "Terminating",
            },
        ],
        activities=[
            {"StatusCode": "Failed", "StatusMessage": ICE, "StartTime": SINCE - timedelta(hours=1)},
            {"StatusCode": "Failed", "StatusMessage": ICE, "StartTime": SINCE + timedelta(seconds=3)},
            {"StatusCode": "Failed", "StatusMessage": ICE, "StartTime": SINCE + timedelta(seconds=9)},
        ],
        since=SINCE,
    )
    assert (report.pending, report.short, report.settled, report.finding) == (1, 1, False, True)
    assert report.no_capacity == (Shortfall("p4d.24xlarge", "us-east-1b", ICE),)  # one per type and zone
    assert report.describe() == (
        "1 x p4d.24xlarge in us-east-1a in service, 1 pending, p4d.24xlarge in us-east-1b: insufficient "
        "capacity, 1 of 3 not launched"
    )
