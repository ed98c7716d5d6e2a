"""The service's settings: every bad value named at once, the new limits read from the environment."""

from __future__ import annotations

from datetime import timedelta

import pytest

from guardrails.errors import InputError
from services.inference.settings import settings_from_environment


def test_defaults_bound_a_request_and_its_connection():
    settings = settings_from_environment({})

    assert settings.batch_size == 32
    assert settings.max_request_tokens == 300_000
    assert settings.workers == 32
    assert settings.max_connections == 1024
    assert settings.metrics_port == 9464
    assert settings.header_timeout == timedelta(seconds=10)
    assert settings.body_timeout == timedelta(seconds=30)
    assert settings.keep_alive == timedelta(seconds=65)


def test_the_limits_are_read_from_the_environment():
    settings = settings_from_environment(
        {
            "PARKBRAKE_INFERENCE_BATCH_SIZE": "8",
            "PARKBRAKE_INFERENCE_MAX_REQUEST_TOKENS": "1000",
            "PARKBRAKE_INFERENCE_WORKERS": "4",
            "PARKBRAKE_INFERENCE_METRICS_PORT": "0",
            "PARKBRAKE_INFERENCE_HEADER_TIMEOUT": "2s",
            "PARKBRAKE_INFERENCE_BODY_TIMEOUT": "1m",
        }
    )
    assert (settings.batch_size, settings.max_request_tokens, settings.workers) == (8, 1000, 4)
    assert settings.metrics_port == 0
    assert (settings.header_timeout, settings.body_timeout) == (timedelta(seconds=2), timedelta(minutes=1))


def test_every_bad_value_is_named_in_one_error():
    with pytest.raises(InputError) as refused:
        settings_from_environment(
            {
                "PARKBRAKE_INFERENCE_BATCH_SIZE": "0",
                "PARKBRAKE_INFERENCE_WORKERS": "²",
                "PARKBRAKE_INFERENCE_METRICS_PORT": "70000",
                "PARKBRAKE_INFERENCE_LEASE": "9999999999d",
                "PARKBRAKE_INFERENCE_HEADER_TIMEOUT": "soon",
            }
        )
    message = str(refused.value)
    for name in ("BATCH_SIZE", "WORKERS", "METRICS_PORT", "LEASE", "HEADER_TIMEOUT"):
        assert f"PARKBRAKE_INFERENCE_{name}:" in message
    assert "'²' is not a whole number" in message
    assert "not a TCP port" in message


def test_a_tenants_share_defaults_to_8_runs_one_thread_each_and_is_capped_at_the_workers():
    defaults = settings_from_environment({})
    assert (defaults.tenant_workers, defaults.threads) == (8, 1)
    few = settings_from_environment(
        {"PARKBRAKE_INFERENCE_WORKERS": "4", "PARKBRAKE_INFERENCE_TENANT_WORKERS": "6"}
    )
    assert few.tenant_workers == 4
    with pytest.raises(InputError, match="PARKBRAKE_INFERENCE_TENANT_WORKERS: '0' is not a whole number ≥ 1"):
        settings_from_environment({"PARKBRAKE_INFERENCE_TENANT_WORKERS": "0"})
