"""The guardrail Lambdas' code archive: ``guardrails/`` and ``lambdas/``, and the one pure-Python
library they import that the Lambda runtime lacks.

The archive carries no Pulumi (and no component, stack or CLI code): the Lambdas are thin adapters
over pure logic. boto3 comes with the Python runtime; prometheus-client (the heartbeat's counters) is
pure Python, so it is bundled from the environment running the program, and the reaper, deadline and
launcher work with no layer at all. psycopg, which only the functions using the ledger database import,
has platform-specific binaries and comes from a Lambda layer (see docs/components-services.md).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pulumi

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("guardrails", "lambdas")
BUNDLED_LIBRARIES = ("prometheus_client",)
EXCLUDED_DIRECTORIES = frozenset({"__pycache__"})
EXCLUDED_SUFFIXES = frozenset({".pyc", ".pyo"})


def lambda_archive_sources(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Every file that goes into the archive: its path in the archive → the file it is copied from."""
    sources: dict[str, Path] = {}
    for package in PACKAGES:
        sources.update(_package_files(root / package))
    for library in BUNDLED_LIBRARIES:
        sources.update(_package_files(_installed_package(library)))
    return dict(sorted(sources.items()))


def lambda_archive_files(root: Path = REPO_ROOT) -> list[str]:
    """The archive's paths, in a stable order."""
    return list(lambda_archive_sources(root))


def lambda_archive(root: Path = REPO_ROOT) -> pulumi.AssetArchive:
    """The archive itself: one asset per file."""
    return pulumi.AssetArchive(
        {relative: pulumi.FileAsset(str(source)) for relative, source in lambda_archive_sources(root).items()}
    )


def _package_files(package_dir: Path) -> dict[str, Path]:
    """A package's files keyed by their path from the package's parent, bytecode caches left out."""
    files = {}
    for path in package_dir.rglob("*"):
        relative = path.relative_to(package_dir.parent)
        if (
            path.is_file()
            and not EXCLUDED_DIRECTORIES.intersection(relative.parts)
            and path.suffix not in EXCLUDED_SUFFIXES
        ):
            files[relative.as_posix()] = path
    return files


def _installed_package(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{name} is not installed; the Lambda archive bundles it (pip install -e .)")
    return Path(next(iter(spec.submodule_search_locations)))
