"""boto3 clients as every parkbrake process makes them: endpoint and region from the standard
environment (``AWS_ENDPOINT_URL``, ``AWS_REGION``), throttling handled by botocore's adaptive retries.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from botocore.config import Config

RETRIES = Config(
    retries={"mode": "adaptive", "max_attempts": 8},
    connect_timeout=5,
    read_timeout=30,
    user_agent_extra="parkbrake",
)


@cache
def client(service: str, region: str | None = None) -> Any:
    """One client per service and region for the life of the process (a Lambda container reuses it)."""
    return boto3.session.Session().client(service, region_name=region, config=RETRIES)
