"""The RDS CA bundle the guardrails' dependency layer carries: where it comes from, that a bad one is
refused with the fix, and that a second build asks nobody. Downloads go to a local HTTP server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from components.rds_ca import BUNDLE_URL, BUNDLE_VARIABLE, CACHED_NAME, rds_ca_bundle
from guardrails.errors import ParkbrakeError
from tests.tls_authority import ca_bundle_pem


class BundleServer:
    """Serves ``body`` with ``status`` at every path and counts the requests."""

    def __init__(self) -> None:
        self.body = ca_bundle_pem()
        self.status = 200
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                self.send_response(owner.status)
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/global/global-bundle.pem"


@pytest.fixture
def bundle_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[BundleServer]:
    monkeypatch.delenv(BUNDLE_VARIABLE)
    served = BundleServer()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


def test_the_configured_file_is_packed_byte_for_byte(rds_ca_bundle_file: Path, tmp_path: Path) -> None:
    assert rds_ca_bundle(tmp_path) == rds_ca_bundle_file.read_bytes()
    assert not (tmp_path / CACHED_NAME).exists()


def test_a_download_is_cached_and_a_rebuild_asks_nobody(bundle_server: BundleServer, tmp_path: Path) -> None:
    first = rds_ca_bundle(tmp_path, url=bundle_server.url)
    bundle_server.body = b"changed upstream"

    again = rds_ca_bundle(tmp_path, url=bundle_server.url)

    assert first == again == (tmp_path / CACHED_NAME).read_bytes()
    assert first.count(b"-----BEGIN CERTIFICATE-----") == 2
    assert bundle_server.requests == 1


def test_an_html_error_page_is_refused_and_nothing_is_cached(
    bundle_server: BundleServer, tmp_path: Path
) -> None:
    bundle_server.body = b"<html><body>Proxy authentication required</body></html>"

    with pytest.raises(ParkbrakeError) as refused:
        rds_ca_bundle(tmp_path, url=bundle_server.url)

    assert f"the RDS CA bundle from {bundle_server.url} holds no PEM certificate" in str(refused.value)
    assert f"set {BUNDLE_VARIABLE} to the file" in str(refused.value)
    assert BUNDLE_URL in str(refused.value)
    assert not (tmp_path / CACHED_NAME).exists()


def test_a_certificate_that_does_not_parse_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "bundle.pem"
    pem = ca_bundle_pem()
    # One base64 character more at the start of the first body: PEM-shaped, no longer DER that decodes.
    broken.write_bytes(pem.replace(b"\n", b"\nA", 1))
    monkeypatch.setenv(BUNDLE_VARIABLE, str(broken))

    with pytest.raises(ParkbrakeError, match=f"from {BUNDLE_VARIABLE}={broken} does not parse"):
        rds_ca_bundle(tmp_path / "cache")


def test_a_missing_file_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUNDLE_VARIABLE, str(tmp_path / "nowhere.pem"))

    with pytest.raises(ParkbrakeError, match=f"cannot read {BUNDLE_VARIABLE}=.*nowhere.pem: No such file"):
        rds_ca_bundle(tmp_path)


@pytest.mark.parametrize("status", [403, 500])
def test_a_failed_download_names_the_url_and_the_offline_way(
    bundle_server: BundleServer, tmp_path: Path, status: int
) -> None:
    bundle_server.status = status

    with pytest.raises(ParkbrakeError) as failed:
        rds_ca_bundle(tmp_path, url=bundle_server.url)

    assert f"cannot download the RDS CA bundle from {bundle_server.url}" in str(failed.value)
    assert f"set {BUNDLE_VARIABLE} to the file" in str(failed.value)
    assert not (tmp_path / CACHED_NAME).exists()
