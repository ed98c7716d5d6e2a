"""`parkbrake pricing refresh` against a local server speaking the Price List API's JSON protocol.

moto does not emulate the Price List API, so this test serves ``GetProducts`` itself on 127.0.0.1:
boto3 still signs, paginates and parses a real HTTP exchange, reached through AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from guardrails.errors import ParkbrakeError
from guardrails.price_list import refreshed_price_document
from guardrails.pricing import PRICES_FILE, price_table_from_document


def product(instance_type: str, usd: str, *, gpu: str = "1", os: str = "Linux") -> str:
    sku = f"SKU{abs(hash(instance_type)) % 10**8}"
    return json.dumps(
        {
            "product": {
                "sku": sku,
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "gpu": gpu,
                    "regionCode": "us-east-1",
                    "operatingSystem": os,
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                },
            },
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}
                        }
                    }
                }
            },
        }
    )


PAGES = [
    [product("g5.xlarge", "1.0060000000"), product("g5.48xlarge", "16.2880000000", gpu="8")],
    [product("g6.xlarge", "0.8048000000"), product("g6.xlarge", "0.9000000000", os="Windows")],
]


class PriceListHandler(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        PriceListHandler.requests.append({"target": self.headers["X-Amz-Target"], **body})
        family = next(f["Value"] for f in body["Filters"] if f["Field"] == "instanceFamily")
        if family != "GPU instance":
            answer: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": []}
        elif body.get("NextToken") == "page-2":
            answer = {"FormatVersion": "aws_v1", "PriceList": PAGES[1]}
        else:
            answer = {"FormatVersion": "aws_v1", "PriceList": PAGES[0], "NextToken": "page-2"}
        payload = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def price_list_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    PriceListHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), PriceListHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    yield url
    server.shutdown()


def test_refresh_rewrites_instance_prices_and_keeps_service_prices(
    price_list_api: str, tmp_path: Path
) -> None:
    price_file = tmp_path / "prices.json"
    price_file.write_text(PRICES_FILE.read_text())
    result = CliRunner().invoke(
        parkbrake, ["pricing", "refresh", "--family", "g5", "--family", "g6", "--file", str(price_file)]
    )
    assert result.exit_code == 0, result.output
    assert "wrote 3 instance prices for us-east-1" in result.output
    table = price_table_from_document(json.loads(price_file.read_text()))
    assert table.instance("g5.48xlarge").usd_per_hour == Decimal("16.288")
    assert table.instance("g5.48xlarge").accelerators == 8
    assert table.instance("g6.xlarge").usd_per_hour == Decimal("0.8048")  # the Windows SKU is ignored
    assert table.service("alb_hour") == Decimal("0.0225")
    targets = {request["target"] for request in PriceListHandler.requests}
    assert targets == {"AWSPriceListService.GetProducts"}
    assert any(request.get("NextToken") == "page-2" for request in PriceListHandler.requests)


def test_dry_run_writes_nothing(price_list_api: str, tmp_path: Path) -> None:
    price_file = tmp_path / "prices.json"
    price_file.write_text(PRICES_FILE.read_text())
    before = price_file.read_bytes()
    result = CliRunner().invoke(
        parkbrake, ["pricing", "refresh", "--family", "g5", "--file", str(price_file), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "would write" in result.output
    assert price_file.read_bytes() == before


def test_a_family_without_prices_is_an_error_and_nothing_is_written(
    price_list_api: str, tmp_path: Path
) -> None:
    price_file = tmp_path / "prices.json"
    price_file.write_text(PRICES_FILE.read_text())
    result = CliRunner().invoke(
        parkbrake, ["pricing", "refresh", "--family", "g5", "--family", "p5", "--file", str(price_file)]
    )
    assert result.exit_code == 1
    assert "no on-demand Linux price for the families p5" in result.output
    assert price_file.read_text() == PRICES_FILE.read_text()


def test_accelerator_count_falls_back_to_the_known_one() -> None:
    current = json.loads(PRICES_FILE.read_text())
    document = refreshed_price_document(
        current, [product("inf2.xlarge", "0.7582", gpu="")], region="us-east-1", taken=date(2026, 11, 30),
        families=["inf2"],
    )  # fmt: skip
    assert document["instances"] == {"inf2.xlarge": {"usd_per_hour": "0.7582", "accelerators": 1}}
    assert document["taken"] == "2026-11-30"
    with pytest.raises(ParkbrakeError):
        refreshed_price_document(current, [], region="us-east-1", taken=date(2026, 11, 30), families=["p5"])
