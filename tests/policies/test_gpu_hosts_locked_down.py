"""gpu-hosts-locked-down: IMDS out of the containers' reach, no public-index install, no broad host policy."""

from __future__ import annotations

import base64

import pytest
from policy_resources import compliant_stack, gpu_launch_template, replacing, resource, with_inputs

from policies.engine import judge
from policies.rule import PolicyContext
from policies.rules import gpu_hosts_locked_down
from stacks.offline import RegisteredResource


def messages(resources: list[RegisteredResource]) -> list[str]:
    verdict = judge(gpu_hosts_locked_down.RULE, resources, PolicyContext())
    return [violation.message for violation in verdict.violations]


def script(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_the_compliant_stack_passes() -> None:
    assert messages(compliant_stack()) == []


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2}},
         "httpPutResponseHopLimit is 2; it must be 1"),
        ({"metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 1}}, "IMDSv2 is not required"),
        ({"userData": script("#!/bin/bash\n/opt/venv/bin/pip install parkbrake==0.1\n")},
         "installs from a public package index at boot ('pip install parkbrake==0.1')"),
        ({"userData": script("pip3 install -r https://example.org/reqs.txt\n")}, "public package index"),
    ],
)  # fmt: skip
def test_a_gpu_template_that_exposes_imds_or_installs_from_an_index_fails(
    inputs: dict[str, object], expected: str
) -> None:
    template = with_inputs(gpu_launch_template(), **inputs)

    (found,) = messages(replacing(compliant_stack(), template))
    assert expected in found


def test_installing_the_stack_artifact_without_an_index_passes() -> None:
    offline = script(
        "pip install --no-index --no-deps --find-links /opt/t --require-hashes -r /opt/t/r.txt\n"
    )
    assert messages(replacing(compliant_stack(), with_inputs(gpu_launch_template(), userData=offline))) == []


@pytest.mark.parametrize(
    "broad",
    [
        resource("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "ssm",
                 {"role": "r", "policyArn": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"}),
        resource("aws:iam/role:Role", "host",
                 {"managedPolicyArns": ["arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role"]}),
        resource("aws:ecs/taskDefinition:TaskDefinition", "inference", {"family": "f", "executionRoleArn": "x"}),
    ],
    ids=["ssm-core", "ecs-instance-role", "task-definition-without-task-role"],
)  # fmt: skip
def test_broad_host_policies_and_role_less_tasks_fail(broad: RegisteredResource) -> None:
    (found,) = messages([broad])
    assert ("broader than a host needs" in found) or ("has no task role" in found)
