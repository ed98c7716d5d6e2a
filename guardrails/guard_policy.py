"""The preventive controls: IAM policy documents that keep accelerator hosts inside the guardrails.

The sweep finds and reports what escaped; these documents stop the escape at the API. They deny:
- ``ec2:RunInstances`` of an accelerator type without ``parkbrake:managed=true`` or without a
  ``parkbrake:max-runtime`` tag in the request (the tags must be given at launch), or with a
  ``parkbrake:max-runtime`` whose shape reaches past the stack's runtime ceiling
  (:mod:`guardrails.duration_patterns`: IAM compares strings, it cannot parse a duration);
- creating, changing or deleting any ``parkbrake:*`` tag on an existing instance, volume, launch
  template or Auto Scaling group, except by the stack's own roles (its guardrail functions and
  scheduler, ``parkbrake-<stack>-*``) and the deployer roles named, so nobody can take a host out of
  the guardrails by editing its tags;
- the extenders named (the roles people run ``parkbrake extend`` as) excepted from that on EC2 for
  the extension's own tags only (:data:`EXTENSION_TAGS`): any other ``parkbrake:*`` tag in their
  request (``parkbrake:managed``, ``parkbrake:max-runtime``, ...) is still denied, and so is every
  ``parkbrake:*`` tag on an Auto Scaling group. How far an extension may reach is not the policy's
  to say: ``parkbrake extend`` refuses one past the exemption limit, and the sweep and the deadlines
  honour an exemption only up to it, however it was tagged.

The same statements serve as a service control policy (attached to an AWS Organizations account or
unit: SCPs only deny) and as a permissions boundary (attached to a role or user: a boundary must also
allow, so it starts with an allow-everything statement that the denies then narrow).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from guardrails import names, tags
from guardrails.duration_patterns import SKIPPED_UNITS, duration_patterns
from guardrails.errors import InputError
from guardrails.instance_types import accelerator_filter_values
from guardrails.settings_table import DEFAULTS

# The default of PARKBRAKE_MAX_RUNTIME_CEILING, from the settings table (pure, as this module is).
DEFAULT_MAX_RUNTIME_CEILING = DEFAULTS.max_runtime_ceiling

VERSION = "2012-10-17"
TAG_PATTERN = "parkbrake:*"
ROLE_ARN_PREFIX = "arn:"
SCP_SIZE_LIMIT = 5120  # characters, whitespace included, as AWS Organizations counts them
# What `parkbrake extend` writes (guardrails.extension.Extension.tags): all an extender may tag.
EXTENSION_TAGS = (tags.EXEMPT_UNTIL, tags.EXTENDED_BY, tags.EXTENDED_AT, tags.EXTENSION_REASON)


def check_role_patterns(option: str, roles: Sequence[str]) -> None:
    """A role ARN or a pattern of them (``*`` and ``?`` allowed), refused with the option's name when it
    is not one or would match every role (an exception for everyone is no guardrail)."""
    for arn in roles:
        if not arn.startswith(ROLE_ARN_PREFIX) or ":role/" not in arn:
            raise InputError(f"{option}: {arn} is not a role ARN (arn:aws:iam::ACCOUNT:role/NAME)")
        if not arn.split(":role/", 1)[1].strip("*?/"):
            raise InputError(f"{option}: {arn} matches every role; name the role (wildcards within a name)")


def stack_role_pattern(stack: str) -> str:
    """Every IAM role the stack creates for its guardrails is named ``parkbrake-<stack>-<what>``."""
    return f"arn:*:iam::*:role/{names.prefix(stack)}-*"


def guard_statements(
    stack: str,
    deployer_roles: Sequence[str] = (),
    extender_roles: Sequence[str] = (),
    ceiling: timedelta = DEFAULT_MAX_RUNTIME_CEILING,
) -> list[dict[str, Any]]:
    """The deny statements shared by the SCP and the permissions boundary."""
    allowed_principals = [stack_role_pattern(stack), *deployer_roles]
    return [*_launch_statements(ceiling), *tag_edit_statements(allowed_principals, extender_roles)]


def _launch_statements(ceiling: timedelta) -> list[dict[str, Any]]:
    """An accelerator host launched unmanaged, without a cap, or with a cap beyond ``ceiling`` is denied."""
    accelerators = {"StringLike": {"ec2:InstanceType": accelerator_filter_values()}}
    return [
        {
            "Sid": "DenyAcceleratorsNotManaged",
            "Effect": "Deny",
            "Action": "ec2:RunInstances",
            "Resource": "arn:*:ec2:*:*:instance/*",
            "Condition": {
                **accelerators,
                "StringNotEquals": {f"aws:RequestTag/{tags.MANAGED}": "true"},
            },
        },
        {
            "Sid": "DenyAcceleratorsWithoutMaxRuntime",
            "Effect": "Deny",
            "Action": "ec2:RunInstances",
            "Resource": "arn:*:ec2:*:*:instance/*",
            "Condition": {**accelerators, "Null": {f"aws:RequestTag/{tags.MAX_RUNTIME}": "true"}},
        },
        {
            # Present is not enough: a cap of 9999999999d, or 900h, is denied at launch.
            "Sid": "DenyAcceleratorsWithAMaxRuntimeBeyondTheCeiling",
            "Effect": "Deny",
            "Action": "ec2:RunInstances",
            "Resource": "arn:*:ec2:*:*:instance/*",
            "Condition": {
                **accelerators,
                "StringNotLike": {f"aws:RequestTag/{tags.MAX_RUNTIME}": duration_patterns(ceiling)},
            },
        },
        {
            # What the patterns' "?" cannot tell apart: 9d9m matches ???m (see SKIPPED_UNITS).
            "Sid": "DenyAcceleratorsWithAMaxRuntimeSkippingUnits",
            "Effect": "Deny",
            "Action": "ec2:RunInstances",
            "Resource": "arn:*:ec2:*:*:instance/*",
            "Condition": {
                "StringLike": {
                    **accelerators["StringLike"],
                    f"aws:RequestTag/{tags.MAX_RUNTIME}": list(SKIPPED_UNITS),
                }
            },
        },
    ]


def tag_edit_statements(
    allowed_principals: Sequence[str], extender_roles: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Deny editing ``parkbrake:*`` tags on EC2 and Auto Scaling but by ``allowed_principals`` (ARN
    patterns), and by the extenders for the extension's tags only: the stack's SCP and the
    organisation's (:mod:`guardrails.org_policy`) both hold these."""
    return [
        {
            # Tags given at launch (ec2:CreateAction is set) are no edit: the launch rules judge those.
            "Sid": "DenyParkbrakeTagEditsOnEC2",
            "Effect": "Deny",
            "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
            "Resource": "*",
            "Condition": {
                "ForAnyValue:StringLike": {"aws:TagKeys": [TAG_PATTERN]},
                "Null": {"ec2:CreateAction": "true"},
                "ArnNotLike": {"aws:PrincipalArn": [*allowed_principals, *extender_roles]},
            },
        },
        *_extender_statements(extender_roles),
        {
            "Sid": "DenyParkbrakeTagEditsOnAutoScaling",
            "Effect": "Deny",
            "Action": ["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"],
            "Resource": "*",
            "Condition": {
                "ForAnyValue:StringLike": {"aws:TagKeys": [TAG_PATTERN]},
                "ArnNotLike": {"aws:PrincipalArn": allowed_principals},
            },
        },
    ]


