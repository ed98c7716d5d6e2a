"""The process's boto3 clients: botocore's models shared, timestamps parsed by the standard library,
and still the answers (and credentials) botocore alone would give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from botocore.utils import parse_timestamp as botocore_timestamp

from lambdas import clients

AMI = "ami-12c6146b"


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-30T21:10:04.000Z",  # EC2's form
        "2026-11-30T21:10:04Z",
        "2026-11-30T21:10:04.123456Z",
        "2026-11-30T21:10:04+02:00",
        "2026-11-30T21:10:04",  # no zone: botocore's own rule
        "Mon, 30 Nov 2026 21:10:04 GMT",  # RFC 822 (S3, CloudFront)
        1764537004,  # epoch (the JSON protocols)
        1764537004.25,
        "1764537004.5",
    ],
)
def test_every_timestamp_reads_as_botocore_reads_it(value: object) -> None:
    ours, theirs = clients.parse_timestamp(value), botocore_timestamp(value)
    assert ours == theirs
    assert ours.utcoffset() == theirs.utcoffset()


def test_a_malformed_timestamp_is_botocores_error() -> None:
    with pytest.raises(ValueError, match="Invalid timestamp"):
        clients.parse_timestamp("2026-13-45T99:99:99.000Z")


def test_a_launch_time_from_ec2_is_the_instant_it_launched(aws: str) -> None:
    ec2 = clients.client("ec2", "us-east-1")
    before = datetime.now(UTC).replace(microsecond=0)
    ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="g5.xlarge")
    instance = ec2.describe_instances()["Reservations"][0]["Instances"][0]
    assert instance["LaunchTime"].utcoffset() == timedelta(0)
    assert before <= instance["LaunchTime"] <= datetime.now(UTC)


def test_models_are_loaded_once_and_credentials_read_per_client(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients._client.cache_clear()
    clients._models.cache_clear()
    first = clients.client("ec2", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    second = clients.client("ec2", "eu-west-1")
    assert first.meta.service_model.service_name == second.meta.service_model.service_name == "ec2"
    assert clients._models.cache_info().misses == 1  # one loader, so each model file is read once
    assert first._request_signer._credentials.access_key == "testing"
    assert second._request_signer._credentials.access_key == "second-key"
    assert second.describe_regions()["Regions"]  # a client made from the shared models works


def test_one_sessions_clients_are_made_once_each_and_share_its_credentials(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = clients.one_session_clients()
    first = made("ec2", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    second = made("ssm", "eu-west-1")
    assert made("ec2", "us-east-1") is first
    assert made("ec2", None) is first  # AWS_REGION
    assert made("ec2", "eu-west-1") is not first
    # One session: its credentials were resolved once, for the first client.
    assert second._request_signer._credentials.access_key == "testing"
    assert clients.one_session_clients()("ec2", "us-east-1")._request_signer._credentials.access_key == (
        "second-key"
    )
    assert second.meta.region_name == "eu-west-1"
    assert first.describe_regions()["Regions"]
