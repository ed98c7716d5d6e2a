"""What every guardrail Lambda reads once per container: its settings, its clients and the clock.

The work functions take a :data:`ClientFactory` and ``now`` as parameters, so tests pass clients
of their own (through a fault proxy, say) and a virtual clock; the handlers pass these defaults.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any

from guardrails import settings
from guardrails.settings import Settings, settings_from_environment
from lambdas.clients import client

# (service, region) -> boto3 client; region None means the process's own region.
ClientFactory = Callable[[str, str | None], Any]
default_clients: ClientFactory = client


@cache
def container_settings() -> Settings:
    return settings_from_environment(os.environ)


def utc_now() -> datetime:
    return datetime.now(UTC)


def ledger_configured() -> bool:
    """Whether this process has a ledger database (and so needs psycopg at all)."""
    return settings.ledger_configured(os.environ)
