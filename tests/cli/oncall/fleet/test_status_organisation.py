"""``parkbrake status`` in a member account whose organisation is parked: the hub's spoke wrote
``/parkbrake/<hub>/spoke-<region>/parked`` there, and the account's launchers refuse every start
while the stacks' own switches still say "no" (moto's server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from guardrails import names
from tests.cli.oncall.ops_fleet import REGION, STACK, aws_client, project_copy, seed

HUB = "org"
SWITCH = names.spoke_park_parameter(HUB, REGION)


@pytest.fixture
def fleet(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(project_copy(tmp_path))
    return seed(aws)


def invoke(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["status", "--stack", STACK, *arguments], env={"COLUMNS": "80"})


def switch(aws: str, name: str, value: str) -> None:
    aws_client(aws, "ssm").put_parameter(Name=name, Value=value, Type="String", Overwrite=True)


def test_a_parked_organisation_is_named_beside_the_stack_it_stops(aws: str, fleet: Any) -> None:
    switch(aws, SWITCH, "true")

    document = json.loads(invoke("-o", "json").stdout)
    text = invoke()

    [stack] = document["stacks"]
    assert (stack["parked"], stack["organisation_parked"]) == (False, [{"parameter": SWITCH, "hub": HUB}])
    assert document["summary"]["organisation_parked_stacks"] == [STACK]
    assert text.exit_code == 0, text.output
    line = f"  organisation parked (hub {HUB}): nightly starts refused for 1 stack in {REGION}"
    assert text.output.splitlines().count(line) == 2  # in the summary, and again on the last screen
    [row] = [row for row in text.output.splitlines() if row.startswith(STACK) and REGION in row]
    assert row.split()[1] == "organisation"  # the Stacks table's parked column, not "no"
    assert max(map(len, text.output.splitlines())) <= 80


@pytest.mark.parametrize(
    ("name", "value"),
    [(SWITCH, "false"), (names.spoke_park_parameter(HUB, "eu-west-1"), "true")],
    ids=["off", "another-region"],
)
def test_a_switch_that_is_off_or_another_regions_parks_nothing_here(
    aws: str, fleet: Any, name: str, value: str
) -> None:
    switch(aws, name, value)

    document = json.loads(invoke("-o", "json").stdout)
    text = invoke()

    assert document["stacks"][0]["organisation_parked"] == []
    assert document["summary"]["organisation_parked_stacks"] == []
    assert "organisation parked" not in text.output
    assert text.exit_code == 0, text.output


def test_a_switch_neither_true_nor_false_is_an_error_line_never_unparked(aws: str, fleet: Any) -> None:
    switch(aws, SWITCH, "maybe")

    result = invoke("-o", "json")

    assert result.exit_code == 1
    assert f"SSM parameter {SWITCH} is 'maybe', neither 'true' nor 'false'" in result.output
    assert [stack["stack"] for stack in json.loads(result.stdout)["stacks"]] == [STACK]  # still shown
