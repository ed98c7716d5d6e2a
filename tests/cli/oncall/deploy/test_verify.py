"""``parkbrake verify`` against moto's server: through the real ECS API where moto can answer it
(a service created on its task definition, tasks started with RunTask), and with the simulated
scheduler for what moto cannot play (new deployments, circuit-breaker rollbacks)."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from cli.oncall.deploy.revision_checks import RevisionReport, check_service, verify_revision
from cli.oncall.deploy.revisions import ImageReference
from cli.oncall.deploy.runtime import Runtime
from cli.oncall.ecs import EcsRolloutSource
from guardrails.errors import InputError
from tests.cli.oncall.deploy.inference_fleet import (
    NEW_REVISION,
    OLD_REVISION,
    OTHER_REVISION,
    STACK,
    InferenceFleet,
    SimulatedScheduler,
    VirtualClock,
    build_fleet,
    register_revision,
    runtime,
)


def verify_cli(obj: Runtime | None, *args: str) -> tuple[int, str]:
    outcome = CliRunner().invoke(parkbrake, ["verify", *args], obj=obj)
    assert "Traceback" not in outcome.output
    return outcome.exit_code, outcome.output


def failed_checks(document: dict[str, object]) -> dict[str, str]:
    checks = document["checks"]
    assert isinstance(checks, list)
    return {f"{c['subject']} {c['name']}": c["detail"] for c in checks if not c["passed"]}


# -- through the real ECS API ----------------------------------------------------------------------------


@pytest.fixture
def moto_tasks_stay_running(aws: str) -> Iterator[None]:
    """moto walks a task from RUNNING to STOPPED as it is described; hold it at RUNNING for the test."""

    def post(path: str, body: dict[str, object]) -> None:
        request = urllib.request.Request(
            f"{aws}/moto-api/state-manager/{path}", data=json.dumps(body).encode(), method="POST"
        )
        urllib.request.urlopen(request, timeout=10).close()

    post(
        "set-transition", {"model_name": "ecs::task", "transition": {"progression": "manual", "times": 10**9}}
    )
    yield
    post("unset-transition", {"model_name": "ecs::task"})


@pytest.fixture
def running_fleet(
    aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto_tasks_stay_running: None
) -> InferenceFleet:
    """Blue serving OLD_REVISION as moto reports it: a COMPLETED deployment and one RUNNING task."""
    monkeypatch.setenv("MOTO_ECS_SERVICE_RUNNING", "1")  # moto's services report that many running
    fleet = build_fleet(tmp_path / "project")
    start_task(fleet, fleet.old_task_definition)
    return fleet


def start_task(fleet: InferenceFleet, task_definition: str) -> None:
    """A task of the blue service on a GPU host of the pool, placed as ECS's scheduler would."""
    ecs = fleet.clients.ecs
    registered = ecs.list_container_instances(cluster=fleet.cluster)["containerInstanceArns"]
    hosts = [item["InstanceId"] for item in fleet.group()["Instances"]]
    for host in hosts[len(registered) :]:  # one GPU each: a host per task
        ecs.register_container_instance(
            cluster=fleet.cluster, instanceIdentityDocument=json.dumps({"instanceId": host})
        )
    deployment = fleet.service("blue")["deployments"][0]["id"]
    started = ecs.run_task(
        cluster=fleet.cluster,
        taskDefinition=task_definition,
        group=f"service:{fleet.services['blue']}",
        startedBy=deployment,
        launchType="EC2",
    )
    assert len(started["tasks"]) == 1


def test_a_service_running_the_revision_verifies(running_fleet: InferenceFleet) -> None:
    code, output = verify_cli(
        None, "inference", "--revision", OLD_REVISION, "--stack", STACK, "--output", "json"
    )

    assert code == 0, output
    document = json.loads(output)
    assert document["passed"] is True
    assert [(c["subject"], c["name"], c["passed"]) for c in document["checks"]] == [
        ("inference-blue", "primary-deployment", True),
        ("inference-blue", "revision-label", True),
        ("inference-blue", "image-digest", True),
        ("inference-blue", "other-deployments", True),
        ("inference-blue", "running-tasks", True),
        ("inference-blue", "listener-routes", True),
    ]
    code, output = verify_cli(None, "inference", "--revision", OLD_REVISION, "--stack", STACK)
    assert code == 0
    assert "inference runs 3f2c1ab" in output


