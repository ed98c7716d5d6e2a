"""Every parser of outside input answers garbage with its own domain error, never another exception.

Tags, events, secrets and the environment come from whoever may tag a host or write a variable: a
parser that raised anything else (OverflowError, TypeError, AttributeError) would stop the guardrail
that called it, and with it every other host's judgement. Hypothesis drives each parser with huge
numbers, unicode, control characters and the wrong JSON types.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails import tags
from guardrails.deadlines import deadline_for, parse_instant
from guardrails.durations import LONGEST, DurationError, parse_duration
from guardrails.hosts import Host, as_utc
from guardrails.ledger import MalformedEvent, state_change_from_event
from guardrails.settings import SettingsError, settings_from_environment
from lambdas.engines import deadlines, sweeping
from services.inference.settings import settings_from_environment as service_settings

NOW = datetime(2025, 3, 1, 12, tzinfo=UTC)
BOUNDED = settings(max_examples=150, deadline=None)


def outcome(call: Callable[[], Any], refusal: type[Exception]) -> tuple[Any, Exception | None]:
    """``(value, None)``, or ``(None, error)`` when ``call`` raised ``refusal``; anything else propagates."""
    try:
        return call(), None
    except refusal as error:
        return None, error


# Text a tag or a variable may hold: digits of any length, the grammar's letters, unicode digits,
# control characters and whatever else hypothesis draws.
garbage_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="0123456789dhms \t\n\x00٣²", max_size=40),
    st.from_regex(r"\A[0-9]{1,30}[dhms]\Z"),
    st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2}\Z"),
    st.sampled_from(["9999999999d", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1" * 5000]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | garbage_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@BOUNDED
@given(st.one_of(garbage_text, json_values))
def test_a_duration_is_a_timedelta_or_a_duration_error(text: Any) -> None:
    parsed, error = outcome(lambda: parse_duration(text, ceiling=None), DurationError)
    if error is not None:
        assert len(str(error)) < 300  # a tag of thousands of digits is not echoed whole
    else:
        assert timedelta(0) < parsed <= LONGEST


@pytest.mark.parametrize("text", ["9999999999d", "99999999999999999999h", "100001d", "1" * 5000 + "s"])
def test_a_huge_duration_is_refused_by_name_with_or_without_a_ceiling(text: str) -> None:
    for ceiling in (None, timedelta(days=31)):
        with pytest.raises(DurationError, match=r"too long|longer than"):
            parse_duration(text, ceiling=ceiling)


def test_only_ascii_digits_are_durations() -> None:
    with pytest.raises(DurationError, match="not a duration"):
        parse_duration("٣h")


@BOUNDED
@given(st.one_of(garbage_text, json_values))
def test_an_instant_is_utc_or_a_value_error(text: Any) -> None:
    for parse in (parse_instant, as_utc):
        try:
            moment = parse(text)
        except ValueError:
            continue
        assert moment.utcoffset() == timedelta(0)


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_an_instant_no_zone_can_shift_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="outside the calendar"):
        parse_instant(text)


def host_with(host_tags: dict[str, str], launch_time: datetime = NOW - timedelta(hours=1)) -> Host:
    return Host("i-0123456789abcdef0", "g5.xlarge", "running", launch_time, host_tags, "us-east-1")


@BOUNDED
@given(max_runtime=garbage_text, exempt_until=garbage_text)
def test_any_tags_give_a_deadline_never_past_the_ceiling(max_runtime: str, exempt_until: str) -> None:
    host = host_with({tags.MAX_RUNTIME: max_runtime, tags.EXEMPT_UNTIL: exempt_until})
    found = deadline_for(
        host,
        pool_caps={},
        default_cap=timedelta(minutes=90),
        max_exemption=timedelta(hours=24),
        ceiling=timedelta(hours=24),
        now=NOW,
    )
    assert found.cap <= timedelta(hours=24)
    assert found.enforce_at <= NOW + timedelta(hours=24)


def test_the_tag_that_stopped_every_sweep_falls_back_to_the_default_cap_and_is_reported() -> None:
    found = deadline_for(
        host_with({tags.MAX_RUNTIME: "9999999999d"}),
        pool_caps={},
        default_cap=timedelta(minutes=90),
        max_exemption=timedelta(hours=24),
        ceiling=timedelta(hours=24),
        now=NOW,
    )
    assert (found.cap, found.cap_source) == (timedelta(minutes=90), "stack")
    assert any("parkbrake:max-runtime" in problem for problem in found.problems)


ENVIRONMENT = [
    "PARKBRAKE_DEFAULT_MAX_RUNTIME",
    "PARKBRAKE_MAX_EXEMPTION",
    "PARKBRAKE_MAX_RUNTIME_CEILING",
    "PARKBRAKE_POOL_MAX_RUNTIMES",
    "PARKBRAKE_WARN_BEFORE",
    "PARKBRAKE_REAP_UNTAGGED",
    "PARKBRAKE_SNS_TOPIC_ARN",
    "PARKBRAKE_DECISION_RETENTION",
    "PARKBRAKE_STOPPED_RETENTION",
    "PARKBRAKE_SPOT_ACTION",
    "PARKBRAKE_REGIONS",
]


@BOUNDED
@given(st.dictionaries(st.sampled_from(ENVIRONMENT), garbage_text, max_size=4))
def test_any_guardrail_environment_is_settings_or_a_settings_error(values: dict[str, str]) -> None:
    _parsed, error = outcome(
        lambda: settings_from_environment({"AWS_REGION": "us-east-1", **values}), SettingsError
    )
    if isinstance(error, SettingsError):
        assert error.problems
        assert all(problem.startswith("PARKBRAKE_") for problem in error.problems)


@pytest.mark.parametrize("name", ["PARKBRAKE_DEFAULT_MAX_RUNTIME", "PARKBRAKE_MAX_RUNTIME_CEILING"])
def test_a_huge_default_cap_is_a_settings_error_naming_the_variable(name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        settings_from_environment({"AWS_REGION": "us-east-1", name: "9999999999d"})


@BOUNDED
@given(st.dictionaries(st.sampled_from(["LEASE", "WAIT", "DRAIN", "RATE_LIMIT", "BURST"]), garbage_text))
def test_any_inference_environment_is_settings_or_an_input_error(values: dict[str, str]) -> None:
    from guardrails.errors import InputError

    environ = {f"PARKBRAKE_INFERENCE_{name}": value for name, value in values.items()}
    _parsed, error = outcome(lambda: service_settings(environ), InputError)
    assert error is None or "PARKBRAKE_INFERENCE_" in str(error)


def test_a_huge_inference_lease_is_an_input_error_naming_the_variable() -> None:
    from guardrails.errors import InputError

    with pytest.raises(InputError, match="PARKBRAKE_INFERENCE_LEASE"):
        service_settings({"PARKBRAKE_INFERENCE_LEASE": "9999999999d"})


def state_change_event(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "id": "7bf73129-1428-4cd3-a780-95db273d1602",
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "time": "2025-03-01T11:00:00Z",
        "region": "us-east-1",
        "detail": {"instance-id": "i-0123456789abcdef0", "state": "running"},
    }
    event.update(overrides)
    return event


event_fields = st.sampled_from(["id", "time", "region", "detail", "detail-type", "source", "account"])
# An account the envelope may hold: garbage, or (often enough to be drawn) the real thing.
accounts = st.one_of(json_values, st.from_regex(r"\d{12}", fullmatch=True), st.text(max_size=14))
detail_fields = st.sampled_from(["instance-id", "state"])


@BOUNDED
@given(st.dictionaries(event_fields, json_values, max_size=3), st.dictionaries(detail_fields, json_values))
def test_any_state_change_event_parses_or_is_refused(
    overrides: dict[str, Any], detail: dict[str, Any]
) -> None:
    event = state_change_event(**overrides)
    if isinstance(event.get("detail"), dict):
        event["detail"] = {**event["detail"], **detail}
    try:
        change = deadlines.parse_state_change(event)
    except ValueError:
        pass
    else:
        assert change.instance_id.startswith("i-")
        assert change.account == "" or (len(change.account) == 12 and change.account.isdigit())
        assert "account" not in event or change.account == event["account"]
    outcome(lambda: state_change_from_event(event), MalformedEvent)


def tag_change_event(**overrides: Any) -> dict[str, Any]:
    """The tagging service's event for an EC2 instance, in the shape of the EventBridge events
    reference's "Tag Change on Resource" example (see tests/lambdas/test_central_deadlines.py)."""
    event: dict[str, Any] = {
        "version": "0",
        "id": "ffd8a6fe-32f8-ef66-c85c-111111111111",
        "detail-type": "Tag Change on Resource",
        "source": "aws.tag",
        "account": "123456789012",
        "time": "2025-03-01T11:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"],
        "detail": {"changed-tag-keys": ["parkbrake:max-runtime"], "service": "ec2", "resource-type": "instance",
                   "version": 3, "tags": {"parkbrake:max-runtime": "1h"}},
    }  # fmt: skip
    event.update(overrides)
    return event


