"""GPU hosts run nothing from a public index, keep IMDS from their containers, and get no broad AWS policy.

- An accelerator launch template requires IMDSv2 with a hop limit of 1: a container one hop away cannot
  reach the instance role's credentials (each ECS task has a task role of its own instead).
- Its user data installs nothing from a public package index (``pip install`` without ``--no-index``):
  the host tools come from the stack's hash-checked artifact or a baked AMI.
- No role in the stack gets an AWS-managed policy broader than a host needs (Session Manager's
  ``AmazonSSMManagedInstanceCore`` reads every SSM parameter; the ECS instance role joins any cluster).
- Every ECS task definition names its own task role.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Sequence

from policies.resources import LAUNCH_TEMPLATE, accelerator_hosts, mapping, of_type, text
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation

TASK_DEFINITION = "aws:ecs/taskDefinition:TaskDefinition"
POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ROLE = "aws:iam/role:Role"
BROAD_HOST_POLICIES = frozenset({
    "AmazonSSMManagedInstanceCore",
    "AmazonEC2RoleforSSM",
    "AmazonSSMFullAccess",
    "AmazonEC2ContainerServiceforEC2Role",
    "AmazonEC2ContainerRegistryReadOnly",
})  # fmt: skip
PIP_INSTALL = re.compile(r"\bpip3?(?:\.\d+)?\s+install\b[^\n]*")


def _user_data(template: ResourceView) -> str | None:
    raw = text(template.inputs.get("userData"))
    if raw is None:
        return None
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return raw  # not base64: the script as it is


def _launch_template_problems(template: ResourceView) -> Iterator[str]:
    metadata = mapping(template.inputs.get("metadataOptions"))
    if metadata.get("httpTokens") != "required":
        yield "IMDSv2 is not required (metadataOptions.httpTokens must be 'required')"
    hops = metadata.get("httpPutResponseHopLimit")
    if hops != 1:
        yield (
            f"metadataOptions.httpPutResponseHopLimit is {hops!r}; it must be 1 so containers cannot reach "
            "the host role's credentials"
        )
    script = _user_data(template) or ""
    for command in PIP_INSTALL.findall(script):
        if "--no-index" not in command:
            yield (
                f"its user data installs from a public package index at boot ({command.strip()!r}); install "
                "the stack's hash-checked host-tools artifact (hosts.tools_artifact) or bake an AMI"
            )


def _broad_policy(arn: object) -> str | None:
    name = text(arn)
    if name and ":iam::aws:policy/" in name and name.rsplit("/", 1)[-1] in BROAD_HOST_POLICIES:
        return name
    return None


def host_problems(resources: Sequence[ResourceView], _context: PolicyContext) -> Iterator[Violation]:
    for template in accelerator_hosts(resources):
        if template.type == LAUNCH_TEMPLATE:
            yield from (Violation(template.urn, message) for message in _launch_template_problems(template))
    for attachment in of_type(resources, POLICY_ATTACHMENT):
        broad = _broad_policy(attachment.inputs.get("policyArn"))
        if broad:
            yield Violation(
                attachment.urn, f"attaches {broad}, broader than a host needs; grant scoped statements"
            )
    for role in of_type(resources, ROLE):
        for arn in role.inputs.get("managedPolicyArns") or ():
            broad = _broad_policy(arn)
            if broad:
                yield Violation(
                    role.urn, f"attaches {broad}, broader than a host needs; grant scoped statements"
                )
    for definition in of_type(resources, TASK_DEFINITION):
        if not definition.inputs.get("taskRoleArn"):
            yield Violation(
                definition.urn,
                f"task definition {definition.name} has no task role: its containers would fall back to the "
                "host's credentials; give each service a task role of its own",
            )


RULE = PolicyRule(
    name="gpu-hosts-locked-down",
    description=(
        "Accelerator launch templates require IMDSv2 with hop limit 1 and install nothing from a public package "
        "index at boot; no role gets a broad AWS-managed host policy; every ECS task definition has a task role."
    ),
    enforcement="mandatory",
    check=host_problems,
)
