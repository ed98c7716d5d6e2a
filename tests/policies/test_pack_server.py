"""The pack as the Pulumi CLI runs it: ``python -m pulumi.policy ENGINE policies/`` serving the analyzer
gRPC protocol, asked about itself, configured, and handed a stack to analyse over a real channel."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from policy_resources import compliant_stack, gpu_group, replacing
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from policies.registry import RULES
from stacks.offline import RegisteredResource

PACK_DIR = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:0", str(PACK_DIR)],
        cwd=PACK_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = process.stdout.readline().strip() if process.stdout else ""
        assert port.isdigit(), (
            f"the pack did not start: {port!r} {process.stderr.read() if process.stderr else ''}"
        )
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        process.terminate()
        process.wait(timeout=30)


def analyzer_resource(resource: RegisteredResource) -> analyzer_pb2.AnalyzerResource:
    properties = struct_pb2.Struct()
    properties.update(json.loads(json.dumps(resource.inputs)))
    return analyzer_pb2.AnalyzerResource(
        type=resource.type,
        name=resource.name,
        urn=resource.urn,
        parent=resource.parent or "",
        properties=properties,
    )


def analyse(
    analyzer: analyzer_pb2_grpc.AnalyzerStub, resources: list[RegisteredResource]
) -> list[tuple[str, str, str]]:
    request = analyzer_pb2.AnalyzeStackRequest(
        resources=[analyzer_resource(resource) for resource in resources]
    )
    response = analyzer.AnalyzeStack(request, timeout=60)
    return [
        (diagnostic.policyName, diagnostic.urn, diagnostic.message) for diagnostic in response.diagnostics
    ]


def test_the_pack_describes_every_rule_with_its_enforcement(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
    assert info.name == "parkbrake"
    levels = {analyzer_pb2.MANDATORY: "mandatory", analyzer_pb2.ADVISORY: "advisory"}
    assert [(policy.name, levels[policy.enforcementLevel]) for policy in info.policies] == [
        (rule.name, rule.enforcement) for rule in RULES
    ]
    schemas = {policy.name: set(policy.configSchema.properties) for policy in info.policies}
    assert schemas["gpu-pool-size-ceiling"] == {"maxPoolSize"}
    assert schemas["no-unconditional-stop"] == set()


def test_a_compliant_stack_gets_no_diagnostics(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    assert analyse(analyzer, compliant_stack()) == []


def test_a_violation_comes_back_mandatory_on_its_resource_and_config_applies(
    analyzer: analyzer_pb2_grpc.AnalyzerStub,
) -> None:
    oversized = replacing(compliant_stack(), gpu_group(max_size=9.0))
    ((policy, urn, message),) = analyse(analyzer, oversized)
    assert (policy, urn) == ("gpu-pool-size-ceiling", gpu_group().urn)
    assert message.endswith(
        "maxSize 9 is above the GPU pool ceiling of 8; lower it or raise the ceiling deliberately"
    )

    config = struct_pb2.Struct()
    config.update({"maxPoolSize": 10})
    analyzer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={
                "gpu-pool-size-ceiling": analyzer_pb2.PolicyConfig(
                    enforcementLevel=analyzer_pb2.MANDATORY, properties=config
                )
            }
        ),
        timeout=30,
    )
    assert analyse(analyzer, oversized) == []