def _extender_statements(extender_roles: Sequence[str]) -> list[dict[str, Any]]:
    """An extender's EC2 tag edit that holds any ``parkbrake:*`` key beyond the extension's is denied
    (a request of only the extension's tags passes: none of its keys falls outside them)."""
    if not extender_roles:
        return []
    return [
        {
            "Sid": "DenyExtendersBeyondTheExtensionTags",
            "Effect": "Deny",
            "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
            "Resource": "*",
            "Condition": {
                "ForAnyValue:StringLike": {"aws:TagKeys": [TAG_PATTERN]},
                "ForAnyValue:StringNotEquals": {"aws:TagKeys": list(EXTENSION_TAGS)},
                "Null": {"ec2:CreateAction": "true"},
                "ArnLike": {"aws:PrincipalArn": list(extender_roles)},
            },
        }
    ]


def service_control_policy(
    stack: str,
    deployer_roles: Sequence[str] = (),
    extender_roles: Sequence[str] = (),
    ceiling: timedelta = DEFAULT_MAX_RUNTIME_CEILING,
) -> dict[str, Any]:
    return {"Version": VERSION, "Statement": guard_statements(stack, deployer_roles, extender_roles, ceiling)}


def permissions_boundary(
    stack: str,
    deployer_roles: Sequence[str] = (),
    extender_roles: Sequence[str] = (),
    ceiling: timedelta = DEFAULT_MAX_RUNTIME_CEILING,
) -> dict[str, Any]:
    """A boundary grants nothing by itself: the role's own policies still decide what is allowed."""
    allow_within = {"Sid": "AllowWithinTheBoundary", "Effect": "Allow", "Action": "*", "Resource": "*"}
    statements = guard_statements(stack, deployer_roles, extender_roles, ceiling)
    return {"Version": VERSION, "Statement": [allow_within, *statements]}
