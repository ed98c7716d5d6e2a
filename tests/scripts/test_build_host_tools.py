"""The host-tools artifact: the same wheels give the same bytes, every wheel is pinned by its hash, and the
check a host runs at boot (``sha256sum --check`` of the line its user data carries) accepts it."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from components.gpu_pool import ToolsArtifact, agent_user_data

REPO_ROOT = Path(__file__).resolve().parents[2]


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_host_tools", REPO_ROOT / "scripts" / "build_host_tools.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheels(folder: Path) -> Path:
    folder.mkdir()
    for name, body in (("click-8.1.7-py3-none-any.whl", "click"), ("parkbrake-0.1.0-py3-none-any.whl", "pb")):
        with zipfile.ZipFile(folder / name, "w") as wheel:
            wheel.writestr(f"{body}/__init__.py", f"# {body}\n")
    return folder


def test_the_same_wheels_give_the_same_bytes_and_every_wheel_is_pinned(tmp_path: Path) -> None:
    build = script()
    source = wheels(tmp_path / "wheels")

    first = build.pack(source, tmp_path / "one.tar.gz")
    second = build.pack(source, tmp_path / "two.tar.gz")

    assert first == second == hashlib.sha256((tmp_path / "one.tar.gz").read_bytes()).hexdigest()
    with tarfile.open(tmp_path / "one.tar.gz") as tar:
        assert tar.getnames() == sorted(tar.getnames())
        assert {member.mtime for member in tar.getmembers()} == {build.FIXED_EPOCH}
        requirements = tar.extractfile("requirements.txt").read().decode()  # type: ignore[union-attr]
    for wheel in source.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert f"{name}=={version} --hash=sha256:{digest}\n" in requirements


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils' sha256sum, as the hosts have")
def test_a_host_accepts_the_artifact_and_refuses_a_changed_one(tmp_path: Path) -> None:
    digest = script().pack(wheels(tmp_path / "wheels"), tmp_path / "host-tools.tar.gz")
    user_data = agent_user_data(
        ecs_cluster_name=None,
        host_tools=ToolsArtifact(bucket="b", key="host-tools/x.tar.gz", sha256=digest),
        agent_idle_after=None,
    )
    (check,) = [line for line in user_data.splitlines() if "sha256sum" in line]
    check = check.replace("/tmp/parkbrake-host-tools.tar.gz", str(tmp_path / "host-tools.tar.gz"))

    assert subprocess.run(["bash", "-c", check], capture_output=True, check=False).returncode == 0
    (tmp_path / "host-tools.tar.gz").write_bytes(b"tampered")
    assert subprocess.run(["bash", "-c", check], capture_output=True, check=False).returncode != 0
