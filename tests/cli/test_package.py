"""`parkbrake package` end to end: the artifacts `pulumi up` uploads, deterministic, for the runtime's
Python and architecture — and, unpacked into a clean virtual environment holding only boto3 (what the
Lambda runtime provides), every handler imports and runs against moto and PostgreSQL.

The machine's Python may differ from the runtime's (3.11 here, python3.12 in the stack): the artifacts
for the runtime are checked by their binary modules' ABI and architecture tags, and the same stack is
packaged for the machine's Python with `--python-version` (the same code path) to be run.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from guardrail_fleet import STACK, client_factory, create_pool, launch, managed_tags, state_change
from psycopg.conninfo import make_conninfo

from cli.main import parkbrake
from components.guardrail_functions import DATABASE_TLS
from components.lambda_archive import CODE_ARCHIVE, DEPENDENCY_LAYER, RUNTIME, default_wheel_cache
from guardrails import names
from guardrails.pricing import load_price_table
from lambdas.aws.assumed import AccountAccess, AccountSessions
from lambdas.ledger.store import LedgerStore
from tests.conftest import REPO_ROOT, TEST_REGION

GUARDRAILS = ["budget", "deadline", "launcher", "meter", "reaper", "reconciler"]
MACHINE_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
# ELF e_machine values: what a shared library was built for.
ELF_MACHINES = {"x86_64": 0x3E, "arm64": 0xB7}
LINUX_TRIPLETS = {"x86_64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}


def package(out: Path, *arguments: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        parkbrake,
        ["package", "--stack", "dev", "--project-dir", str(REPO_ROOT), "--out", str(out), "--output", "json", *arguments],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest: dict[str, Any] = json.loads(result.output)
    assert json.loads((out / "manifest.json").read_text()) == manifest
    return manifest


@pytest.fixture(scope="module")
def runtime_package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("package-runtime")
    return out, package(out)


def test_the_manifest_lists_every_function_the_stack_declares(
    runtime_package: tuple[Path, dict[str, Any]],
) -> None:
    out, manifest = runtime_package
    assert [function["name"] for function in manifest["functions"]] == GUARDRAILS
    for function in manifest["functions"]:
        assert function == {
            "name": function["name"],
            "handler": f"lambdas.{function['name']}.handler",
            "archive": CODE_ARCHIVE,
            "layers": [DEPENDENCY_LAYER],
            "runtime": RUNTIME,
            "architecture": "x86_64",
        }
        assert (out / function["archive"]).is_file()
        assert all((out / layer).is_file() for layer in function["layers"])


def test_the_same_stack_packages_to_the_same_bytes(
    runtime_package: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    first, _ = runtime_package
    package(tmp_path)
    for name in (CODE_ARCHIVE, DEPENDENCY_LAYER, "manifest.json"):
        assert (tmp_path / name).read_bytes() == (first / name).read_bytes(), name


def test_the_layer_carries_the_rds_ca_bundle_where_libpq_looks_for_it(
    runtime_package: tuple[Path, dict[str, Any]], rds_ca_bundle_file: Path
) -> None:
    out, _ = runtime_package
    in_layer = DATABASE_TLS["PGSSLROOTCERT"].removeprefix("/opt/")  # layers unpack under /opt
    with zipfile.ZipFile(out / DEPENDENCY_LAYER) as layer:
        assert layer.read(in_layer) == rds_ca_bundle_file.read_bytes()


def binary_modules(layer: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(layer) as archive:
        return {
            name: archive.read(name) for name in archive.namelist() if name.endswith(".so") or ".so." in name
        }


def elf_machine(content: bytes) -> int:
    assert content[:4] == b"\x7fELF"
    machine: int = struct.unpack_from("<H", content, 18)[0]
    return machine


@pytest.mark.parametrize("architecture", ["x86_64", "arm64"])
def test_every_binary_module_carries_the_runtimes_abi_and_architecture(
    architecture: str, runtime_package: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out = runtime_package[0] if architecture == "x86_64" else tmp_path
    if architecture != "x86_64":
        manifest = package(out, "--architecture", architecture)
        assert {function["architecture"] for function in manifest["functions"]} == {architecture}
    modules = binary_modules(out / DEPENDENCY_LAYER)
    extensions = [name for name in modules if name.endswith(".so") and ".libs/" not in name]
    assert any(name.startswith("python/psycopg_binary/") for name in extensions)
    abi = "cpython-" + RUNTIME.removeprefix("python").replace(".", "")
    for name in extensions:
        assert f".{abi}-{LINUX_TRIPLETS[architecture]}.so" in name or name.endswith(".abi3.so"), name
    for name, content in modules.items():
        assert elf_machine(content) == ELF_MACHINES[architecture], name


def test_an_unknown_python_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        parkbrake,
        ["package", "--stack", "dev", "--project-dir", str(REPO_ROOT), "--out", str(tmp_path), "--python-version", "2.7"],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "cannot get the Lambda layer's wheels for Python 2.7 on x86_64" in result.output
    assert "Traceback" not in result.output


# --- the artifacts run -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lambda_environment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding boto3 and what it needs, nothing else (the Lambda Python runtime)."""
    root = tmp_path_factory.mktemp("lambda-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3.*/site-packages"))
    cache = default_wheel_cache()
    boto3 = f"boto3=={version('boto3')}"
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--target",
        str(site),
        "--find-links",
        str(cache),
    ]
    if subprocess.run([*install, "--no-index", boto3], capture_output=True, check=False).returncode != 0:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(cache), boto3], check=True
        )
        subprocess.run([*install, "--no-index", boto3], check=True)
    return root


