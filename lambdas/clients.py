"""boto3 clients as every parkbrake process makes them: endpoint and region from the standard
environment (``AWS_ENDPOINT_URL``, ``AWS_REGION``), throttling handled by botocore's adaptive retries.

Creating a client is mostly loading botocore's JSON models (the service's, and the endpoint and
default-configuration data every session loads again), and reading a large answer is mostly parsing
timestamps with dateutil. So every client's session shares one model loader (each file is read
once per process, or per Lambda container) and parses AWS's ISO 8601 timestamps with the standard
library, falling back to botocore's own parser for anything else.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ProxyConnectionError
from botocore.utils import parse_timestamp as botocore_timestamp

from guardrails.settings import aws_region

# The most calls one client makes side by side (the stop path's removals from groups); its connection
# pool holds as many, so no thread waits for a connection or opens one that is thrown away after.
CONCURRENT_CALLS = 16
RETRIES = Config(
    retries={"mode": "adaptive", "max_attempts": 8},
    connect_timeout=2,  # an AWS endpoint answers a connect in milliseconds; waiting longer only delays the error
    read_timeout=30,
    max_pool_connections=CONCURRENT_CALLS,
    user_agent_extra="parkbrake",
)
_CREATING = threading.Lock()  # a botocore session is not thread-safe while it creates a client
# A call that could not even open its connection (refused, no such host, connect timeout) is tried
# UNREACHABLE_ATTEMPTS times, not max_attempts: an endpoint that refused twice is a wrong
# AWS_ENDPOINT_URL or a network that is down, and eight attempts with backoff only made a person wait
# ~10 s for the same answer. Throttling, 5xx and a connection lost mid-call keep the adaptive retries.
UNREACHABLE_ATTEMPTS = 2
_UNREACHABLE = (EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError)


def client(service: str, region: str | None = None) -> Any:
    """One client per service, region and endpoint for the life of the process (a Lambda container reuses it)."""
    # AWS_REGION is honoured even where botocore reads only AWS_DEFAULT_REGION.
    endpoints = (os.environ.get("AWS_ENDPOINT_URL"), os.environ.get(f"AWS_ENDPOINT_URL_{service.upper()}"))
    return _client(service, region or aws_region(os.environ), endpoints)


@cache
def _client(service: str, region: str | None, endpoints: tuple[str | None, str | None]) -> Any:
    # botocore reads AWS_ENDPOINT_URL (and the per-service AWS_ENDPOINT_URL_<SERVICE>) itself; the
    # endpoints are part of the key so a changed environment (a test's own server) never gets a
    # client bound to the old one. Each client has its own session, so credentials are resolved
    # from the environment of the moment; only the models are shared.
    with _CREATING:
        # typed Any: the service name is a runtime value, not a literal
        session: Any = new_session()
        return _failing_fast_when_unreachable(session.client(service, region_name=region, config=RETRIES))


def one_session_clients() -> Callable[[str, str | None], Any]:
    """A client factory for one command that makes several clients at once: all from one session,
    so the session's setup (its event handlers, configuration and credentials chain, about 10 ms a
    client) is done once. Credentials are resolved once, for the first client; the process's
    :func:`client` still resolves them per client."""
    session: Any = new_session()  # Any: the service name is a runtime value, not a literal
    made: dict[tuple[str, str | None], Any] = {}

    def client_of(service: str, region: str | None = None) -> Any:
        key = (service, region or aws_region(os.environ))
        with _CREATING:
            if key not in made:
                made[key] = _failing_fast_when_unreachable(
                    session.client(service, region_name=key[1], config=RETRIES)
                )
            return made[key]

    return client_of


def _failing_fast_when_unreachable(made: Any) -> Any:
    """``made`` with its retries of a connection that could not be opened cut to UNREACHABLE_ATTEMPTS
    (outside Lambda: a person is waiting).

    botocore asks every ``needs-retry.<service>`` handler and takes the first answer that is not
    None, False meaning "do not retry" (botocore/endpoint.py, ``Endpoint._needs_retry``); this handler
    is registered first on the same event as the retry mode's own, so its False wins.
    """
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        # A guardrail in Lambda keeps every retry: no person waits on it, and a stop that gave up on
        # a passing network fault would leave a host running until the next sweep.
        return made
    event = f"needs-retry.{made.meta.service_model.service_id.hyphenize()}"
    made.meta.events.register_first(event, _stop_retrying_unreachable, unique_id="parkbrake-unreachable")
    return made


def _stop_retrying_unreachable(
    attempts: int, caught_exception: Exception | None = None, **_: Any
) -> bool | None:
    if isinstance(caught_exception, _UNREACHABLE) and attempts >= UNREACHABLE_ATTEMPTS:
        return False
    return None


def new_session() -> boto3.session.Session:
    """A boto3 session on the process's shared botocore models, parsing timestamps fast."""
    core = botocore.session.Session()
    core.register_component("data_loader", _models(core.get_config_variable("data_path")))
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    return boto3.session.Session(botocore_session=core)


@cache
def _models(data_path: str | None) -> botocore.loaders.Loader:
    """botocore's model loader for ``AWS_DATA_PATH``; it caches every file it has read."""
    return botocore.loaders.create_loader(data_path)


def parse_timestamp(value: Any) -> datetime:
    """AWS's ISO 8601 timestamps (``2026-11-30T21:10:04.000Z``) by the standard library, 50 times
    faster than dateutil; epoch numbers, RFC 822 and anything unusual by botocore's parser."""
    if isinstance(value, str) and len(value) >= 20 and value[10] == "T":
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return botocore_timestamp(value)
        if parsed.tzinfo is not None:  # without a zone, botocore's rule (the local zone) applies
            return parsed
    return botocore_timestamp(value)
