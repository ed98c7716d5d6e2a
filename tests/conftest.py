"""Fixtures for the real local parts every test folder shares: moto's server and PostgreSQL, and the
RDS CA bundle every Lambda build packs (AWS's own is not reachable from CI)."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.rds_ca import BUNDLE_VARIABLE
from tests.postgres import postgres_url
from tests.tls_authority import ca_bundle_pem

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_REGION = "us-east-1"
# Every test sees the terminal a CI log gives, whoever runs it: pytest-xdist's workers inherit
# COLUMNS=80 and LINES=24, a developer's shell may export others, and the commands size their output
# by COLUMNS (cli/console.py). A test that means a width sets it.
for _variable in ("COLUMNS", "LINES"):
    os.environ.pop(_variable, None)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto in server mode on 127.0.0.1: AWS reached over HTTP, as the real one is."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, empty emulated AWS account for one test; boto3 finds it through the environment."""
    request = urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")
    # Generous: resetting after a large fleet takes seconds on a busy 2-core machine.
    urllib.request.urlopen(request, timeout=120).close()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", TEST_REGION)
    monkeypatch.setenv("AWS_REGION", TEST_REGION)
    for variable in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    return moto_server


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A real PostgreSQL server: ``PARKBRAKE_DATABASE_URL`` when set, else a throwaway pgserver."""
    with postgres_url() as url:
        yield url


@pytest.fixture(scope="session", autouse=True)
def rds_ca_bundle_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every build in the tests (``pulumi up``'s program, ``parkbrake package``) packs this bundle,
    given the way an offline build gives one: through ``PARKBRAKE_RDS_CA_BUNDLE``."""
    bundle = tmp_path_factory.mktemp("rds-ca") / "global-bundle.pem"
    bundle.write_bytes(ca_bundle_pem())
    previous = os.environ.get(BUNDLE_VARIABLE)
    os.environ[BUNDLE_VARIABLE] = str(bundle)
    yield bundle
    if previous is None:
        del os.environ[BUNDLE_VARIABLE]
    else:
        os.environ[BUNDLE_VARIABLE] = previous