def unpack(out: Path, manifest: dict[str, Any], into: Path) -> tuple[Path, Path]:
    """As Lambda lays it out: the function's archive in /var/task, each layer in /opt."""
    task, opt = into / "task", into / "opt"
    (function,) = {(f["archive"], tuple(f["layers"])) for f in manifest["functions"]}
    with zipfile.ZipFile(out / function[0]) as archive:
        archive.extractall(task)
    for layer in function[1]:
        with zipfile.ZipFile(out / layer) as archive:
            archive.extractall(opt)
    return task, opt / "python"


@pytest.fixture
def ledger(database_url: str) -> Iterator[str]:
    name = f"parkbrake_artifacts_{os.getpid()}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    url = make_conninfo(database_url, dbname=name)
    store = LedgerStore.connect(url)
    store.migrate()
    store.sync_prices(load_price_table(), source="prices.json")
    store.close()
    yield url
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


INVOKE = """
import importlib, json, sys
task, layer, events = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
import psycopg
assert psycopg.__file__.startswith(layer), psycopg.__file__
assert psycopg.pq.__impl__ == "binary", psycopg.pq.__impl__
results = {}
for name, event in events:
    module = importlib.import_module(f"lambdas.{name}")
    assert module.__file__.startswith(task), module.__file__
    results[name] = module.handler(event, None)
assert "pulumi" not in sys.modules
print(json.dumps(results, default=str))
"""


