"""The guardrail Lambdas' artifacts: one code archive and one dependency layer, built the same way for
``parkbrake package`` and for ``pulumi up``.

- The code archive holds ``guardrails/`` and ``lambdas/`` only: the Lambdas are thin adapters over
  pure logic and carry no Pulumi, component, stack or CLI code.
- The layer holds, under ``python/``, every library the handlers import that the Python runtime lacks
  (boto3 and botocore come with it): ``components/lambda_requirements.txt`` pins each one with the
  hash of every wheel it may take. The wheels are chosen for the runtime's Python version and
  architecture (``pip download --only-binary=:all: --platform … --python-version … --require-hashes``),
  whatever happens to be installed where the stack is deployed from, and kept in a local wheel cache
  so a second build does not ask the index again. It also carries AWS's RDS CA bundle at
  ``rds-ca/global-bundle.pem`` (:mod:`components.rds_ca`), which libpq verifies the database against.

Both archives are deterministic: entries sorted, fixed timestamps and permissions, so the same
inputs give the same bytes (and Pulumi sees no change to upload).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from components.rds_ca import LAYER_PATH as RDS_CA_LAYER_PATH
from components.rds_ca import rds_ca_bundle
from guardrails.errors import InputError, ParkbrakeError
from guardrails.settings import process_variable
from guardrails.settings_table import WHEEL_CACHE

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("guardrails", "lambdas")
LOCK_FILE = Path(__file__).with_name("lambda_requirements.txt")
# An Amazon Linux 2023 runtime (python3.11 ran on Amazon Linux 2, deprecated with it in 2026).
RUNTIME = "python3.12"
ARCHITECTURES = ("x86_64", "arm64")
DEFAULT_ARCHITECTURE = "x86_64"
CODE_ARCHIVE = "guardrails-code.zip"
DEPENDENCY_LAYER = "layers/guardrails-dependencies.zip"
MANIFEST = "manifest.json"
WHEEL_CACHE_VARIABLE = WHEEL_CACHE
EXCLUDED_DIRECTORIES = frozenset({"__pycache__"})
EXCLUDED_SUFFIXES = frozenset({".pyc", ".pyo"})
# zip's epoch: every entry carries it, so a rebuild of the same files gives the same bytes.
FIXED_DATE = (1980, 1, 1, 0, 0, 0)
# manylinux tags the Lambda runtimes' glibc (2.34 on Amazon Linux 2023) accepts, per architecture.
PLATFORMS = {
    "x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "arm64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
}


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function as ``pulumi up`` declares it and ``parkbrake package`` writes it."""

    name: str
    handler: str  # Lambda's ``module.function`` form
    archive: str  # relative to the package folder
    layers: tuple[str, ...]
    runtime: str
    architecture: str

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "layers": list(self.layers)}


def lambda_functions(
    guardrails: Iterable[str], *, runtime: str = RUNTIME, architecture: str = DEFAULT_ARCHITECTURE
) -> list[FunctionSpec]:
    """The guardrail Lambdas ``guardrails`` (``reaper``, ``meter``…): every one shares the code and the layer."""
    if architecture not in ARCHITECTURES:
        raise InputError(
            f"architecture {architecture!r} is not a Lambda architecture; use one of {', '.join(ARCHITECTURES)}"
        )
    return [
        FunctionSpec(
            name=guardrail,
            handler=f"lambdas.{guardrail}.handler",
            archive=CODE_ARCHIVE,
            layers=(DEPENDENCY_LAYER,),
            runtime=runtime,
            architecture=architecture,
        )
        for guardrail in sorted(guardrails)
    ]


def python_version_of(runtime: str) -> str:
    """``python3.12`` → ``3.12``."""
    version = runtime.removeprefix("python")
    if version == runtime or not version.replace(".", "").isdigit():
        raise InputError(f"runtime {runtime!r} is not a Python Lambda runtime (pythonX.Y)")
    return version


def package_dir(stack: str) -> Path:
    """Where ``pulumi up`` builds the stack's artifacts (``parkbrake package`` writes wherever it is told)."""
    return REPO_ROOT / "build" / "lambda" / stack


# --- building -------------------------------------------------------------------------------------


