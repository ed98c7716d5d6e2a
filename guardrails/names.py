"""Names of the AWS resources a stack creates, shared by the components, the Lambdas and the CLI.

The CLI finds what the Pulumi program made by these names (and by tags), so they are defined here once.
"""

from __future__ import annotations

import hashlib

INFERENCE_SERVICE = "inference"
CONTROL_PLANE_SERVICE = "control-plane"
COLOURS = ("blue", "green")


def prefix(stack: str) -> str:
    return f"parkbrake-{stack}"


def alarm_topic(stack: str) -> str:
    """SNS topic every guardrail alarm and notice goes to (unless the stack adopts its own)."""
    return f"{prefix(stack)}-alarms"


def park_parameter(stack: str) -> str:
    """SSM parameter holding ``true``/``false``: the runtime park state the launcher reads."""
    return f"/parkbrake/{stack}/parked"


def spoke_park_parameter(stack: str, region: str) -> str:
    """The organisation's park switch in a member account and region: written by the spoke of the hub
    stack ``stack`` from the hub's ``parked`` (components/org_spoke_parts.py), read by every
    launcher there (lambdas/engines/launching.py). Not ``park_parameter(stack)``, which the hub
    account already holds in the hub's region when it is in the OU."""
    return f"/parkbrake/{stack}/spoke-{region}/parked"


def calendar_parameter(stack: str) -> str:
    """SSM parameter holding the iCalendar of closed days the nightly starts honour."""
    return f"/parkbrake/{stack}/closed-days"


def function_name(stack: str, guardrail: str) -> str:
    """Lambda function of a guardrail: reaper, deadline, launcher, meter, budget."""
    return f"{prefix(stack)}-{guardrail}"


def scheduler_role(stack: str) -> str:
    """The IAM role EventBridge Scheduler invokes the guardrails as (deadlines, warnings, sweeps)."""
    return f"{prefix(stack)}-scheduler"


def schedule_group(stack: str) -> str:
    """EventBridge Scheduler group for the stack's recurring schedules (nightly starts and the sweep)."""
    return prefix(stack)


def deadline_schedule_group(stack: str) -> str:
    """Scheduler group for the one-time per-host deadline schedules."""
    return f"{prefix(stack)}-deadlines"


def nightly_schedule(stack: str, pool: str) -> str:
    return f"{prefix(stack)}-nightly-{pool}"


def reaper_schedule(stack: str) -> str:
    return f"{prefix(stack)}-reaper"


def deadline_schedule(instance_id: str) -> str:
    return f"deadline-{instance_id}"


def warning_schedule(instance_id: str) -> str:
    """The one-time schedule that warns a host's owner before its deadline (in the deadlines' group)."""
    return f"warn-{instance_id}"


def budget_crossing_schedule(tenant: str) -> str:
    """Schedule names allow ``[0-9a-zA-Z-_.]``, 64 characters: a tenant is named by a digest."""
    return f"budget-{hashlib.sha256(tenant.encode()).hexdigest()[:32]}"


def dead_letter_queue(stack: str, guardrail: str) -> str:
    """SQS queue where a guardrail's events end after their retries (alarmed on its depth)."""
    return f"{function_name(stack, guardrail)}-dlq"


def notices_table(stack: str) -> str:
    """DynamoDB table where the sweep records which findings it last sent, and when."""
    return f"{prefix(stack)}-notices"


def decision_bus(stack: str) -> str:
    """The EventBridge bus the reaper and the deadlines relay their decisions on, to the meter; its
    policy lets only their roles put events on it (components/iam_policies.py, decision_bus_policy)."""
    return f"{prefix(stack)}-decisions"


def autoscaling_group(stack: str, pool: str) -> str:
    return f"{prefix(stack)}-{pool}"


def capacity_provider(stack: str, pool: str) -> str:
    """ECS capacity provider of a pool that backs an ECS service (names may not start with aws/ecs)."""
    return f"{prefix(stack)}-{pool}"


def ecs_cluster(stack: str) -> str:
    return prefix(stack)


def ecs_service(service: str, colour: str | None = None) -> str:
    return f"{service}-{colour}" if colour else service


# Load balancer and target group names: at most 32 letters, digits and hyphens.
ELB_NAME_LIMIT = 32


def load_balancer(stack: str, service: str) -> str:
    """The ALB in front of a service (``control-plane``, ``inference``)."""
    return _elb_name(f"{prefix(stack)}-{service}")


def target_group(stack: str, service: str, colour: str | None = None) -> str:
    """A service's target group; the inference service has one per colour."""
    return _elb_name(f"{prefix(stack)}-{ecs_service(service, colour)}")


def _elb_name(name: str) -> str:
    """``name`` if it fits, else its head and a short hash, so long stack names stay unique and stable."""
    if len(name) <= ELB_NAME_LIMIT:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: ELB_NAME_LIMIT - len(digest) - 1].rstrip('-')}-{digest}"


def heartbeat_namespace() -> str:
    """CloudWatch namespace of the guardrails' heartbeat metric."""
    return "Parkbrake/Guardrails"


HEARTBEAT_METRIC = "GuardrailSuccess"

# Docker label on a task definition's serving container naming the git commit it runs (reverse-DNS,
# as Docker recommends for label keys). `parkbrake deploy` writes it and `parkbrake verify` reads it,
# beside the task definition's `parkbrake:revision` tag.
CONTAINER_REVISION_LABEL = "parkbrake.revision"

# The budget controller's health server: the Deployment's liveness probe GETs it and Prometheus scrapes
# /metrics on the same port (components/k8s/budget_controller.py, cli/k8s/metrics.py).
CONTROLLER_HEALTH_PORT = 8081
CONTROLLER_HEALTH_PATH = "/healthz"


def spoke_role(stack: str, region: str) -> str:
    """The role a spoke makes in its member account for the hub (the central sweep, the meter's
    lookups) to assume. IAM names are global to an account, so the region is in the name: a spoke
    per region never collides with another, and none collides with the hub's own roles when the hub
    account is in the organisational unit the spokes are deployed to (AWS Instance Scheduler's
    collisions, aws-solutions/instance-scheduler-on-aws #561 and #608)."""
    return f"{prefix(stack)}-spoke-{region}"


def spoke_role_arn(stack: str, account_id: str, region: str, partition: str = "aws") -> str:
    return f"arn:{partition}:iam::{account_id}:role/{spoke_role(stack, region)}"


def hub_bus(stack: str) -> str:
    """The hub's central EventBridge bus the spokes forward their hosts' events to."""
    return f"{prefix(stack)}-hub"
