"""The Lambda artifacts' contents and the functions the Guardrails component declares from them.

`tests/cli/test_package.py` builds the real artifacts and runs them; these tests pin what goes in and
that `pulumi up` declares the same functions `parkbrake package` writes.
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest

from components.lambda_archive import (
    CODE_ARCHIVE,
    DEPENDENCY_LAYER,
    RUNTIME,
    code_files,
    declared_functions,
    lambda_functions,
    package_dir,
    python_version_of,
    write_zip,
)
from guardrails.errors import InputError
from tests.conftest import REPO_ROOT

PROJECT_PACKAGES = {"cli", "components", "guardrails", "lambdas", "policies", "stacks", "services"}


def imported_roots(source: str) -> set[str]:
    """The top-level package of every absolute import in a module."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_code_archive_holds_the_two_packages_and_their_data_only() -> None:
    files = code_files()
    assert {path.split("/")[0] for path in files} == {"guardrails", "lambdas"}
    assert {"guardrails/__init__.py", "lambdas/reaper.py", "guardrails/prices.json"} <= set(files)
    # The handlers' engines travel with them: every module of lambdas/engines/ is in the archive.
    engines = {str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "lambdas" / "engines").glob("*.py")}
    assert {
        "lambdas/engines/__init__.py",
        "lambdas/engines/metering.py",
        "lambdas/engines/sweeping.py",
    } <= engines
    assert engines <= set(files)
    assert not [path for path in files if "__pycache__" in path or path.endswith((".pyc", ".pyo"))]


def test_no_module_of_the_code_archive_imports_pulumi_or_a_package_left_out() -> None:
    for path, content in code_files().items():
        if path.endswith(".py"):
            roots = imported_roots(content.decode())
            assert not {root for root in roots if root.startswith("pulumi")}, path
            assert roots & PROJECT_PACKAGES <= {"guardrails", "lambdas"}, path


def test_zips_depend_on_their_files_only(tmp_path: Path) -> None:
    files = {"b.py": b"two", "a/x.so": b"\x7fELF", "a/__init__.py": b""}
    write_zip(tmp_path / "one.zip", files)
    write_zip(tmp_path / "two.zip", dict(reversed(list(files.items()))))
    assert (tmp_path / "one.zip").read_bytes() == (tmp_path / "two.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "one.zip") as archive:
        assert archive.namelist() == ["a/__init__.py", "a/x.so", "b.py"]
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert archive.getinfo("a/x.so").external_attr >> 16 == 0o100755


def test_the_stack_declares_the_functions_package_writes() -> None:
    from cli.preview.plan_report import offline_run
    from stacks.config import load_stack_config

    run = offline_run(load_stack_config("dev", REPO_ROOT))
    declared = declared_functions(run.resources)
    assert declared == lambda_functions(["budget", "deadline", "launcher", "meter", "reaper", "reconciler"])
    for function in run.of_type("aws:lambda/function:Function"):
        assert function.inputs["runtime"] == RUNTIME
        assert function.inputs["architectures"] == ["x86_64"]
        assert function.inputs["code"].path == str(package_dir("dev") / CODE_ARCHIVE)
    (layer,) = run.of_type("aws:lambda/layerVersion:LayerVersion")
    assert layer.inputs["code"].path == str(package_dir("dev") / DEPENDENCY_LAYER)


def test_another_architecture_and_bad_input_are_named() -> None:
    assert {spec.architecture for spec in lambda_functions(["reaper"], architecture="arm64")} == {"arm64"}
    with pytest.raises(InputError, match="architecture 'sparc'"):
        lambda_functions(["reaper"], architecture="sparc")
    assert python_version_of("python3.12") == "3.12"
    with pytest.raises(InputError, match="not a Python Lambda runtime"):
        python_version_of("nodejs20.x")
