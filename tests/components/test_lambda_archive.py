"""The Lambda code archive: guardrails/, lambdas/ and prometheus-client, and nothing in it needs Pulumi.

The import test runs a fresh interpreter that sees only what a Lambda function sees: the unpacked
archive, the libraries the Python runtime provides, and (for the ledger functions) the psycopg layer.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pulumi
import pytest

from components.lambda_archive import REPO_ROOT, lambda_archive, lambda_archive_files, lambda_archive_sources

PROJECT_PACKAGES = {"cli", "components", "guardrails", "lambdas", "policies", "stacks"}
# What AWS's Python runtime ships besides the standard library.
LAMBDA_RUNTIME = {"boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six"}
# The layer the ledger functions get (pip install "psycopg[binary]" psycopg-pool).
DATABASE_LAYER = {"psycopg", "psycopg_binary", "psycopg_pool", "typing_extensions"}
# Functions deployed without the layer when there is no database; they must import without it.
WITHOUT_LAYER = ["lambdas.reaper", "lambdas.deadline", "lambdas.launcher"]


def imported_roots(source: str) -> set[str]:
    """The top-level package of every absolute import in a module."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_archive_holds_the_two_packages_their_data_and_the_bundled_library() -> None:
    files = lambda_archive_files()

    assert {path.split("/")[0] for path in files} == {"guardrails", "lambdas", "prometheus_client"}
    assert {"guardrails/__init__.py", "lambdas/__init__.py", "guardrails/prices.json"} <= set(files)
    assert {"lambdas/reaper.py", "prometheus_client/__init__.py"} <= set(files)
    assert files == sorted(files)


def test_archive_leaves_out_bytecode_caches_and_other_packages(tmp_path: Path) -> None:
    for relative in (
        "guardrails/__init__.py",
        "guardrails/rules/base.py",
        "lambdas/reaper.py",
        "cli/main.py",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    (tmp_path / "guardrails/__pycache__").mkdir()
    (tmp_path / "guardrails/__pycache__/__init__.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "lambdas/stale.pyc").write_bytes(b"\0")

    own = [path for path in lambda_archive_files(tmp_path) if not path.startswith("prometheus_client/")]
    assert own == ["guardrails/__init__.py", "guardrails/rules/base.py", "lambdas/reaper.py"]
    assert not [path for path in lambda_archive_files() if "__pycache__" in path or path.endswith(".pyc")]


def test_archive_assets_are_the_listed_files() -> None:
    archive = lambda_archive()
    sources = lambda_archive_sources()

    assert isinstance(archive, pulumi.AssetArchive)
    assert sorted(archive.assets) == lambda_archive_files()
    for relative, asset in archive.assets.items():
        assert isinstance(asset, pulumi.FileAsset)
        assert Path(asset.path) == sources[relative]
    assert sources["lambdas/reaper.py"] == REPO_ROOT / "lambdas/reaper.py"


def test_no_pulumi_module_and_no_import_of_pulumi_or_of_packages_left_out() -> None:
    sources = lambda_archive_sources()

    assert not [
        path for path in sources if any(part.lower().startswith("pulumi") for part in path.split("/"))
    ]
    for path, source in sources.items():
        if path.endswith(".py"):
            roots = imported_roots(source.read_text())
            assert not {root for root in roots if root.startswith("pulumi")}, path
            # Only these packages travel; an import of another project package would fail in Lambda.
            assert roots & PROJECT_PACKAGES <= {"guardrails", "lambdas"}, path


def import_in_lambda_runtime(
    archive_dir: Path, modules: list[str], libraries: set[str]
) -> subprocess.CompletedProcess[str]:
    """Import ``modules`` in a fresh interpreter that sees the archive, the stdlib and ``libraries`` only.

    -S skips site processing, so the editable install's finder cannot map the packages back to the
    repository; site-packages is appended by hand behind a finder that refuses every library
    outside ``libraries``; Pulumi is blocked outright.
    """
    site_packages = sysconfig.get_paths()["purelib"]
    script = textwrap.dedent(
        f"""
        import importlib, importlib.abc, importlib.machinery, sys
        ARCHIVE, SITE, LIBRARIES = {str(archive_dir)!r}, {site_packages!r}, {sorted(libraries)!r}

        class LambdaRuntime(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                origin = (spec.origin or "") if spec else ""
                if origin.startswith(SITE) and name.split(".")[0] not in LIBRARIES:
                    raise ModuleNotFoundError(f"No module named {{name!r}} in the Lambda runtime", name=name)
                return None

        sys.path[:0] = [ARCHIVE]
        sys.path.append(SITE)
        sys.meta_path.insert(0, LambdaRuntime())
        for blocked in ("pulumi", "pulumi_aws", "pulumi_policy"):
            sys.modules[blocked] = None
        for name in {modules!r}:
            module = importlib.import_module(name)
            assert module.__file__.startswith(ARCHIVE), (name, module.__file__)
        print("imported", len({modules!r}))
        """
    )
    return subprocess.run(
        [sys.executable, "-S", "-c", script],
        check=False,
        capture_output=True,
        text=True,
        cwd=archive_dir,
        timeout=120,
    )


@pytest.fixture(scope="module")
def unpacked_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    archive_dir = tmp_path_factory.mktemp("lambda-archive")
    for relative, source in lambda_archive_sources().items():
        (archive_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, archive_dir / relative)
    return archive_dir


def test_every_module_imports_from_the_archive_with_the_database_layer(unpacked_archive: Path) -> None:
    modules = sorted(
        path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        for path in lambda_archive_files()
        if path.endswith(".py") and path.split("/")[0] in ("guardrails", "lambdas")
    )
    assert set(WITHOUT_LAYER) < set(modules)

    result = import_in_lambda_runtime(unpacked_archive, modules, LAMBDA_RUNTIME | DATABASE_LAYER)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"imported {len(modules)}"


def test_reaper_deadline_and_launcher_import_without_any_layer(unpacked_archive: Path) -> None:
    result = import_in_lambda_runtime(unpacked_archive, WITHOUT_LAYER, LAMBDA_RUNTIME)

    assert result.returncode == 0, result.stderr


def test_the_runtime_emulation_does_refuse_what_a_function_lacks(unpacked_archive: Path) -> None:
    """The check above means something: the ledger store cannot be imported without its layer."""
    result = import_in_lambda_runtime(unpacked_archive, ["lambdas.ledger.store"], LAMBDA_RUNTIME)

    assert result.returncode != 0
    assert "No module named 'psycopg' in the Lambda runtime" in result.stderr
