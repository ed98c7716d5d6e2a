"""One clear line for every error of the environment: never a traceback, never an HTML page."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from cli.main import parkbrake

HTML_PAGE = b"<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n"


@pytest.fixture
def html_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A server on 127.0.0.1 that answers every request with an HTML error page, as a wrong endpoint or
    a proxy does."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(HTML_PAGE)))
            self.end_headers()
            self.wfile.write(HTML_PAGE)

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    for name, value in {
        "AWS_ENDPOINT_URL": url, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_MAX_ATTEMPTS": "1",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    yield url
    server.shutdown()
    server.server_close()


def one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("Error: "), output
    assert "Traceback" not in output
    assert "<html" not in output.lower()
    return lines[0]


@pytest.mark.parametrize(
    "arguments",
    [
        ["status", "--regions", "us-east-1"],
        ["park", "--now", "--dry-run", "--stack", "dev", "--region", "us-east-1"],
        ["schedule", "list", "--stack", "dev", "--region", "us-east-1"],
        ["reap", "--stack", "dev", "--region", "us-east-1", "--dry-run"],
    ],
    ids=lambda arguments: " ".join(arguments[:2]),
)
def test_an_endpoint_answering_html_is_one_line_naming_the_endpoint(
    html_endpoint: str, arguments: list[str]
) -> None:
    result = CliRunner().invoke(parkbrake, arguments)

    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert "not an AWS response" in line
    assert "AWS_ENDPOINT_URL" in line


@pytest.mark.parametrize(
    ("arguments", "source"),
    [
        (["status", "--regions", "us-eas-1"], "--regions"),
        (["park", "--now", "--dry-run", "--stack", "dev", "--region", "us-eas-1"], "--region"),
        (["schedule", "list", "--stack", "dev", "--region", "us-eas-1"], "--region"),
    ],
    ids=lambda item: " ".join(item[:2]) if isinstance(item, list) else item,
)
def test_a_mistyped_region_is_one_line_with_the_nearest_name(
    html_endpoint: str, arguments: list[str], source: str
) -> None:
    result = CliRunner().invoke(parkbrake, arguments)

    assert result.exit_code == 2
    line = one_error_line(result.output)
    assert f"unknown AWS region 'us-eas-1' (from {source}); did you mean us-east-1?" in line


def test_a_mistyped_aws_region_is_named_when_the_answer_makes_no_sense(
    html_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "us-eas-1")

    result = CliRunner().invoke(parkbrake, ["verify", "inference", "--revision", "3f2c1ab"])

    assert result.exit_code == 1
    assert "unknown AWS region 'us-eas-1' (from AWS_REGION)" in one_error_line(result.output)
