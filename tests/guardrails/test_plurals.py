"""guardrails/plurals.py: a count and its noun as a person writes them, for every count."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails.plurals import counted

NOUNS = st.sampled_from(["host", "GPU host", "line", "event", "tenant", "decision", "interval", "region"])


@settings(max_examples=300, deadline=None)
@given(count=st.integers(min_value=0, max_value=10**12), noun=NOUNS)
def test_one_is_singular_every_other_count_plural(count: int, noun: str) -> None:
    said = counted(count, noun)
    number, _, words = said.partition(" ")
    assert int(number.replace(",", "")) == count
    assert words == (noun if count == 1 else noun + "s")
    assert "(s)" not in said


@settings(max_examples=100, deadline=None)
@given(count=st.integers(min_value=0, max_value=10**6))
def test_a_given_plural_is_used_as_written(count: int) -> None:
    said = counted(count, "policy", "policies")
    assert said.endswith(" policy" if count == 1 else " policies")


def test_counts_are_written_with_thousands_separators() -> None:
    assert counted(1, "host") == "1 host"
    assert counted(0, "host") == "0 hosts"
    assert counted(2, "GPU host") == "2 GPU hosts"
    assert counted(1204, "event") == "1,204 events"
