"""Builders for the on-call command tests: the demo fleet in moto, temporary stack files, clients.

The fleet is seeded by ``scripts/demo_fleet.py`` itself, so the walkthrough in docs/operations.md
and these tests act on the same fleet.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import boto3

from guardrails import names

REPO_ROOT = Path(__file__).resolve().parents[3]
STACK = "dev"  # the example stack, Pulumi.dev.yaml (region us-east-1)
REGION = "us-east-1"
BERLIN = ZoneInfo("Europe/Berlin")  # the example stack's nightly time zone


def _load_demo_fleet() -> ModuleType:
    """``scripts/`` is not a package; load the script by its path."""
    spec = importlib.util.spec_from_file_location("demo_fleet", REPO_ROOT / "scripts" / "demo_fleet.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


demo_fleet = _load_demo_fleet()


def aws_client(endpoint_url: str, service: str, region: str = REGION) -> Any:
    return boto3.client(service, region_name=region, endpoint_url=endpoint_url)


def seed(endpoint_url: str, *, stack: str = STACK, region: str = REGION, now: datetime | None = None) -> Any:
    """The demo fleet of ``stack`` in the moto server at ``endpoint_url``."""
    return demo_fleet.seed_fleet(
        lambda service: aws_client(endpoint_url, service, region),
        stack=stack,
        region=region,
        now=now or datetime.now(UTC),
    )


def project_copy(tmp_path: Path) -> Path:
    """A project folder holding copies of Pulumi.yaml and the example stack files."""
    project = tmp_path / "project"
    project.mkdir()
    for path in REPO_ROOT.glob("Pulumi*.yaml"):
        shutil.copy(path, project / path.name)
    return project


def group(endpoint_url: str, name: str) -> dict[str, Any]:
    groups = aws_client(endpoint_url, "autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[name]
    )
    found: dict[str, Any] = groups["AutoScalingGroups"][0]
    return found


def capacity(endpoint_url: str, name: str) -> tuple[int, int, int]:
    found = group(endpoint_url, name)
    return found["MinSize"], found["DesiredCapacity"], found["MaxSize"]


def group_tag(endpoint_url: str, name: str, key: str) -> str | None:
    return {tag["Key"]: tag["Value"] for tag in group(endpoint_url, name).get("Tags", [])}.get(key)


def service(endpoint_url: str, stack: str, name: str) -> dict[str, Any]:
    ecs = aws_client(endpoint_url, "ecs")
    cluster = f"parkbrake-{stack}"
    found: dict[str, Any] = ecs.describe_services(cluster=cluster, services=[name], include=["TAGS"])[
        "services"
    ][0]
    return found


def scaling_min(endpoint_url: str, resource_id: str) -> int:
    targets = aws_client(endpoint_url, "application-autoscaling").describe_scalable_targets(
        ServiceNamespace="ecs", ResourceIds=[resource_id]
    )["ScalableTargets"]
    return int(targets[0]["MinCapacity"])


def schedule(endpoint_url: str, group_name: str, name: str) -> dict[str, Any]:
    found = aws_client(endpoint_url, "scheduler").get_schedule(GroupName=group_name, Name=name)
    found.pop("ResponseMetadata", None)
    return dict(found)


def parameter(endpoint_url: str, name: str) -> str:
    return str(aws_client(endpoint_url, "ssm").get_parameter(Name=name)["Parameter"]["Value"])


def close_days(aws: str, first: date, days: int) -> None:
    """Give the nightly start a calendar closing ``days`` days from ``first`` (Berlin), as the stack does
    with ``nightly.calendar``: the SSM parameter, and the schedule's payload naming it."""
    from holiday_calendar import ics  # tests/ is on the path in test sessions (benchmarks import this module)

    end = first + timedelta(days=days)
    event = f"UID:freeze@parkbrake\nSUMMARY:Year-end freeze\nDTSTART;VALUE=DATE:{first:%Y%m%d}\nDTEND;VALUE=DATE:{end:%Y%m%d}"
    aws_client(aws, "ssm").put_parameter(
        Name=names.calendar_parameter(STACK), Value=ics(event), Type="String"
    )
    definition = schedule(aws, names.schedule_group(STACK), names.nightly_schedule(STACK, "training"))
    payload = json.loads(definition["Target"]["Input"]) | {
        "calendar": names.calendar_parameter(STACK),
        "timezone": "Europe/Berlin",
        "scheduled_time": "<aws.scheduler.scheduled-time>",
    }
    aws_client(aws, "scheduler").update_schedule(
        Name=names.nightly_schedule(STACK, "training"),
        GroupName=names.schedule_group(STACK),
        ScheduleExpression=definition["ScheduleExpression"],
        ScheduleExpressionTimezone=definition["ScheduleExpressionTimezone"],
        FlexibleTimeWindow=definition["FlexibleTimeWindow"],
        Target=definition["Target"] | {"Input": json.dumps(payload)},
        State="ENABLED",
    )
