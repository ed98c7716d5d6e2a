"""The organisation's service control policy: member accounts cannot switch the guardrails off.

``parkbrake guard-policy --org`` prints it, for the organisational unit (OU) that holds the member
accounts. Every stack, whatever its name, names what it creates ``parkbrake-<stack>-…``
(:mod:`guardrails.names`), so one policy covers every spoke in every account and region. It denies,
to everyone but the stacks' own roles (``role/parkbrake-*``) and the deployer roles given:

- deleting, changing or throttling the guardrail functions (``function:parkbrake-*``: their code,
  configuration, concurrency — a reserved concurrency of 0 stops a function —, aliases, invoke
  settings, the permissions that let EventBridge and Scheduler invoke them) and their event source
  mappings (by ``lambda:FunctionArn``);
- deleting, disabling, rewriting or retargeting the EventBridge rules that carry events to them or
  forward them to the hub (``rule/parkbrake-*`` on the default bus, ``rule/*/parkbrake-*`` and every
  rule of a ``parkbrake-*`` bus), and deleting those buses;
- deleting or changing the sweep's schedule (``schedule/parkbrake-*/parkbrake-*-reaper``) or the
  stacks' schedule groups; the nightly starts are left alone (pausing them is `parkbrake schedule
  pause` and `park --now`'s job, done as the engineer on call);
- deleting or changing a host's deadline and warning schedules (``schedule/parkbrake-*-deadlines/*``),
  where the extenders are excepted too: `parkbrake extend` moves them as the engineer who runs it;
- deleting or updating the spokes' CloudFormation stacks (``stack/parkbrake-*``, and a stack set's
  instances, which CloudFormation names ``StackSet-<set>-<id>``) and stack sets (``stackset/parkbrake-*``);
- creating, deleting or changing any ``role/parkbrake-*`` (to the deployers alone: a role of that name
  made by anyone else would be excepted from this policy), and passing one to Lambda or Scheduler;
- editing ``parkbrake:*`` tags on EC2 instances, volumes, launch templates and Auto Scaling groups: the
  same statements as the stack's own SCP (:func:`guardrails.guard_policy.tag_edit_statements`), the
  extenders allowed the extension's tags on EC2.

What an SCP may hold (AWS Organizations User Guide, orgs_manage_policies_scps_syntax.html): ``Deny``
statements with ``Action``, ``Resource`` and ``Condition`` (no ``Principal``: who is excepted is a
``aws:PrincipalArn`` condition, global and available on every request); every character counts
against the SCP's 5,120-character limit (orgs_reference_limits.html), whitespace included, so the
policy must fit minified. SCPs do not restrict the management account or service-linked roles: a
stack set with service-managed permissions deploys through one, and needs no deployer exception.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from guardrails import names
from guardrails.errors import InputError
from guardrails.guard_policy import SCP_SIZE_LIMIT, VERSION, check_role_patterns, tag_edit_statements

SPOKE = names.prefix("*")  # parkbrake-*: every stack's resource names begin so
SPOKE_ROLES = f"arn:*:iam::*:role/{SPOKE}"
FUNCTIONS = f"arn:*:lambda:*:*:function:{SPOKE}"


def minified(policy: dict[str, Any]) -> str:
    """The policy as AWS Organizations should be given it: no whitespace outside strings."""
    return json.dumps(policy, separators=(",", ":"))


# What the spokes are made of, and what would switch each off: (actions, resources), in one statement
# (an action only ever matches its own service's resources, so sharing a statement changes nothing).
SPOKE_RESOURCES: dict[str, tuple[list[str], list[str]]] = {
    "functions": (
        ["lambda:DeleteFunction*", "lambda:UpdateFunction*", "lambda:PutFunction*", "lambda:RemovePermission",
         "lambda:DeleteAlias", "lambda:UpdateAlias"],
        [FUNCTIONS],
    ),
    "rules": (
        ["events:DeleteRule", "events:DisableRule", "events:PutRule", "events:PutTargets", "events:RemoveTargets",
         "events:DeleteEventBus"],
        [f"arn:*:events:*:*:rule/{SPOKE}", f"arn:*:events:*:*:rule/*/{SPOKE}", f"arn:*:events:*:*:event-bus/{SPOKE}"],
    ),
    "sweep schedule": (
        ["scheduler:DeleteSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteScheduleGroup"],
        [f"arn:*:scheduler:*:*:schedule/{SPOKE}/{names.reaper_schedule('*')}",
         f"arn:*:scheduler:*:*:schedule-group/{SPOKE}"],
    ),
    "stacks": (
        ["cloudformation:DeleteStack*", "cloudformation:UpdateStack*", "cloudformation:DeleteStackSet",
         "cloudformation:UpdateTerminationProtection", "cloudformation:SetStackPolicy",
         "cloudformation:ExecuteChangeSet"],
        [f"arn:*:cloudformation:*:*:stack/{SPOKE}/*", f"arn:*:cloudformation:*:*:stack/StackSet-{SPOKE}/*",
         f"arn:*:cloudformation:*:*:stackset/{SPOKE}:*"],
    ),
}  # fmt: skip
ROLE_CHANGES = ["iam:CreateRole", "iam:DeleteRole*", "iam:UpdateRole*", "iam:UpdateAssumeRolePolicy",
                "iam:AttachRolePolicy", "iam:DetachRolePolicy", "iam:PutRole*"]  # fmt: skip
DEADLINE_SCHEDULES = f"arn:*:scheduler:*:*:schedule/{names.deadline_schedule_group('*')}/*"
PASSED_TO = ["lambda.amazonaws.com", "scheduler.amazonaws.com"]


def organisation_policy(deployer_roles: Sequence[str], extender_roles: Sequence[str] = ()) -> dict[str, Any]:
    """The SCP for the member accounts' OU; :class:`InputError` for unusable roles or an SCP too large."""
    _check_roles(deployer_roles, extender_roles)
    spokes_and_deployers = [SPOKE_ROLES, *deployer_roles]
    actions = [action for actions, _ in SPOKE_RESOURCES.values() for action in actions]
    resources = [resource for _, resources in SPOKE_RESOURCES.values() for resource in resources]
    policy = {
        "Version": VERSION,
        "Statement": [
            _deny("DenySpokeChanges", actions, resources, spokes_and_deployers),
            _deny(
                "DenySpokeEventSourceChanges",
                ["lambda:DeleteEventSourceMapping", "lambda:UpdateEventSourceMapping"],
                "*",
                spokes_and_deployers,
                {"ArnLike": {"lambda:FunctionArn": FUNCTIONS}},
            ),
            # `parkbrake extend` moves a host's deadline and warning schedules as the engineer who runs it.
            _deny(
                "DenyDeadlineScheduleChanges",
                ["scheduler:DeleteSchedule", "scheduler:UpdateSchedule"],
                DEADLINE_SCHEDULES,
                [*spokes_and_deployers, *extender_roles],
            ),
            # The deployers alone: the stacks' roles never make roles, and a new role/parkbrake-* would
            # be excepted from every statement here.
            _deny("DenySpokeRoleChanges", ROLE_CHANGES, SPOKE_ROLES, list(deployer_roles)),
            # A function or schedule of one's own running as a guardrail's role would be excepted too.
            _deny(
                "DenyPassingSpokeRoles",
                "iam:PassRole",
                SPOKE_ROLES,
                spokes_and_deployers,
                {"StringEquals": {"iam:PassedToService": PASSED_TO}},
            ),
            *tag_edit_statements(spokes_and_deployers, extender_roles),
        ],
    }
    size = len(minified(policy))
    if size > SCP_SIZE_LIMIT:
        raise InputError(
            f"--deployer-role/--extender-role: the policy would be {size} characters, over the SCP limit of "
            f"{SCP_SIZE_LIMIT}; name fewer roles, or cover them with one wildcard pattern"
        )
    return policy


def _deny(
    sid: str,
    actions: str | list[str],
    resources: str | list[str],
    excepted: Sequence[str],
    condition: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "Sid": sid,
        "Effect": "Deny",
        "Action": actions,
        "Resource": resources,
        "Condition": {**(condition or {}), "ArnNotLike": {"aws:PrincipalArn": list(excepted)}},
    }


def _check_roles(deployer_roles: Sequence[str], extender_roles: Sequence[str]) -> None:
    if not deployer_roles:
        raise InputError(
            "--deployer-role: give the role(s) that deploy the spokes (e.g. "
            "'arn:aws:iam::*:role/parkbrake-deployer'); without one nobody could update them"
        )
    check_role_patterns("--deployer-role", deployer_roles)
    check_role_patterns("--extender-role", extender_roles)
