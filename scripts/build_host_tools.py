"""Build the GPU hosts' tools artifact, which the stack uploads and the hosts install at boot.

The tarball holds the parkbrake wheel, the wheels ``parkbrake agent`` and ``parkbrake run`` need (for
the hosts' Python and architecture: the ECS GPU AMI's python3.11 on x86_64 by default), and a
``requirements.txt`` pinning each one by SHA-256. Members are sorted with fixed timestamps and owners,
so the same wheels give the same bytes. It prints the tarball's SHA-256: put it in the stack config as
``hosts.tools_sha256`` beside ``hosts.tools_artifact``. A host checks the download against that hash and
installs with ``--no-index --require-hashes``, so nothing comes from a public index at boot.

    python scripts/build_host_tools.py --out dist/parkbrake-host-tools.tar.gz
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# What the host-side commands import beyond the standard library (boto3: the self-stop's API fallback).
HOST_REQUIREMENTS = ("click", "prometheus-client", "nvidia-ml-py", "boto3")
# 1980-01-01, the earliest time a zip (a wheel) can record: fixed timestamps for reproducible wheels.
FIXED_EPOCH = 315532800


def requirement_line(wheel: Path) -> str:
    """``name==version --hash=sha256:…`` for one wheel file (``name-version-tags.whl``)."""
    name, version = wheel.name.split("-")[:2]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return f"{name}=={version} --hash=sha256:{digest}\n"


def pack(wheels: Path, out: Path) -> str:
    """Write the tarball of ``wheels`` and their pinned requirements to ``out``; return its SHA-256."""
    files = {wheel.name: wheel.read_bytes() for wheel in sorted(wheels.glob("*.whl"))}
    if not files:
        raise SystemExit(f"no wheels in {wheels}")
    files["requirements.txt"] = "".join(requirement_line(wheels / name) for name in sorted(files)).encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            member = tarfile.TarInfo(name)
            member.size, member.mtime, member.mode = len(files[name]), FIXED_EPOCH, 0o644
            tar.addfile(member, io.BytesIO(files[name]))
    compressed = gzip.compress(archive.getvalue(), compresslevel=9, mtime=0)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(compressed)
    return hashlib.sha256(compressed).hexdigest()


def collect_wheels(into: Path, *, python_version: str, platform: str) -> None:
    """The parkbrake wheel (built here, no dependencies: the hosts need only the few below) and the
    host requirements with their dependencies, as binary wheels for the hosts' Python and platform."""
    environment = {**os.environ, "SOURCE_DATE_EPOCH": str(FIXED_EPOCH)}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(into), str(REPO_ROOT)], check=True, env=environment
    )
    subprocess.run(
        [*pip, "download", "--only-binary=:all:", "--python-version", python_version, "--platform", platform,
         "--dest", str(into), *HOST_REQUIREMENTS],
        check=True,
        env=environment,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "dist" / "parkbrake-host-tools.tar.gz")
    parser.add_argument("--python-version", default="3.11", help="the hosts' Python (default: 3.11)")
    parser.add_argument("--platform", default="manylinux2014_x86_64", help="the hosts' wheel platform tag")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        wheels = Path(temporary)
        collect_wheels(wheels, python_version=arguments.python_version, platform=arguments.platform)
        digest = pack(wheels, arguments.out)
    print(f"{arguments.out}\nhosts.tools_sha256: {digest}")


if __name__ == "__main__":
    main()
