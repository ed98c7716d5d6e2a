"""boto3 clients as every parkbrake process makes them: endpoint and region from the standard
environment (``AWS_ENDPOINT_URL``, ``AWS_REGION``), throttling handled by botocore's adaptive retries.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import boto3
from botocore.config import Config

from guardrails.settings import aws_region

RETRIES = Config(
    retries={"mode": "adaptive", "max_attempts": 8},
    connect_timeout=5,
    read_timeout=30,
    user_agent_extra="parkbrake",
)


def client(service: str, region: str | None = None) -> Any:
    """One client per service, region and endpoint for the life of the process (a Lambda container reuses it)."""
    # AWS_REGION is honoured even where botocore reads only AWS_DEFAULT_REGION.
    endpoints = (os.environ.get("AWS_ENDPOINT_URL"), os.environ.get(f"AWS_ENDPOINT_URL_{service.upper()}"))
    return _client(service, region or aws_region(os.environ), endpoints)


@cache
def _client(service: str, region: str | None, endpoints: tuple[str | None, str | None]) -> Any:
    # botocore reads AWS_ENDPOINT_URL (and the per-service AWS_ENDPOINT_URL_<SERVICE>) itself; the
    # endpoints are part of the key so a changed environment (a test's own server) never gets a
    # client bound to the old one.
    session: Any = boto3.session.Session()  # typed Any: the service name is a runtime value, not a literal
    return session.client(service, region_name=region, config=RETRIES)
