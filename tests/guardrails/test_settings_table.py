"""The settings table's conventions: every row complete and within its bounds, read alike by the stack
parser and the environment reader, its defaults the only ones, and the docs' table its rendering."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from guardrails.settings import Settings, SettingsError, setting_from_environment, settings_from_environment
from guardrails.settings_table import (
    AGENT_IDLE_AFTER,
    PROCESS,
    SETTINGS,
    SETTINGS_BY_NAME,
    TUNING,
    WIRED,
    Setting,
    SettingValueError,
    Tuning,
    docs_table,
    every_variable,
    replace_docs_table,
    tuning_environment,
)
from stacks.config import parse_stack_config
from stacks.guardrails_config import GuardrailsConfig, tuned_value
from stacks.validation import ConfigError, Problems, Section
from tests.conftest import REPO_ROOT
from tests.stacks.test_config import example

SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:parkbrake/dev/chat-webhook-AbCdEf"


@pytest.mark.parametrize("row", SETTINGS, ids=lambda row: row.name)
def test_every_row_names_its_variable_stack_key_help_and_a_default_within_its_bounds(row: Setting) -> None:
    assert row.variable.startswith("PARKBRAKE_")
    assert row.variable.isupper()
    assert row.stack_key.startswith(("guardrails.", "pools.<name>."))
    assert len(row.help) > 20
    assert row.help[0].islower(), "help is a phrase the docs' table can show"
    if row.kind == "duration" and row.default is not None:  # None: unset, off (close_grace)
        assert (row.floor or timedelta(seconds=1)) <= row.default <= row.duration_ceiling
    rendered = row.render(row.default)
    # The default reads back as itself: what the component writes, the Lambda reads.
    assert rendered is None or row.parse(rendered) == row.default


def test_each_variable_and_stack_key_is_declared_once() -> None:
    variables = list(every_variable())
    assert len(variables) == len(set(variables))
    keys = [row.stack_key for row in SETTINGS]
    assert len(keys) == len(set(keys))
    assert all(item.help and item.set_by for item in (*WIRED, *PROCESS))


def _samples(row: Setting) -> list[tuple[Any, str]]:
    """(what the stack file holds, what the environment holds) for the same value, good and bad."""
    if row.kind == "boolean":
        return [(True, "true"), (False, "false"), ("maybe", "maybe")]
    if row.kind == "secret-arn":
        return [
            (SECRET, SECRET),
            ("https://hooks.slack.com/services/T/B/X", "https://hooks.slack.com/services/T/B/X"),
        ]
    ceiling = row.duration_ceiling
    samples = ["1m", "90m", "2h", "7d", "soon", "0m", f"{int(ceiling.total_seconds()) + 1}s"]
    samples += [f"{int(ceiling.total_seconds())}s"]
    if row.floor is not None:
        samples += [f"{int(row.floor.total_seconds())}s", f"{int(row.floor.total_seconds()) - 1}s"]
    return [(text, text) for text in samples]


def _from_stack(row: Setting, value: Any) -> tuple[bool, Any]:
    problems = Problems()
    key = row.stack_key.rpartition(".")[2]
    parsed = tuned_value(Section({key: value}, "guardrails", problems, {key}), key, row)
    return (not problems.has(f"guardrails.{key}"), parsed)


def _from_environment(row: Setting, text: str) -> tuple[bool, Any]:
    """(accepted, value); a refusal must name the variable."""
    problems: list[str] = []
    try:
        return (True, setting_from_environment(row, {row.variable: text}))
    except SettingsError as error:
        problems = error.problems
    assert problems[0].startswith(f"{row.variable}: ")
    return (False, None)


@pytest.mark.parametrize("row", TUNING, ids=lambda row: row.name)
def test_the_stack_parser_and_the_environment_reader_read_every_row_alike(row: Setting) -> None:
    outcomes = []
    for stacked, environment in _samples(row):
        from_stack, from_environment = _from_stack(row, stacked), _from_environment(row, environment)
        assert from_stack[0] == from_environment[0], (row.name, stacked)
        if from_stack[0]:
            assert from_stack[1] == from_environment[1], (row.name, stacked)
        outcomes.append(from_stack[0])
    # The samples cover both an accepted and a refused value.
    assert True in outcomes
    assert False in outcomes


def test_a_stack_files_settings_reach_the_lambdas_environment_and_read_back_the_same() -> None:
    config = example()
    config["parkbrake:guardrails"].update(
        default_max_runtime="2h",
        max_exemption="3d",
        max_runtime_ceiling="2d",
        reap_untagged=True,
        stopped_retention="14d",
        terminate_stopped=True,
        decision_retention="500d",
        warn_before="30m",
        chat_webhook_secret=SECRET,
        close_grace="3d",
    )
    parsed = parse_stack_config("dev", config, "Pulumi.dev.yaml").guardrails
    environment = tuning_environment(parsed)
    assert set(environment) == {row.variable for row in TUNING}
    read = settings_from_environment({**environment, "PARKBRAKE_REGIONS": "us-east-1"})
    for row in TUNING:
        assert getattr(read, row.name) == getattr(parsed, row.name), row.name
    # Not the defaults, so a row read back as its default (a dropped variable) would show.
    assert {row.name for row in TUNING if getattr(read, row.name) != row.default} >= {
        "default_max_runtime", "max_exemption", "max_runtime_ceiling", "reap_untagged", "stopped_retention",
        "terminate_stopped", "decision_retention", "warn_before", "chat_webhook_secret_arn", "close_grace",
    }  # fmt: skip


def test_an_unset_row_is_left_out_of_the_environment_and_read_back_as_its_default() -> None:
    environment = tuning_environment(Tuning())
    assert "PARKBRAKE_CHAT_WEBHOOK_SECRET_ARN" not in environment
    read = settings_from_environment({"PARKBRAKE_REGIONS": "us-east-1"})
    assert all(getattr(read, row.name) == row.default for row in TUNING)


def test_the_defaults_of_every_record_are_the_tables() -> None:
    """Settings, the stack's GuardrailsConfig and the agent's flag take each default from its row."""
    from cli.agent import agent
    from guardrails.durations import parse_duration

    records = (Settings(stack=None, regions=()), GuardrailsConfig(), Tuning())
    for row in TUNING:
        assert {getattr(record, row.name) for record in records} == {row.default}, row.name
    assert {field.name for field in dataclasses.fields(Tuning)} == {row.name for row in TUNING}
    (idle_after,) = [option for option in agent.params if option.name == "idle_after"]
    assert parse_duration(idle_after.default) == AGENT_IDLE_AFTER.default
    assert idle_after.envvar == AGENT_IDLE_AFTER.variable


def test_a_bad_value_is_refused_naming_its_variable_and_its_stack_key() -> None:
    with pytest.raises(SettingsError, match=r"PARKBRAKE_WARN_BEFORE: 'soon' is not a duration"):
        settings_from_environment({"PARKBRAKE_REGIONS": "us-east-1", "PARKBRAKE_WARN_BEFORE": "soon"})
    config = example()
    config["parkbrake:guardrails"]["warn_before"] = "soon"
    with pytest.raises(ConfigError, match=r"guardrails\.warn_before"):
        parse_stack_config("dev", config, "Pulumi.dev.yaml")
    with pytest.raises(SettingValueError, match="not true or false"):
        SETTINGS_BY_NAME["reap_untagged"].parse("maybe")


def test_the_docs_settings_table_is_the_tables_rendering() -> None:
    page = (REPO_ROOT / "docs" / "configuration.md").read_text()
    assert docs_table() in page, "regenerate it: python -m guardrails.settings_table"
    for variable in every_variable():
        assert f"`{variable}`" in docs_table()
    # The regeneration replaces exactly the marked part: a changed row shows up as a changed page.
    assert replace_docs_table(page) == page
    assert replace_docs_table(page.replace("`400d`", "`401d`", 1)) == page


def test_the_agents_idle_window_is_a_pools_stack_key_within_the_rows_bounds() -> None:
    config = example()
    config["parkbrake:pools"]["training"]["agent_idle_after"] = "30m"
    parsed = parse_stack_config("dev", config, "Pulumi.dev.yaml")
    assert parsed.pools["training"].agent_idle_after == timedelta(minutes=30)
    assert parsed.pools["inference"].agent_idle_after is None
    config["parkbrake:pools"]["training"]["agent_idle_after"] = "40d"
    with pytest.raises(ConfigError, match=r"pools\.training\.agent_idle_after.*ceiling of 31d"):
        parse_stack_config("dev", config, "Pulumi.dev.yaml")
