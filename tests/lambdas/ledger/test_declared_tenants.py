"""Tenants are what the stack declares: a ``parkbrake:tenant`` value that is not one of them exactly is
metered for ``unattributed`` with the reason, counted and alerted, and never bills a tenant without a
budget while the declared tenant's budget denies (moto in server mode, a real ledger)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from guardrail_fleet import (
    client_factory,
    emitted_metrics,
    guardrail_settings,
    launch,
    launch_time,
    managed_tags,
    published,
    sns_queue,
    state_change,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardrails import tags
from guardrails.launch import AdmissionRequest
from guardrails.ledger import UNATTRIBUTED, attribution_for, state_change_from_event
from guardrails.runway import Budget
from guardrails.settings import SettingsError, settings_from_environment
from guardrails.tenants import unknown_tenant
from lambdas.aws.environment import ClientFactory
from lambdas.engines import metering
from lambdas.ledger.store import LedgerStore

DECLARED = frozenset({"research", "product"})
HOSTILE = ("Research", "research\u200b", "ghost")
DEFAULT_CAP = timedelta(minutes=90)


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def test_hosts_tagged_with_no_declared_tenant_are_unattributed_alerted_and_research_still_denies(
    store: LedgerStore, clients: ClientFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    ec2 = clients("ec2", None)
    topic, queue = sns_queue(clients)
    store.set_budget(Budget("research", Decimal(1), "month"))
    hosts = {
        value: launch(ec2, "g5.xlarge", managed_tags(tenant=value) | {tags.OWNER: "mallory@example.com"})[0]
        for value in HOSTILE
    }
    now = datetime.now(UTC)
    running = [
        state_change_from_event(state_change(host, "running", launch_time(ec2, host)))
        for host in hosts.values()
    ]
    declared = guardrail_settings(tenants=DECLARED, sns_topic_arn=topic)

    result = metering.meter(running, store=store, clients=clients, settings=declared, received_at=now)

    assert result.inserted == 3
    assert result.tenants == {UNATTRIBUTED}
    assert {note["instance_id"]: note["reason"] for note in result.unknown_tenants} == {
        hosts["Research"]: "unknown tenant 'Research'",
        hosts["research\u200b"]: "unknown tenant 'research\\u200b'",
        hosts["ghost"]: "unknown tenant 'ghost'",
    }
    assert {interval.attribution.tenant for interval in store.intervals()} == {UNATTRIBUTED}
    assert not set(HOSTILE) & {runway.tenant for runway in store.runways(now=now, default_cap=DEFAULT_CAP)}
    # research's budget is untouched by them, and still denies: $1 buys no hour of a g5.xlarge.
    request = AdmissionRequest("research", "g5.xlarge", 1, timedelta(hours=1))
    assert not store.admit(request, now=now, default_cap=DEFAULT_CAP, lease=timedelta(minutes=5)).granted

    capsys.readouterr()
    assert metering.alert_unknown_tenants(result.unknown_tenants, settings=declared, clients=clients) == []
    (message,) = published(clients, queue)
    assert message["Subject"] == "parkbrake: hosts tagged with an unknown tenant"
    assert f"{hosts['Research']} (unknown tenant 'Research', owner mallory@example.com)" in message["Message"]
    assert "exactly (product, research)" in message["Message"]
    (counted,) = [m for m in emitted_metrics(capsys.readouterr().out) if m["name"] == "GuardrailActions"]
    assert counted["value"] == 3
    assert counted["dimensions"] == {
        "Guardrail": "meter",
        "Action": "unattributed",
        "Reason": "unknown-tenant",
    }


def test_a_declared_tenant_is_metered_as_itself_and_a_stop_of_an_unknown_tenant_is_not_alerted_again(
    store: LedgerStore, clients: ClientFactory
) -> None:
    ec2 = clients("ec2", None)
    (good,) = launch(ec2, "g5.xlarge", managed_tags(tenant="research"))
    (bad,) = launch(ec2, "g5.xlarge", managed_tags(tenant="Research"))
    started = {host: launch_time(ec2, host) for host in (good, bad)}
    events = [state_change(host, "running", at) for host, at in started.items()]
    events += [state_change(host, "stopped", at + timedelta(minutes=10)) for host, at in started.items()]

    result = metering.meter([state_change_from_event(event) for event in events], store=store, clients=clients,
                            settings=guardrail_settings(tenants=DECLARED),
                            received_at=max(started.values()) + timedelta(minutes=11))  # fmt: skip

    assert result.tenants == {"research", UNATTRIBUTED}
    assert [note["instance_id"] for note in result.unknown_tenants] == [bad]  # its start, not its stop
    assert {i.instance_id: i.attribution.tenant for i in store.intervals()} == {
        good: "research",
        bad: UNATTRIBUTED,
    }


def test_the_declared_tenants_come_from_the_environment_and_a_bad_name_is_refused() -> None:
    environ = {"AWS_REGION": "us-east-1", "PARKBRAKE_TENANTS": "research, product"}
    assert settings_from_environment(environ).tenants == DECLARED
    assert settings_from_environment({"AWS_REGION": "us-east-1"}).tenants is None
    with pytest.raises(SettingsError, match="PARKBRAKE_TENANTS: 'Research\\\\u200b' is not a tenant name"):
        settings_from_environment(environ | {"PARKBRAKE_TENANTS": "Research\u200b"})


# Declared names and their near misses: case, whitespace, invisible and format characters, lookalikes.
near_misses = st.builds(
    lambda name, noise, at: name[:at] + noise + name[at:],
    st.sampled_from(sorted(DECLARED)),
    st.sampled_from(["\u200b", "\u200d", "\ufeff", "\u00ad", " ", "\t", "\u0130", "\u0435", "\uff52", "R"]),
    st.integers(0, 8),
)
tag_values = (
    st.sampled_from(sorted(DECLARED))
    | near_misses
    | st.text(max_size=70)
    | st.sampled_from(["RESEARCH", "ｒｅｓｅａｒｃｈ", "research\u200b", "unattributed", ""])
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=tag_values, declared=st.sampled_from([DECLARED, None]))
def test_a_tag_value_is_a_declared_tenant_exactly_or_unattributed_with_the_reason(
    value: str, declared: frozenset[str] | None
) -> None:
    attribution = attribution_for(
        "g5.xlarge", {tags.TENANT: value}, 1, region="us-east-1", lifecycle=None, zone=None,
        pool_caps={}, default_cap=DEFAULT_CAP, tenants=declared,
    )  # fmt: skip
    assert attribution is not None
    reason = unknown_tenant(value, declared) if value else None
    if declared is not None and value in declared:
        assert (attribution.tenant, reason) == (value, None)
    elif declared is not None or not value:
        assert attribution.tenant == UNATTRIBUTED
        assert (reason is None) == (not value)
    # Without the stack's list, a tag is still a tenant only by the name rule: ASCII, no invisible characters.
    if attribution.tenant != UNATTRIBUTED:
        assert attribution.tenant == value
        assert value.isascii()
        assert value.isprintable()
        assert value.strip() == value
    if reason is not None and len(repr(value)) <= 70:
        assert reason == f"unknown tenant {value!r}"