@BOUNDED
@given(
    st.dictionaries(
        st.sampled_from(["time", "region", "detail", "source", "resources"]), json_values, max_size=3
    ),
    accounts,
    st.one_of(json_values, st.text(max_size=90)),
)
def test_any_tag_change_event_parses_or_is_refused(overrides: dict[str, Any], account: Any, arn: Any) -> None:
    event = tag_change_event(**overrides, account=account)
    if isinstance(event["resources"], list):
        event["resources"] = [arn, *event["resources"]]
    try:
        change = deadlines.parse_deadline_event(event)
    except ValueError:
        return
    assert change.state == deadlines.TAGS_CHANGED
    assert change.instance_id.startswith("i-")
    assert change.instance_id in str(event["resources"][0])
    assert (change.account, change.region) == (event["account"], event["region"])


@BOUNDED
@given(
    st.one_of(
        json_values,
        st.dictionaries(
            st.sampled_from(["dry_run", "instance_ids", "warn", "account", "region"]),
            st.one_of(json_values, accounts),
        ),
    )
)
def test_any_reaper_event_parses_or_is_refused(event: Any) -> None:
    try:
        dry_run, instance_ids = sweeping.parse_event(event)
        place = sweeping.event_place(event)
    except ValueError:
        return
    assert place is None or (len(place.account) == 12 and place.account.isdigit() and place.region)
    assert isinstance(dry_run, bool)
    assert instance_ids is None or all(instance_id.startswith("i-") for instance_id in instance_ids)


