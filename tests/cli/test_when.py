"""One `--since`/`--until` grammar (cli/options.py's WHEN): a duration back from now, a date, or an
ISO-8601 instant, as UTC — the same for `log` and `ledger report`."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import parkbrake
from cli.options import WHEN, parse_when

NOW = datetime(2036, 5, 5, 12, 30, tzinfo=UTC)

# Fixed offsets: a zone's DST gap or fold makes some wall times name no moment or two.
offsets = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
instants = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=offsets)


@settings(max_examples=200, deadline=None)
@given(days=st.integers(0, 400), hours=st.integers(0, 23), minutes=st.integers(0, 59))
def test_a_duration_counts_back_from_now(days: int, hours: int, minutes: int) -> None:
    text = "".join(
        f"{amount}{unit}" for amount, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if amount
    )
    if not text:
        text = "0d"
        with pytest.raises(ValueError, match="is neither"):
            parse_when(text, NOW)
        return
    assert parse_when(text, NOW) == NOW - timedelta(days=days, hours=hours, minutes=minutes)
    assert parse_when(text.upper(), NOW) == parse_when(text, NOW)


@settings(max_examples=200, deadline=None)
@given(moment=instants)
def test_an_instant_reads_back_as_the_same_moment_in_utc(moment: datetime) -> None:
    parsed = parse_when(moment.isoformat(), NOW)
    assert parsed == moment
    assert parsed.tzinfo == UTC
    if moment.utcoffset() == timedelta(0):
        zulu = moment.replace(tzinfo=None).isoformat() + "Z"
        assert parse_when(zulu, NOW) == moment


@settings(max_examples=200, deadline=None)
@given(day=st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 1, 1)))
def test_a_date_is_its_utc_midnight_and_a_bare_time_is_utc(day: date) -> None:
    assert parse_when(day.isoformat(), NOW) == datetime(day.year, day.month, day.day, tzinfo=UTC)
    assert parse_when(f"{day.isoformat()}T06:00", NOW) == datetime(
        day.year, day.month, day.day, 6, tzinfo=UTC
    )


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="abcdefgijklnopqrtuvwxy -_", min_size=1, max_size=20))
def test_anything_else_is_refused_with_the_grammar(text: str) -> None:
    with pytest.raises(ValueError, match=r"a duration back from now \(90m, 12h, 7d\)"):
        parse_when(text, NOW)


def test_the_param_type_is_a_usage_error_naming_the_flag() -> None:
    @click.command()
    @click.option("--since", type=WHEN)
    def probe(since: datetime | None) -> None:
        click.echo(since.isoformat() if since else "-")

    assert (
        CliRunner().invoke(probe, ["--since", "2036-05-05T12:00+02:00"]).output
        == "2036-05-05T10:00:00+00:00\n"
    )
    result = CliRunner().invoke(probe, ["--since", "yesterday"])
    assert result.exit_code == 2
    assert (
        "Invalid value for '--since': 'yesterday' is not a time — use a duration back from now"
        in result.output
    )
    assert WHEN.convert(NOW.astimezone(timezone(timedelta(hours=2))), None, None) == NOW


@pytest.mark.parametrize(
    "command",
    [["log", "--since"], ["ledger", "report", "--since"], ["ledger", "report", "--until"]],
    ids=" ".join,
)
def test_every_since_and_until_flag_takes_the_one_grammar(command: list[str]) -> None:
    """A bad value is refused by the shared type before any database is asked, naming the flag."""
    result = CliRunner().invoke(parkbrake, [*command, "last tuesday"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"Error: invalid value for {command[-1]}: 'last tuesday' is not a time — use "
    )
    assert result.stderr.count("\n") == 1
    context = click.Context(parkbrake)
    names = command[:-1]
    found: click.Command | None = parkbrake
    for name in names:
        assert isinstance(found, click.Group)
        found = found.get_command(context, name)
    assert found is not None
    option = next(param for param in found.params if command[-1] in getattr(param, "opts", ()))
    assert option.type is WHEN
