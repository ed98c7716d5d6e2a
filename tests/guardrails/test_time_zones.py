"""Every way a time zone name can be wrong is one line naming the field, never a traceback: the one
parser (guardrails.time_zones) for `plan`, `ledger budget`, `ledger report` and the launcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import parkbrake
from guardrails.errors import InputError
from guardrails.time_zones import time_zone, zone_problem
from tests.cli.test_plan import write_stack

LONG = "A" * 300  # longer than a file name may be: ZoneInfo raises OSError (ENAMETOOLONG)
BAD_NAMES = [LONG, "America", "../etc/passwd", "", "Europe/Berlim", "Europe\x00Berlin", "/etc/localtime"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_name_is_an_input_error_naming_the_field(name: str) -> None:
    with pytest.raises(InputError) as refused:
        time_zone(name, "--timezone")
    message = str(refused.value)
    assert message.startswith("--timezone: ")
    assert "for example Europe/Berlin" in message
    assert len(message) < 200
    assert "\n" not in message


@settings(max_examples=200, deadline=None)
@given(name=st.one_of(st.text(max_size=400), st.from_regex(r"[A-Za-z_/+\-.]{1,300}", fullmatch=True)))
def test_any_string_is_a_zone_or_one_problem_line(name: str) -> None:
    problem = zone_problem(name)
    if problem is None:
        assert time_zone(name, "--timezone").key == name
    else:
        with pytest.raises(InputError, match="is not an IANA time zone"):
            time_zone(name, "--timezone")


def test_a_value_that_is_not_text_is_a_problem_too() -> None:
    assert (
        zone_problem(3) == "'3' is not an IANA time zone (for example Europe/Berlin, America/New_York or UTC)"
    )
    assert zone_problem("Europe/Berlin") is None


def refused(*arguments: str, env: dict[str, Any] | None = None) -> str:
    result = CliRunner().invoke(parkbrake, list(arguments), env=env)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)
    return result.output


NO_LEDGER = {"PARKBRAKE_DATABASE_URL": "postgresql://ana@127.0.0.1:9/ledger"}  # never reached


def test_ledger_budget_refuses_a_300_character_time_zone() -> None:
    output = refused("ledger", "budget", "research", "--limit-usd", "5", "--timezone", LONG, env=NO_LEDGER)
    assert "--timezone: 'AAAA" in output
    assert "is not an IANA time zone (for example Europe/Berlin" in output


@pytest.mark.parametrize("name", [LONG, "America"])
def test_ledger_report_refuses_a_bad_time_zone_in_one_line(name: str) -> None:
    output = refused("ledger", "report", "--timezone", name, env=NO_LEDGER)
    assert len(output.strip().splitlines()) == 1
    assert "Error: --timezone: " in output
    assert "is not an IANA time zone (for example Europe/Berlin" in output


def test_plan_refuses_a_300_character_nightly_time_zone(tmp_path: Path) -> None:
    stack = write_stack(tmp_path, lambda config: config["parkbrake:nightly"].update(timezone=LONG))
    output = refused("plan", "--stack", "dev", "--config", str(stack))
    assert "nightly.timezone: 'AAAA" in output
    assert "is not an IANA time zone (for example Europe/Berlin" in output
