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
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from guardrails.errors import ParkbrakeError
from guardrails.price_list import (
    CACHE_NODE_TYPES,
    SERVICE_ITEMS,
    accelerator_info,
    refreshed_price_document,
    spot_prices,
)
from guardrails.pricing import PRICES_FILE, price_table_from_document


def price_list_document(
    service_code: str, product_family: str, attributes: dict[str, str], usd: str, unit: str
) -> str:
    """One PriceList entry as GetProducts answers it (FormatVersion aws_v1): the product, its
    attributes, and its on-demand term's price dimensions."""
    sku = (
        "SKU"
        + sha256(json.dumps([service_code, attributes], sort_keys=True).encode()).hexdigest()[:12].upper()
    )
    term = f"{sku}.JRTCKXETXF"
    return json.dumps(
        {
            "product": {
                "productFamily": product_family,
                "attributes": {"servicecode": service_code, "locationType": "AWS Region", **attributes},
                "sku": sku,
            },
            "serviceCode": service_code,
            "terms": {
                "OnDemand": {
                    term: {
                        "offerTermCode": "JRTCKXETXF",
                        "sku": sku,
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "priceDimensions": {
                            f"{term}.6YS6EN2CT7": {
                                "rateCode": f"{term}.6YS6EN2CT7",
                                "description": f"{usd} USD per {unit}",
                                "beginRange": "0",
                                "endRange": "Inf",
                                "unit": unit,
                                "pricePerUnit": {"USD": usd},
                                "appliesTo": [],
                            }
                        },
                        "termAttributes": {},
                    }
                }
            },
            "version": "20261101000000",
            "publicationDate": "2026-11-01T00:00:00Z",
        }
    )


def product(
    instance_type: str, usd: str, *, gpu: str = "1", os: str = "Linux", region: str = "us-east-1"
) -> str:
    return price_list_document(
        "AmazonEC2",
        "Compute Instance",
        {
            "instanceType": instance_type,
            "instanceFamily": "GPU instance",
            "gpu": gpu,
            "regionCode": region,
            "operatingSystem": os,
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
        },
        usd,
        "Hrs",
    )


PRODUCTS = [
    product("g5.xlarge", "1.0060000000"),
    product("g5.48xlarge", "16.2880000000", gpu="8"),
    product("g6.xlarge", "0.8048000000"),
    product("g6.xlarge", "0.9000000000", os="Windows"),
    product("g5.xlarge", "1.1230000000", region="eu-west-1"),
    product("g5.xlarge", "1.2000000000", region="us-gov-west-1"),
]
# usagetype prefixes as AWS writes them: us-east-1 has none for some services and USE1- for others.
PREFIX = {"us-east-1": "", "eu-west-1": "EU-"}
CACHE_NODES = {
    "cache.t4g.micro": "0.016",
    "cache.t4g.small": "0.032",
    "cache.t4g.medium": "0.065",
    "cache.r7g.large": "0.219",
    "cache.r7g.xlarge": "0.437",
}


