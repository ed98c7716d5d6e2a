"""``parkbrake park --now`` / ``unpark --now`` on a Kubernetes stack (eks): the AWS actions against moto
and the cluster's — ClusterQueues HoldAndDrain, GPU limits "0", GPU Deployments 0, the stack's
NodeClaims deleted — against the FAKE API server (tests/cli/k8s/fake_api_server.py, not Kubernetes),
listed in one table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from guardrails import names
from tests.cli.k8s.fake_api_server import FakeApiServer, fake_api_server
from tests.cli.k8s.test_k8s_park import put_cluster
from tests.cli.oncall.ops_fleet import REPO_ROOT, aws_client, parameter

STACK, REGION = "eks", "us-east-1"  # Pulumi.eks.yaml's aws:region
PARAMETER = names.park_parameter(STACK)
OURS = ["product-inference-a1b2c", "research-training-x7k2p"]


@pytest.fixture
def fake(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # never a real pod's cluster
    aws_client(aws, "ssm", REGION).put_parameter(Name=PARAMETER, Value="false", Type="String")
    with fake_api_server() as server:
        put_cluster(server)
        yield server


def invoke(command: str, fake: FakeApiServer, *extra: str, token_file: Path | None = None) -> Result:
    return CliRunner().invoke(
        parkbrake,
        [command, "--now", "--stack", STACK, "--project-dir", str(REPO_ROOT), "--server", fake.url,
         "--token-file", str(token_file or fake.token_file), "--ca-file", str(fake.ca_file), *extra],
    )  # fmt: skip


def policies(fake: FakeApiServer) -> tuple[Any, ...]:
    return tuple(
        fake.get("clusterqueues", "", name)["spec"].get("stopPolicy")
        for name in ("research", "product", "another-team")
    )


def statuses(report: dict[str, Any], kind: str) -> dict[str, str]:
    return {action["name"]: action["status"] for action in report["actions"] if action["kind"] == kind}


def test_park_now_parks_aws_and_the_cluster_and_unpark_now_restores_both(
    aws: str, fake: FakeApiServer
) -> None:
    parked = invoke("park", fake, "--yes")

    assert parked.exit_code == 0, parked.output
    assert parameter(aws, PARAMETER) == "true"
    assert policies(fake) == ("HoldAndDrain", "HoldAndDrain", None)  # another team's queue left alone
    assert sorted(fake.deleted) == OURS
    assert "clusterqueue" in parked.output  # one table, both kinds
    assert "nodeclaim" in parked.output
    assert fake.get("nodepools", "", "research-training")["spec"]["limits"] == {"nvidia.com/gpu": "0"}
    assert fake.get("deployments", "parkbrake", "inference")["spec"]["replicas"] == 0

    unparked = invoke("unpark", fake, "--yes", "-o", "json")

    assert unparked.exit_code == 0, unparked.output
    report = json.loads(unparked.stdout)
    assert statuses(report, "clusterqueue") == {"product": "done", "research": "done"}
    assert statuses(report, "nodepool") == {"product-inference": "done", "research-training": "done"}
    assert statuses(report, "deployment") == {"inference": "done"}
    assert statuses(report, "ssm-parameter") == {PARAMETER: "done"}
    assert parameter(aws, PARAMETER) == "false"
    assert policies(fake) == ("None", "Hold", None)  # each as it was before parking


def test_dry_run_lists_the_cluster_actions_and_changes_nothing(aws: str, fake: FakeApiServer) -> None:
    result = invoke("park", fake, "--dry-run", "-o", "json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert statuses(report, "clusterqueue") == {"product": "planned", "research": "planned"}
    assert statuses(report, "nodeclaim") == dict.fromkeys(OURS, "planned")
    assert statuses(report, "ssm-parameter") == {PARAMETER: "planned"}
    assert (parameter(aws, PARAMETER), policies(fake), fake.deleted) == ("false", (None, "Hold", None), [])


def test_without_yes_or_a_terminal_nothing_is_changed(aws: str, fake: FakeApiServer) -> None:
    result = invoke("park", fake)

    assert result.exit_code == 2
    assert "Refusing without --yes" in result.output
    assert (parameter(aws, PARAMETER), policies(fake), fake.deleted) == ("false", (None, "Hold", None), [])


def test_a_cluster_that_refuses_is_listed_and_the_aws_brake_still_holds(
    aws: str, fake: FakeApiServer, tmp_path: Path
) -> None:
    wrong = tmp_path / "token"
    wrong.write_text("not-the-token\n")

    parked = invoke("park", fake, "--yes", "-o", "json", token_file=wrong)

    assert parked.exit_code == 1
    report = json.loads(parked.stdout)
    assert statuses(report, "clusterqueue") == {"*": "failed"}
    assert statuses(report, "nodeclaim") == {"*": "failed"}
    assert "401" in next(a["error"] for a in report["actions"] if a["kind"] == "clusterqueue")
    assert parameter(aws, PARAMETER) == "true"  # the launcher refuses although the cluster did not answer
    assert invoke("park", fake, "--yes").exit_code == 0

    unparked = invoke("unpark", fake, "--yes", "-o", "json", token_file=wrong)

    assert unparked.exit_code == 1
    report = json.loads(unparked.stdout)
    assert statuses(report, "ssm-parameter") == {PARAMETER: "skipped"}  # stays parked while queues hold
    assert parameter(aws, PARAMETER) == "true"
    assert policies(fake) == ("HoldAndDrain", "HoldAndDrain", None)


def test_bad_cluster_options_are_one_line_exit_2_before_anything_changes(
    aws: str, fake: FakeApiServer
) -> None:
    without_server = CliRunner().invoke(
        parkbrake, ["park", "--now", "--yes", "--stack", STACK, "--project-dir", str(REPO_ROOT)]
    )
    on_aws_stack = CliRunner().invoke(
        parkbrake, ["park", "--now", "--yes", "--stack", "dev", "--project-dir", str(REPO_ROOT),
                    "--server", fake.url],
    )  # fmt: skip
    without_now = CliRunner().invoke(
        parkbrake, ["park", "--stack", STACK, "--project-dir", str(REPO_ROOT), "--server", fake.url]
    )

    assert without_server.exit_code == 2
    assert "--server" in without_server.output
    assert "Traceback" not in without_server.output
    assert on_aws_stack.exit_code == 2
    assert "no parkbrake:kubernetes section" in on_aws_stack.output
    assert without_now.exit_code == 2
    assert "--server goes with --now" in without_now.output
    assert (parameter(aws, PARAMETER), policies(fake), fake.deleted) == ("false", (None, "Hold", None), [])