CHAT_SECRET_ERRORS = {
    'the chat webhook secret is not valid JSON (plain text, or {"url": ...})',
    'the chat webhook secret holds no http(s) URL (plain text, or {"url": ...})',
    "the chat webhook secret's URL holds spaces or control characters; store the URL alone",
}


@BOUNDED
@given(json_values)
def test_any_webhook_secret_is_a_url_or_a_chat_error(value: Any) -> None:
    from lambdas.aws.chat import ChatError, url_from_secret

    text = value if isinstance(value, str) else json.dumps(value)
    url, error = outcome(lambda: url_from_secret(text), ChatError)
    if error is not None:
        # No message quotes the secret: each is one of the fixed sentences (a substring test would
        # fail on a secret that happens to be a word of one of them, as "R" is of "URL").
        assert str(error) in CHAT_SECRET_ERRORS
    else:
        assert url.startswith(("https://", "http://"))


def dev_stack_config() -> dict[str, Any]:
    from ruamel.yaml import YAML

    from tests.conftest import REPO_ROOT

    return dict(YAML(typ="safe").load((REPO_ROOT / "Pulumi.dev.yaml").read_text())["config"])


STACK_FIELDS = [
    ("parkbrake:pools", "training", "max_runtime"),
    ("parkbrake:pools", "training", "max"),
    ("parkbrake:pools", "training", "instance_type"),
    ("parkbrake:tenants", "research", "monthly_budget_usd"),
    ("parkbrake:guardrails", "max_runtime_ceiling", None),
    ("parkbrake:guardrails", "default_max_runtime", None),
    ("parkbrake:nightly", "cron", None),
    ("parkbrake:parked", None, None),
]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(STACK_FIELDS), st.one_of(garbage_text, json_values))
def test_any_stack_file_value_is_a_stack_or_a_config_error(field: tuple[Any, ...], value: Any) -> None:
    from guardrails.errors import InputError
    from stacks.config import parse_stack_config

    config = json.loads(json.dumps(dev_stack_config()))
    key, *path = [part for part in field if part is not None]
    if not path:
        config[key] = value
    else:
        section = config.setdefault(key, {})
        for part in path[:-1]:
            section = section.setdefault(part, {})
        section[path[-1]] = value
    _parsed, error = outcome(lambda: parse_stack_config("dev", config, "Pulumi.dev.yaml"), InputError)
    assert error is None or "Pulumi.dev.yaml" in str(error)


def test_a_stack_file_that_is_not_utf8_is_an_input_error(tmp_path: Any) -> None:
    from guardrails.errors import InputError
    from stacks.config import load_stack_config

    (tmp_path / "Pulumi.dev.yaml").write_bytes(b"config:\n  aws:region: \xff\xfe\n")
    with pytest.raises(InputError, match="UTF-8"):
        load_stack_config("dev", tmp_path)