def write_package(
    functions: Sequence[FunctionSpec], out: Path, *, python_version: str, wheel_cache: Path | None = None
) -> dict[str, Any]:
    """Write the artifacts of ``functions`` and ``manifest.json`` into ``out``; the manifest is returned."""
    architectures = {function.architecture for function in functions}
    if len(architectures) != 1:
        raise InputError(
            f"one package holds one architecture; got {', '.join(sorted(architectures)) or 'none'}"
        )
    build_artifacts(
        out, python_version=python_version, architecture=architectures.pop(), wheel_cache=wheel_cache
    )
    manifest = {"functions": [function.to_json() for function in functions]}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def build_artifacts(
    out: Path, *, python_version: str, architecture: str, wheel_cache: Path | None = None
) -> None:
    """The code archive and the dependency layer, as every guardrail Lambda of every stack uses them."""
    out.mkdir(parents=True, exist_ok=True)
    write_zip(out / CODE_ARCHIVE, code_files())
    cache = wheel_cache or default_wheel_cache()
    wheels = download_wheels(python_version=python_version, architecture=architecture, cache=cache)
    (out / DEPENDENCY_LAYER).parent.mkdir(parents=True, exist_ok=True)
    write_zip(out / DEPENDENCY_LAYER, {**layer_files(wheels), RDS_CA_LAYER_PATH: rds_ca_bundle(cache)})


def declared_functions(resources: Iterable[Any], *, architecture: str | None = None) -> list[FunctionSpec]:
    """The guardrail Lambdas a program declared (offline run resources), optionally for another architecture."""
    declared = [
        resource
        for resource in resources
        if resource.type == "aws:lambda/function:Function"
        and str(resource.inputs.get("handler", "")).startswith("lambdas.")
    ]
    specs = []
    for resource in declared:
        guardrail = str(resource.inputs["handler"]).split(".")[1]
        chosen = architecture or (resource.inputs.get("architectures") or [DEFAULT_ARCHITECTURE])[0]
        runtime = str(resource.inputs.get("runtime") or RUNTIME)
        specs += lambda_functions([guardrail], runtime=runtime, architecture=chosen)
    return sorted(specs, key=lambda spec: spec.name)


def code_files(root: Path = REPO_ROOT) -> dict[str, bytes]:
    """Every file of the code archive: its path in the archive → its bytes, bytecode caches left out."""
    files = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            relative = path.relative_to(root)
            if (
                path.is_file()
                and not EXCLUDED_DIRECTORIES.intersection(relative.parts)
                and path.suffix not in EXCLUDED_SUFFIXES
            ):
                files[relative.as_posix()] = path.read_bytes()
    return files


def layer_files(wheels: Iterable[Path]) -> dict[str, bytes]:
    """The wheels unpacked under ``python/``, where Lambda puts a layer's libraries on ``sys.path``."""
    files = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if not name.endswith("/") and not EXCLUDED_DIRECTORIES.intersection(name.split("/")):
                    files[f"python/{name}"] = archive.read(name)
    return files


def write_zip(path: Path, files: dict[str, bytes]) -> None:
    """A zip whose bytes depend only on ``files``: sorted entries, fixed dates and modes."""
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if name.endswith(".so") or ".so." in name else 0o100644) << 16
            archive.writestr(info, files[name], compresslevel=9)


def default_wheel_cache() -> Path:
    configured = process_variable(os.environ, WHEEL_CACHE_VARIABLE)
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "parkbrake" / "wheels"


def download_wheels(
    *, python_version: str, architecture: str, cache: Path, lock_file: Path = LOCK_FILE
) -> list[Path]:
    """The locked wheels for ``python_version`` and ``architecture``: from the cache when it holds them
    all, else from the index (and then cached). pip checks every wheel against the lock's hashes."""
    cache.mkdir(parents=True, exist_ok=True)
    selection = [
        "--only-binary=:all:",
        "--no-deps",
        "--require-hashes",
        "--implementation=cp",
        f"--python-version={python_version}",
        *(f"--platform={platform}" for platform in PLATFORMS[architecture]),
        "--requirement",
        str(lock_file),
    ]
    with tempfile.TemporaryDirectory(prefix="parkbrake-wheels-") as folder:
        destination = Path(folder)
        attempts = (["--no-index", "--find-links", str(cache)], ["--find-links", str(cache)])
        errors = []
        for sources in attempts:
            result = _pip_download([*sources, "--dest", str(destination), *selection])
            if result.returncode == 0:
                break
            errors.append(result.stderr.strip().splitlines()[-1:] or ["pip failed"])
        else:
            raise ParkbrakeError(
                f"cannot get the Lambda layer's wheels for Python {python_version} on {architecture} "
                f"(neither from {cache} nor from the package index): {errors[-1][0]}"
            )
        wheels = sorted(destination.glob("*.whl"))
        for wheel in wheels:
            if not (cache / wheel.name).exists():
                shutil.copyfile(wheel, cache / wheel.name)
    return [cache / wheel.name for wheel in wheels]


def _pip_download(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