def service_products(region: str, *, markup: str = "1", without_valkey: bool = False) -> list[str]:
    """Each service's SKUs in ``region``: the ones the table prices and their neighbours (the other
    usage of the same family, another engine, another architecture) that must not be taken for them."""
    prefix = PREFIX[region]
    use1 = prefix or "USE1-"
    rate = Decimal(markup)

    def sku(service: str, family: str, usage: str, usd: str, unit: str, **attributes: str) -> str:
        price = f"{Decimal(usd) * rate:.10f}"
        return price_list_document(
            service, family, {"regionCode": region, "usagetype": usage, **attributes}, price, unit
        )

    engines = {"Redis": "1", "Valkey": "0.8"} if not without_valkey else {"Redis": "1"}
    return [
        sku("AWSELB", "Load Balancer-Application", f"{prefix}LoadBalancerUsage", "0.0225", "Hrs",
            operation="LoadBalancing:Application", group="ELB:Balancer"),
        sku("AWSELB", "Load Balancer-Application", f"{prefix}LCUUsage", "0.008", "LCU-Hrs",
            operation="LoadBalancing:Application", group="ELB:Balancer"),
        sku("AmazonEC2", "NAT Gateway", f"{prefix}NatGateway-Hours", "0.045", "Hrs", operation="NatGateway"),
        sku("AmazonEC2", "NAT Gateway", f"{prefix}NatGateway-Bytes", "0.045", "GB", operation="NatGateway"),
        sku("AmazonVPC", "VpcPublicIPv4Address", f"{use1}PublicIPv4:InUseAddress", "0.005", "Hrs",
            group="VPCPublicIPv4Address"),
        sku("AmazonVPC", "VpcPublicIPv4Address", f"{use1}PublicIPv4:IdleAddress", "0.005", "Hrs",
            group="VPCPublicIPv4Address"),
        sku("AmazonVPC", "VpcEndpoint", f"{use1}VpcEndpoint-Hours", "0.01", "Hrs"),
        sku("AmazonRDS", "ServerlessV2", f"{prefix}Aurora:ServerlessV2Usage", "0.12", "ACU-Hr",
            databaseEngine="Aurora PostgreSQL"),
        sku("AmazonRDS", "ServerlessV2", f"{prefix}Aurora:ServerlessV2IOOptimizedUsage", "0.156", "ACU-Hr",
            databaseEngine="Aurora PostgreSQL"),
        sku("AmazonRDS", "ServerlessV2", f"{prefix}Aurora:ServerlessV2Usage", "0.12", "ACU-Hr",
            databaseEngine="Aurora MySQL"),
        sku("AmazonRDS", "Database Storage", f"{prefix}Aurora:StorageUsage", "0.10", "GB-Mo",
            databaseEngine="Aurora PostgreSQL"),
        sku("AmazonRDS", "Database Storage", f"{prefix}Aurora:StorageUsage", "0.10", "GB-Mo",
            databaseEngine="Aurora MySQL"),
        sku("AmazonRDS", "Database Storage", f"{prefix}Aurora:IO-OptimizedStorageUsage", "0.225", "GB-Mo",
            databaseEngine="Aurora PostgreSQL"),
        sku("AmazonRDS", "Database Storage", f"{prefix}RDS:GP2-Storage", "0.115", "GB-Mo",
            databaseEngine="PostgreSQL"),
        *(
            sku("AmazonElastiCache", "Cache Instance", f"{prefix}NodeUsage:{node}",
                f"{Decimal(usd) * Decimal(share):.4f}", "Hrs", cacheEngine=engine, instanceType=node)
            for engine, share in engines.items()
            for node, usd in CACHE_NODES.items()
        ),
        sku("AmazonElastiCache", "Cache Instance", f"{prefix}NodeUsage:cache.m7g.large", "0.158", "Hrs",
            cacheEngine="Redis", instanceType="cache.m7g.large"),
        sku("AmazonECS", "Compute", f"{prefix}Fargate-vCPU-Hours:perCPU", "0.04048", "hours", cputype="perCPU"),
        sku("AmazonECS", "Compute", f"{prefix}Fargate-GB-Hours", "0.004445", "hours", memorytype="perGB"),
        sku("AmazonECS", "Compute", f"{prefix}Fargate-ARM-vCPU-Hours:perCPU", "0.03238", "hours",
            cputype="perCPU"),
        sku("AmazonECS", "Compute", f"{prefix}Fargate-ARM-GB-Hours", "0.00356", "hours", memorytype="perGB"),
        sku("AmazonEC2", "Storage", f"{prefix}EBS:VolumeUsage.gp3", "0.08", "GB-Mo", volumeApiName="gp3"),
        sku("AmazonEC2", "Storage", f"{prefix}EBS:VolumeUsage.gp2", "0.10", "GB-Mo", volumeApiName="gp2"),
        sku("awswaf", "Web Application Firewall", f"{use1}WebACLV2", "5.00", "WebACL", group="Web ACL"),
        sku("awswaf", "Web Application Firewall", f"{use1}RuleV2", "1.00", "Rule", group="Rule"),
        sku("awswaf", "Web Application Firewall", f"{use1}RequestV2-Tier1", "0.60", "Requests", group="Request"),
        sku("AWSSecretsManager", "Secret", f"{use1}AWSSecretsManager-Secrets", "0.40", "Secrets"),
        sku("AWSSecretsManager", "API Request", f"{use1}AWSSecretsManagerAPIRequest", "0.000005", "API Requests"),
        sku("AmazonCloudWatch", "Alarm", f"{prefix}CW:AlarmMonitorUsage", "0.10", "Alarms"),
        sku("AmazonCloudWatch", "Alarm", f"{prefix}CW:HighResAlarmMonitorUsage", "0.30", "Alarms"),
        sku("AmazonCloudWatch", "Metric", f"{prefix}CW:MetricMonitorUsage", "0.30", "Metrics"),
    ]  # fmt: skip


def matches(document: str, service_code: str, filters: dict[str, str]) -> bool:
    """GetProducts' TERM_MATCH: productFamily is the product's own field, every other one an attribute."""
    found = json.loads(document)["product"]
    fields = {"productFamily": found["productFamily"], **found["attributes"]}
    return fields["servicecode"] == service_code and all(fields.get(k) == v for k, v in filters.items())


