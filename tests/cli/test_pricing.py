"""`parkbrake pricing refresh` against moto (EC2) and a local server speaking the Price List API.

moto does not emulate the Price List API, so this test serves ``GetProducts`` itself on 127.0.0.1:
boto3 still signs, paginates and parses a real HTTP exchange, reached through
AWS_ENDPOINT_URL_PRICING, while DescribeInstanceTypes and DescribeSpotPriceHistory go to moto.
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
from guardrails.price_list import accelerator_info, refreshed_price_document, spot_prices
from guardrails.pricing import PRICES_FILE, price_table_from_document


def product(
    instance_type: str, usd: str, *, gpu: str = "1", os: str = "Linux", region: str = "us-east-1"
) -> str:
    sku = f"SKU{abs(hash((instance_type, region, os))) % 10**8}"
    return json.dumps(
        {
            "product": {
                "sku": sku,
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "gpu": gpu,
                    "regionCode": region,
                    "locationType": "AWS Region",
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


PRODUCTS = [
    product("g5.xlarge", "1.0060000000"),
    product("g5.48xlarge", "16.2880000000", gpu="8"),
    product("g6.xlarge", "0.8048000000"),
    product("g6.xlarge", "0.9000000000", os="Windows"),
    product("g5.xlarge", "1.1230000000", region="eu-west-1"),
    product("g5.xlarge", "1.2000000000", region="us-gov-west-1"),
]


class PriceListHandler(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        PriceListHandler.requests.append({"target": self.headers["X-Amz-Target"], **body})
        filters = {f["Field"]: f["Value"] for f in body["Filters"]}
        matching = [
            document
            for document in PRODUCTS
            if (
                filters["instanceFamily"] == "GPU instance"
                and json.loads(document)["product"]["attributes"]["regionCode"]
                == filters.get("regionCode", "*")
            )
            or (filters["instanceFamily"] == "GPU instance" and "regionCode" not in filters)
        ]
        offset = int(body.get("NextToken") or 0)
        answer: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": matching[offset : offset + 2]}
        if offset + 2 < len(matching):
            answer["NextToken"] = str(offset + 2)
        payload = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def price_list_api(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The Price List served here, EC2 by moto: botocore routes each service by its own endpoint variable."""
    PriceListHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), PriceListHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", url)
    yield url
    server.shutdown()


@pytest.fixture
def price_file(tmp_path: Path) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(PRICES_FILE.read_text())
    return path


def refresh(*arguments: str) -> Any:
    return CliRunner().invoke(parkbrake, ["pricing", "refresh", *arguments])


def test_refresh_rebuilds_prices_counts_and_spot_snapshot_of_the_regions_asked_for(
    price_list_api: str, price_file: Path
) -> None:
    result = refresh("--region", "us-east-1", "--region", "eu-west-1", "--file", str(price_file))
    assert result.exit_code == 0, result.output
    assert "wrote 4 on-demand prices in 2 region(s)" in result.output
    document = json.loads(price_file.read_text())
    table = price_table_from_document(document)
    assert table.on_demand("g5.48xlarge", "us-east-1").usd_per_hour == Decimal("16.288")
    assert table.on_demand("g6.xlarge", "us-east-1").usd_per_hour == Decimal("0.8048")  # not the Windows SKU
    assert table.on_demand("g5.xlarge", "eu-west-1").usd_per_hour == Decimal("1.123")
    assert document["regions"]["us-east-1"]["taken"] == document["accelerators"]["taken"]
    # accelerator counts come from DescribeInstanceTypes (moto's copy of AWS's answers), not the price file
    assert table.accelerators("g5.48xlarge") == 8
    assert table.accelerators("trn2.48xlarge") == 16
    assert document["accelerators"]["types"]["g6f.xlarge"] == {
        "count": 1,
        "kind": "gpu",
        "name": "L4",
        "fraction": "0.125",
    }
    # the spot snapshot has a price for every zone moto offers the type in
    zones = table.spot_zones("g5.xlarge", "us-east-1")
    assert zones
    assert all(zone.startswith("us-east-1") for zone in zones)
    assert (
        table.lookup("g5.xlarge", "us-east-1", "spot", next(iter(zones))).usd_per_hour
        == zones[next(iter(zones))]
    )
    # service prices of a region already in the file are kept; a new region has none yet
    assert table.service("alb_hour", "us-east-1") == Decimal("0.0225")
    assert document["regions"]["eu-west-1"]["services"] == {}
    targets = {request["target"] for request in PriceListHandler.requests}
    assert targets == {"AWSPriceListService.GetProducts"}
    assert any(request.get("NextToken") for request in PriceListHandler.requests)


def test_refresh_without_regions_takes_every_commercial_region(price_list_api: str, price_file: Path) -> None:
    result = refresh("--file", str(price_file), "--output", "json")
    assert result.exit_code == 0, result.output
    regions = json.loads(price_file.read_text())["regions"]
    assert {"eu-west-1", "us-east-1"} <= set(regions)
    assert "us-gov-west-1" not in regions  # GovCloud is another partition


def test_dry_run_writes_nothing(price_list_api: str, price_file: Path) -> None:
    before = price_file.read_bytes()
    result = refresh("--region", "us-east-1", "--file", str(price_file), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would write" in result.output
    assert price_file.read_bytes() == before


def test_a_region_without_prices_is_an_error_and_nothing_is_written(
    price_list_api: str, price_file: Path
) -> None:
    before = price_file.read_bytes()
    result = refresh("--region", "us-east-1", "--region", "ap-south-2", "--file", str(price_file))
    assert result.exit_code == 1
    assert "no on-demand Linux price of an accelerated instance type for ap-south-2" in result.output
    assert price_file.read_bytes() == before


def test_accelerator_info_counts_devices_once() -> None:
    inferentia = {
        "InstanceType": "inf2.xlarge",
        "InferenceAcceleratorInfo": {"Accelerators": [{"Count": 1, "Name": "Inferentia2"}]},
        "NeuronInfo": {"NeuronDevices": [{"Count": 1, "Name": "Inferentia2"}]},
    }
    assert accelerator_info(inferentia) == {"count": 1, "kind": "neuron", "name": "Inferentia2"}
    assert accelerator_info({"InstanceType": "m7i.large"}) is None


def test_the_spot_snapshot_keeps_the_latest_linux_price_per_zone() -> None:
    history = [
        {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.40",
         "ProductDescription": "Linux/UNIX", "Timestamp": date(2026, 11, 29)},
        {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.4500",
         "ProductDescription": "Linux/UNIX", "Timestamp": date(2026, 11, 30)},
        {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.90",
         "ProductDescription": "Windows", "Timestamp": date(2026, 11, 30)},
    ]  # fmt: skip
    assert spot_prices(history) == {"g5.xlarge": {"us-east-1a": "0.45"}}


def test_refreshed_document_refuses_an_empty_answer() -> None:
    current = json.loads(PRICES_FILE.read_text())
    with pytest.raises(ParkbrakeError, match="DescribeInstanceTypes answered no accelerated instance type"):
        refreshed_price_document(
            current, accelerators={}, products=[], spot_history={}, regions=None, taken=date(2026, 11, 30)
        )