def test_the_artifacts_run_every_handler_in_a_clean_runtime(
    aws: str, ledger: str, lambda_environment: Path, tmp_path: Path
) -> None:
    out = tmp_path / "package"
    manifest = package(out, "--python-version", MACHINE_PYTHON)
    task, layer = unpack(out, manifest, tmp_path)

    clients = client_factory(aws)
    create_pool(clients("autoscaling", TEST_REGION), clients("ec2", TEST_REGION), pool="training",
                instance_type="g5.12xlarge", desired=0, max_size=2, group_tags=managed_tags(max_runtime="2h"))  # fmt: skip
    clients("ssm", TEST_REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    topic = clients("sns", TEST_REGION).create_topic(Name="alarms")["TopicArn"]
    clients("scheduler", TEST_REGION).create_schedule_group(Name=names.deadline_schedule_group(STACK))
    (host,) = launch(clients("ec2", TEST_REGION), "g5.xlarge", managed_tags())
    now = datetime.now(UTC)
    scheduled = {"version": "0", "id": "budget-tick", "detail-type": "Scheduled Event", "source": "aws.events",
                 "account": "123456789012", "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "region": TEST_REGION,
                 "resources": [], "detail": {}}  # fmt: skip
    events = [
        ("reaper", {"dry_run": False}),
        ("deadline", state_change(host, "running", now)),
        ("meter", state_change(host, "running", now)),
        ("launcher", {"pool": "training", "capacity": 1}),
        ("budget", scheduled),
        ("reconciler", scheduled | {"id": "reconcile-tick"}),
    ]
    (tmp_path / "events.json").write_text(json.dumps(events))
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join([str(task), str(layer)]),
        "AWS_ENDPOINT_URL": aws,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": TEST_REGION,
        "PARKBRAKE_STACK": STACK,
        "PARKBRAKE_REGIONS": TEST_REGION,
        "PARKBRAKE_SNS_TOPIC_ARN": topic,
        "PARKBRAKE_DEADLINE_TARGET_ARN": "arn:aws:lambda:us-east-1:123456789012:function:reaper",
        "PARKBRAKE_SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/scheduler",
        "PARKBRAKE_DATABASE_URL": ledger,
    }
    result = subprocess.run(
        [str(lambda_environment / "bin" / "python"), "-I", "-c", "import sys; sys.path[:0] = sys.argv[4].split(':'); "
         "exec(sys.argv[5])", str(task), str(layer), str(tmp_path / "events.json"), environment["PYTHONPATH"], INVOKE],
        env=environment, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads(result.stdout.splitlines()[-1])
    assert results["reaper"]["checked"] >= 1
    assert results["launcher"]["started"] == 1
    schedules = clients("scheduler", TEST_REGION).list_schedules(
        GroupName=names.deadline_schedule_group(STACK)
    )
    # the deadline armed the host's deadline, and its owner's warning ahead of it
    assert sorted(schedule["Name"].split("-i-")[0] for schedule in schedules["Schedules"]) == [
        "deadline",
        "warn",
    ]
    reservations = clients("ec2", TEST_REGION).describe_instances(
        Filters=[{"Name": "instance-type", "Values": ["g5.12xlarge"]}]
    )["Reservations"]
    (started,) = [
        instance["InstanceId"] for reservation in reservations for instance in reservation["Instances"]
    ]
    store = LedgerStore.connect(ledger)
    # The meter appended the host it was told of; the reconciler the one the launcher started, whose
    # state change no event delivered (moto sends none).
    assert sorted(interval.instance_id for interval in store.intervals()) == sorted([host, started])
    store.close()
    assert "errors" not in results["budget"] or not results["budget"]["errors"]
    assert results["reconciler"]["hosts"] == 2
    assert len(results["reconciler"]["repairs"]) == 1
    # The same artifacts as an organisation's hub: the reaper sweeps a member account through its
    # spoke role (moto's AssumeRole into another account acts in that account: moto/sts/models.py).
    assert central_sweep_in_artifacts(task, layer, lambda_environment, environment, tmp_path) == {
        "places": [{"account_id": MEMBER, "account_name": MEMBER, "region": TEST_REGION, "failure": None}],
        "checked": 1,
    }


MEMBER = "222233334444"


def central_sweep_in_artifacts(
    task: Path, layer: Path, runtime: Path, environment: dict[str, str], tmp_path: Path
) -> dict[str, Any]:
    """The hub's reaper from the unpacked artifacts, with a spokes parameter naming one member
    account's spoke role: what it swept, per place, and how many hosts it checked."""
    member_ec2 = AccountSessions().clients(
        AccountAccess(MEMBER, (names.spoke_role_arn(STACK, MEMBER, TEST_REGION),))
    )
    launch(member_ec2("ec2", TEST_REGION), "g5.xlarge", managed_tags())
    parameter = f"/parkbrake/{STACK}/spokes"
    document = {"form": "stacks", "sweep": "central", "regions": [TEST_REGION],
                "roles": [names.spoke_role_arn(STACK, MEMBER, TEST_REGION)]}  # fmt: skip
    client_factory(environment["AWS_ENDPOINT_URL"])("ssm", TEST_REGION).put_parameter(
        Name=parameter, Value=json.dumps(document), Type="String", Overwrite=True
    )
    (tmp_path / "hub-events.json").write_text(json.dumps([("reaper", {"dry_run": True})]))
    result = subprocess.run(
        [str(runtime / "bin" / "python"), "-I", "-c", "import sys; sys.path[:0] = sys.argv[4].split(':'); "
         "exec(sys.argv[5])", str(task), str(layer), str(tmp_path / "hub-events.json"), environment["PYTHONPATH"], INVOKE],
        env=environment | {"PARKBRAKE_SPOKES_PARAMETER": parameter}, capture_output=True, text=True, check=False,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    swept = json.loads(result.stdout.splitlines()[-1])["reaper"]
    return {"places": swept["places"], "checked": swept["checked"]}