class PriceListHandler(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    # What the Price List holds; each test may change it before it runs.
    catalogue: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        PriceListHandler.requests.append({"target": self.headers["X-Amz-Target"], **body})
        filters = {f["Field"]: f["Value"] for f in body["Filters"]}
        matching = [
            document
            for document in PriceListHandler.catalogue
            if matches(document, body["ServiceCode"], filters)
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
    PriceListHandler.catalogue = [
        *PRODUCTS,
        *service_products("us-east-1", markup="1.05"),
        *service_products("eu-west-1", markup="1.1"),
    ]
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
    # every service price of both regions is rebuilt from the Price List, each dated and sourced
    assert table.service("alb_hour", "us-east-1") == Decimal("0.023625")  # 0.0225, marked up here
    assert table.service("alb_hour", "eu-west-1") == Decimal("0.02475")  # not LCUUsage's 0.008
    assert table.service("aurora_serverless_v2_acu_hour", "eu-west-1") == Decimal(
        "0.132"
    )  # not I/O-Optimized
    assert table.service("fargate_vcpu_hour", "eu-west-1") == Decimal("0.044528")  # x86, not ARM
    assert table.service("elasticache_valkey_node_hour", "eu-west-1", "cache.t4g.micro") == Decimal("0.01408")
    assert table.service("waf_web_acl_month", "us-east-1") == Decimal("5.25")
    assert table.known_service_variants("elasticache_node_hour") == sorted(CACHE_NODE_TYPES)
    for region in ("us-east-1", "eu-west-1"):
        entry = document["regions"][region]
        assert sorted(entry["service_sources"]) == sorted(item.label for item in SERVICE_ITEMS)
        assert {source["taken"] for source in entry["service_sources"].values()} == {entry["taken"]}
    assert document["regions"]["us-east-1"]["service_sources"]["nat_gateway_hour"]["source"] == (
        "AWS Price List API: AmazonEC2 (productFamily=NAT Gateway), usagetype NatGateway-Hours, "
        "USD per NAT gateway-hour"
    )
    assert "wrote 4 on-demand prices and 44 service prices in 2 regions" in result.output
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


def test_a_service_item_the_price_list_does_not_answer_is_an_error_naming_it(
    price_list_api: str, price_file: Path
) -> None:
    """eu-west-1 has no Valkey SKU here: the refresh names each missing item and writes nothing."""
    PriceListHandler.catalogue = [
        *PRODUCTS,
        *service_products("us-east-1"),
        *service_products("eu-west-1", without_valkey=True),
    ]
    before = price_file.read_bytes()
    result = refresh("--region", "us-east-1", "--region", "eu-west-1", "--file", str(price_file))
    assert result.exit_code == 1
    missing = [line for line in result.output.splitlines() if line.startswith("  - ")]
    assert missing == [
        f"  - AmazonElastiCache, eu-west-1, elasticache_valkey_node_hour[{node}]: no on-demand price for "
        f"usagetype NodeUsage:{node} in AmazonElastiCache (productFamily=Cache Instance, cacheEngine=Valkey)"
        for node in CACHE_NODE_TYPES
    ]
    assert "prices.json was left unchanged" in result.output
    assert price_file.read_bytes() == before


def test_two_prices_for_one_item_is_an_error_not_a_guess(price_list_api: str, price_file: Path) -> None:
    PriceListHandler.catalogue.append(
        price_list_document(
            "AWSELB",
            "Load Balancer-Application",
            {
                "regionCode": "us-east-1",
                "usagetype": "USE1-LoadBalancerUsage",
                "operation": "LoadBalancing:Outposts",
            },
            "0.0300000000",
            "Hrs",
        )
    )
    before = price_file.read_bytes()
    result = refresh("--region", "us-east-1", "--file", str(price_file))
    assert result.exit_code == 1
    assert "AWSELB, us-east-1, alb_hour: 2 prices (0.023625, 0.03)" in result.output
    assert price_file.read_bytes() == before


def test_the_same_answers_write_the_same_bytes(price_list_api: str, price_file: Path, tmp_path: Path) -> None:
    """Whatever order the Price List answers in, the file is byte-identical."""
    again = tmp_path / "again.json"
    again.write_bytes(price_file.read_bytes())
    assert refresh("--region", "eu-west-1", "--region", "us-east-1", "--file", str(price_file)).exit_code == 0
    PriceListHandler.catalogue.reverse()
    assert refresh("--region", "us-east-1", "--region", "eu-west-1", "--file", str(again)).exit_code == 0
    assert again.read_bytes() == price_file.read_bytes()


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
            current,
            accelerators={},
            products=[],
            service_answers={},
            spot_history={},
            regions=None,
            taken=date(2026, 11, 30),
        )
