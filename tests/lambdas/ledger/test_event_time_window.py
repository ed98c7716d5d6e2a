"""Every event time is checked before anything is written: one window (2006 to the clock skew after
the event was received), on every path that reads events, and no time a line can hold raises
anything but a malformed-event error."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from guardrail_fleet import client_factory, launch, launch_time, managed_tags, state_change
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_streams import at

from cli.main import parkbrake
from cli.usage.ingest import read_events
from guardrails.errors import InputError
from guardrails.ledger import CLOCK_SKEW, EARLIEST_EVENT, MalformedEvent, state_change_from_event, to_ms
from lambdas import meter
from lambdas.aws.environment import container_settings
from lambdas.ledger.store import container_store

RECEIVED = datetime(2036, 5, 6, 10, 0, tzinfo=UTC)
WRITTEN = "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM ledger_backfill)"
# Times outside the window that once raised OverflowError or were appended: UTC year 10000 from a
# negative offset, UTC year 0 from a positive one, before EC2, and just past the clock skew.
OUTSIDE = {
    "9999-12-31T23:00:00-05:00": "from the future",
    "9999-12-31T23:59:59.999999-23:59": "from the future",
    "0001-01-01T00:00:00+05:00": "before 2006-01-01",
    "0001-01-01T00:00:00+00:00": "before 2006-01-01",
    "2005-12-31T23:59:59.999Z": "before 2006-01-01",
    "1970-01-01T00:00:00Z": "before 2006-01-01",
    "2036-05-06T10:05:00.001Z": "from the future",
}


def event_at(time: object, number: int = 0) -> dict[str, Any]:
    return {
        "id": f"e-{number}",
        "detail-type": "EC2 Instance State-change Notification",
        "region": "us-east-1",
        "time": time,
        "detail": {"instance-id": f"i-{number % 7}", "state": "running" if number % 2 == 0 else "stopped"},
    }


@pytest.mark.parametrize(("time", "why"), sorted(OUTSIDE.items()))
def test_a_time_outside_the_window_is_a_malformed_event_naming_the_field(time: str, why: str) -> None:
    with pytest.raises(MalformedEvent) as refused:
        state_change_from_event(event_at(time), received_at=RECEIVED)
    assert f"time: {time!r} is {why}" in str(refused.value)


def test_the_window_holds_its_bounds_exactly() -> None:
    first = state_change_from_event(event_at("2006-01-01T00:00:00Z"), received_at=RECEIVED)
    last = state_change_from_event(event_at("2036-05-06T10:05:00Z"), received_at=RECEIVED)
    assert (first.at_ms, last.at_ms) == (to_ms(EARLIEST_EVENT), to_ms(RECEIVED + CLOCK_SKEW))
    # Without a moment received, only what no datetime holds past year 9999 is refused.
    with pytest.raises(MalformedEvent, match="is past year 9999"):
        state_change_from_event(event_at("9999-12-31T23:00:00-05:00"))


# Times as a line may hold them: ISO texts of any year and offset, numbers, garbage.
OFFSETS = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(
    lambda m: f"{'+' if m >= 0 else '-'}{abs(m) // 60:02}:{abs(m) % 60:02}"
)
ISO_TIMES = st.builds(
    lambda year, offset, fraction: f"{year:04}-12-31T23:59:59{fraction}{offset}",
    st.integers(1, 9999), st.one_of(st.just("Z"), OFFSETS), st.sampled_from(["", ".5", ".999999"]),
)  # fmt: skip
TIMES = st.one_of(
    ISO_TIMES,
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.none(),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(times=st.lists(TIMES, min_size=1, max_size=8), garbage=st.lists(st.binary(max_size=30), max_size=3))
def test_no_line_a_file_can_hold_raises_anything_but_its_line_report(
    times: list[object], garbage: list[bytes]
) -> None:
    lines: list[str | bytes] = [json.dumps(event_at(time, number)) for number, time in enumerate(times)]
    lines += garbage
    refused: InputError | None = None
    try:
        parsed = read_events(lines, received_at=RECEIVED)
    except InputError as error:
        refused, parsed = error, []
    assert refused is None or str(refused).startswith("malformed events, nothing was appended:")
    for _, change in parsed:  # whatever was accepted lies in the window
        assert to_ms(EARLIEST_EVENT) <= change.at_ms <= to_ms(RECEIVED + CLOCK_SKEW)


def test_a_file_with_one_bad_time_writes_nothing_and_exits_2_naming_its_line(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setattr("cli.usage.ingest.received_now", lambda: at(24 * 60))
    events = [event_at(at(n).strftime("%Y-%m-%dT%H:%M:%SZ"), n) for n in range(600)]
    events[500]["time"] = "9999-12-31T23:00:00-05:00"  # UTC year 10000
    events[520]["time"] = "0001-01-01T00:00:00+05:00"  # UTC year 0
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    result = CliRunner().invoke(parkbrake, ["ledger", "ingest", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "OverflowError" not in result.output
    assert "line 501: event 'e-500': time: '9999-12-31T23:00:00-05:00' is from the future" in result.output
    assert "line 521: event 'e-520': time: '0001-01-01T00:00:00+05:00' is before 2006-01-01" in result.output
    with psycopg.connect(ledger_url) as owner:
        assert owner.execute(WRITTEN).fetchone() == (0, 0)


@pytest.fixture
def meter_environment(aws: str, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setenv("PARKBRAKE_STACK", "test")
    container_settings.cache_clear()
    container_store.cache_clear()
    yield aws
    if container_store.cache_info().currsize:
        container_store().close()
    container_settings.cache_clear()
    container_store.cache_clear()


def test_the_meter_refuses_an_event_outside_the_window_and_writes_nothing(
    meter_environment: str, ledger_url: str
) -> None:
    ec2 = client_factory(meter_environment)("ec2", None)
    (host,) = launch(ec2, "g5.xlarge", managed_tags())
    event = state_change(host, "stopped", launch_time(ec2, host))
    for time in ("9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+05:00"):
        with pytest.raises(MalformedEvent, match="time: "):
            meter.handler(event | {"time": time}, None)
    ahead = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with pytest.raises(MalformedEvent, match="is from the future"):
        meter.handler(event | {"time": ahead}, None)
    with psycopg.connect(ledger_url) as owner:
        assert owner.execute(WRITTEN).fetchone() == (0, 0)