def test_another_revision_does_not_verify(running_fleet: InferenceFleet) -> None:
    code, output = verify_cli(None, "inference", "--revision", NEW_REVISION, "--output", "json")

    assert code == 1
    failures = failed_checks(json.loads(output))
    assert set(failures) == {"inference-blue revision-label", "inference-blue listener-routes"}
    assert f"label parkbrake.revision is {OLD_REVISION}" in failures["inference-blue revision-label"]
    assert failures["inference-blue listener-routes"] == (
        f"listener :80 default action 100% of the traffic goes to inference-blue, which runs "
        f"parkbrake-dev-inference:1 (revision {OLD_REVISION}), not {NEW_REVISION}"
    )


def test_a_digest_other_than_the_revisions_image_fails(running_fleet: InferenceFleet) -> None:
    fleet = running_fleet
    code, output = verify_cli(
        None, "inference", "--revision", OLD_REVISION, "--image", fleet.image("v1"), "--output", "json"
    )

    assert code == 1
    failures = failed_checks(json.loads(output))
    assert set(failures) == {"inference-blue image-digest"}
    detail = failures["inference-blue image-digest"]
    assert fleet.digests["v0"] in detail
    assert fleet.digests["v1"] in detail
    # The image it was built as does verify.
    code, _ = verify_cli(None, "inference", "--revision", OLD_REVISION, "--image", fleet.image("v0"))
    assert code == 0


def test_a_task_on_another_task_definition_fails(running_fleet: InferenceFleet) -> None:
    fleet = running_fleet
    fleet.clients.autoscaling.set_desired_capacity(
        AutoScalingGroupName=fleet.autoscaling_group, DesiredCapacity=2
    )
    stray = register_revision(fleet.clients.ecs, f"{fleet.repository}@{fleet.digests['v2']}", OTHER_REVISION)
    start_task(fleet, stray)

    code, output = verify_cli(None, "inference", "--revision", OLD_REVISION, "--output", "json")

    assert code == 1
    failures = failed_checks(json.loads(output))
    assert failures == {"inference-blue running-tasks": "tasks running another task definition: 1 of 2"}


def test_an_unknown_service_or_stack_is_a_clear_error(running_fleet: InferenceFleet) -> None:
    code, output = verify_cli(None, "embeddings", "--revision", OLD_REVISION)
    assert code == 2
    assert "unknown service 'embeddings'" in output
    assert "inference-blue, inference-green" in output

    code, output = verify_cli(None, "inference", "--revision", OLD_REVISION, "--stack", "prod")
    assert code == 2
    assert "no ECS cluster 'parkbrake-prod' in us-east-1: stack 'prod' is not deployed there — " in output


# -- what moto cannot play: the simulated scheduler --------------------------------------------------------


@pytest.fixture
def fleet(aws: str, tmp_path: Path) -> InferenceFleet:
    return build_fleet(tmp_path / "project")


def update_blue(fleet: InferenceFleet, revision: str, image: str) -> str:
    """A rolling update of the live colour, as ECS runs one; returns the deployment it started."""
    definition = register_revision(fleet.clients.ecs, image, revision)
    answer = fleet.clients.ecs.update_service(
        cluster=fleet.cluster,
        service=fleet.services["blue"],
        taskDefinition=definition,
        forceNewDeployment=True,
    )
    return str(answer["service"]["deployments"][0]["id"])


def verify(
    fleet: InferenceFleet, scheduler: SimulatedScheduler, revision: str, url: str | None = None
) -> RevisionReport:
    return verify_revision(
        fleet.clients.ecs, fleet.clients.elbv2, scheduler, cluster=fleet.cluster, service="inference",
        revision=revision, url=url,
    )  # fmt: skip


def test_a_circuit_breaker_rollback_is_reported_as_a_rollback(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet, failing={NEW_REVISION}, circuit_breaker=True)
    deployment = update_blue(fleet, NEW_REVISION, f"{fleet.repository}@{fleet.digests['v1']}")
    for _ in range(4):
        scheduler.tick()
    # What a services_stable waiter sees: one PRIMARY deployment, COMPLETED, all tasks running.
    primary = scheduler.rollout(fleet.cluster, fleet.services["blue"]).primary
    assert primary is not None
    assert (primary.rollout_state, primary.running_count) == ("COMPLETED", 1)

    report = verify(fleet, scheduler, NEW_REVISION)

    assert not report.passed
    failures = {check.name: check.detail for check in report.failures}
    assert set(failures) == {"primary-deployment", "revision-label", "listener-routes"}
    assert failures["primary-deployment"].startswith(
        f"rolled back to parkbrake-dev-inference:1 (revision {OLD_REVISION}), not {NEW_REVISION}"
    )
    assert "circuit breaker" in failures["primary-deployment"]
    # A deploy that recorded its own deployment id judges by it.
    by_id = check_service(
        fleet.clients.ecs, scheduler, fleet.cluster, fleet.services["blue"], NEW_REVISION,
        expected_deployment=deployment,
    )  # fmt: skip
    assert f"the deploy's deployment {deployment} is no longer PRIMARY" in by_id[0].detail
    # And the CLI says so, exiting non-zero.
    obj = runtime(fleet, scheduler, VirtualClock(scheduler))
    code, output = verify_cli(obj, "inference", "--revision", NEW_REVISION, "--output", "json")
    assert code == 1
    assert (
        failed_checks(json.loads(output))["inference-blue primary-deployment"]
        == failures["primary-deployment"]
    )


def test_a_rollout_in_progress_does_not_verify_until_it_completes(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    update_blue(fleet, NEW_REVISION, f"{fleet.repository}@{fleet.digests['v1']}")

    report = verify(fleet, scheduler, NEW_REVISION)

    failures = {check.name: check.detail for check in report.failures}
    assert set(failures) == {"primary-deployment", "other-deployments", "running-tasks"}
    assert "IN_PROGRESS" in failures["primary-deployment"]
    assert "1 running" in failures["other-deployments"]
    scheduler.tick()
    assert verify(fleet, scheduler, NEW_REVISION).passed


def test_during_a_canary_both_colours_must_run_the_revision(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    fleet.clients.autoscaling.set_desired_capacity(
        AutoScalingGroupName=fleet.autoscaling_group, DesiredCapacity=2
    )
    definition = register_revision(
        fleet.clients.ecs, f"{fleet.repository}@{fleet.digests['v1']}", NEW_REVISION
    )
    fleet.clients.ecs.update_service(
        cluster=fleet.cluster, service=fleet.services["green"], taskDefinition=definition, desiredCount=1,
        forceNewDeployment=True,
    )  # fmt: skip
    scheduler.tick()
    fleet.clients.elbv2.modify_listener(
        ListenerArn=fleet.listener_arn,
        DefaultActions=[{"Type": "forward", "ForwardConfig": {"TargetGroups": [
            {"TargetGroupArn": fleet.target_groups["blue"], "Weight": 90},
            {"TargetGroupArn": fleet.target_groups["green"], "Weight": 10},
        ]}}],
    )  # fmt: skip

    report = verify(fleet, scheduler, NEW_REVISION)

    assert {check.subject for check in report.checks} == {"inference-blue", "inference-green"}
    assert {(check.subject, check.name) for check in report.failures} == {
        ("inference-blue", "revision-label"),
        ("inference-blue", "listener-routes"),
    }
    routes = {check.subject: check.detail for check in report.checks if check.name == "listener-routes"}
    assert routes["inference-blue"].startswith("listener :80 default action 90% of the traffic")
    assert routes["inference-green"] == f"runs {NEW_REVISION}; traffic from listener :80 default action 10%"


def test_a_listener_rule_sending_traffic_to_the_old_colour_fails_naming_the_rule(
    fleet: InferenceFleet,
) -> None:
    """The default action sends everything to green (NEW), but a path rule still sends /* to blue."""
    scheduler = SimulatedScheduler(fleet)
    fleet.clients.autoscaling.set_desired_capacity(
        AutoScalingGroupName=fleet.autoscaling_group, DesiredCapacity=2
    )
    definition = register_revision(
        fleet.clients.ecs, f"{fleet.repository}@{fleet.digests['v1']}", NEW_REVISION
    )
    fleet.clients.ecs.update_service(
        cluster=fleet.cluster, service=fleet.services["green"], taskDefinition=definition, desiredCount=1,
        forceNewDeployment=True,
    )  # fmt: skip
    scheduler.tick()
    elbv2 = fleet.clients.elbv2
    elbv2.modify_listener(
        ListenerArn=fleet.listener_arn,
        DefaultActions=[{"Type": "forward", "ForwardConfig": {"TargetGroups": [
            {"TargetGroupArn": fleet.target_groups["blue"], "Weight": 0},
            {"TargetGroupArn": fleet.target_groups["green"], "Weight": 100},
        ]}}],
    )  # fmt: skip
    elbv2.create_rule(
        ListenerArn=fleet.listener_arn,
        Priority=10,
        Conditions=[{"Field": "path-pattern", "PathPatternConfig": {"Values": ["/*"]}}],
        Actions=[{"Type": "forward", "TargetGroupArn": fleet.target_groups["blue"]}],
    )

    report = verify(fleet, scheduler, NEW_REVISION)

    assert not report.passed
    routes = {check.subject: check for check in report.checks if check.name == "listener-routes"}
    assert routes["inference-green"].passed
    assert not routes["inference-blue"].passed
    assert routes["inference-blue"].detail.startswith(
        "listener :80 rule 10 (path-pattern /*) 100% of the traffic goes to inference-blue"
    )
    assert f"(revision {OLD_REVISION}), not {NEW_REVISION}" in routes["inference-blue"].detail
    # Without the rule, the same state verifies.
    rule = next(
        r for r in elbv2.describe_rules(ListenerArn=fleet.listener_arn)["Rules"] if not r["IsDefault"]
    )
    elbv2.delete_rule(RuleArn=rule["RuleArn"])
    assert verify(fleet, scheduler, NEW_REVISION).passed


def test_an_image_pinned_only_by_tag_cannot_be_proven(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    update_blue(fleet, NEW_REVISION, "docker.io/acme/inference:latest")
    scheduler.tick()

    failures = {check.name: check.detail for check in verify(fleet, scheduler, NEW_REVISION).failures}

    assert failures == {
        "image-digest": "docker.io/acme/inference:latest is not pinned to a digest; what runs cannot be proven"
    }


@contextmanager
def version_server(body: str, content_type: str = "text/plain", status: int = 200) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 answering GET /version."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = body.encode()
            self.send_response(status if self.path == "/version" else 404)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_version_endpoint_answering_another_revision_fails(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    obj = runtime(fleet, scheduler, VirtualClock(scheduler))
    with version_server(f"{OTHER_REVISION}\n") as url:
        code, output = verify_cli(
            obj, "inference", "--revision", OLD_REVISION, "--url", url, "--output", "json"
        )

    assert code == 1
    failures = failed_checks(json.loads(output))
    assert failures == {
        f"{url}/version version-endpoint": f"answers '{OTHER_REVISION}', expected {OLD_REVISION}"
    }


def test_a_version_endpoint_answering_the_revision_in_json_passes(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    obj = runtime(fleet, scheduler, VirtualClock(scheduler))
    body = json.dumps({"revision": OLD_REVISION, "built": "2026-03-01"})
    with version_server(body, "application/json") as url:
        code, output = verify_cli(obj, "inference", "--revision", OLD_REVISION, "--url", url + "/")

    assert code == 0, output


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [("oops", 500, "HTTP Error 500"), ('{"version": "x"}', 200, 'no string "revision"')],
)
def test_a_version_endpoint_that_cannot_answer_fails(
    fleet: InferenceFleet, body: str, status: int, expected: str
) -> None:
    scheduler = SimulatedScheduler(fleet)
    with version_server(body, status=status) as url:
        report = verify(fleet, scheduler, OLD_REVISION, url=url)

    assert [check.name for check in report.failures] == ["version-endpoint"]
    assert expected in report.failures[0].detail


def test_the_real_source_reads_moto_deployments(running_fleet: InferenceFleet) -> None:
    rollout = EcsRolloutSource(running_fleet.clients.ecs).rollout(
        running_fleet.cluster, running_fleet.services["blue"]
    )

    assert rollout.primary is not None
    assert rollout.primary.task_definition == running_fleet.old_task_definition
    assert [task.task_definition for task in rollout.tasks] == [running_fleet.old_task_definition]


# -- image references ------------------------------------------------------------------------------------

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "repository", "tag", "digest", "ecr"),
    [
        ("nginx", "nginx", None, None, None),
        ("localhost:5000/team/app:1.2", "localhost:5000/team/app", "1.2", None, None),
        (f"public.ecr.aws/x/app@{DIGEST}", "public.ecr.aws/x/app", None, DIGEST, None),
        (
            f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/app:v3@{DIGEST}",
            "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/app",
            "v3",
            DIGEST,
            ("123456789012", "eu-west-1", "team/app"),
        ),
    ],
)
def test_image_references_parse(
    text: str, repository: str, tag: str | None, digest: str | None, ecr: tuple[str, str, str] | None
) -> None:
    reference = ImageReference.parse(text)
    assert (reference.repository, reference.tag, reference.digest, reference.ecr) == (
        repository,
        tag,
        digest,
        ecr,
    )


@pytest.mark.parametrize("text", ["", "app@sha256:abc", "app:", "bad image"])
def test_bad_image_references_are_refused(text: str) -> None:
    with pytest.raises(InputError):
        ImageReference.parse(text)
