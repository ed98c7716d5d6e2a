"""The hint ``ledger report`` ends with when usage is held for no tenant: every host named, each with
the command that attributes it (no PostgreSQL needed: the hint is built from the hosts alone)."""

from __future__ import annotations

from datetime import UTC, datetime

from guardrails.ledger import to_ms
from lambdas.ledger.attributions import HINT_COMMANDS, UnattributedHost, attribute_hint

START = datetime(2036, 5, 5, 10, tzinfo=UTC)


def host(number: int) -> UnattributedHost:
    return UnattributedHost(f"i-{number:017x}", to_ms(START) + number * 60_000, 3_600_000 * (number + 1))


def test_one_host_is_named_with_its_command() -> None:
    lines = attribute_hint([host(1)]).splitlines()

    assert lines == [
        "unattributed: 1 host metered for no tenant: i-00000000000000001 (7,200 accelerator-s); "
        "attribute it with:",
        "  parkbrake ledger attribute i-00000000000000001 --tenant TENANT "
        "--since 2036-05-05T10:01:00+00:00 --reason TEXT",
    ]


def test_two_hosts_each_get_their_own_command() -> None:
    lines = attribute_hint([host(1), host(2)]).splitlines()

    assert lines[0].startswith("unattributed: 2 hosts metered for no tenant: i-00000000000000001 (7,200")
    assert lines[0].endswith("; attribute each with:")
    assert "i-00000000000000002 (10,800 accelerator-s)" in lines[0]
    assert lines[1:] == [
        "  parkbrake ledger attribute i-00000000000000001 --tenant TENANT "
        "--since 2036-05-05T10:01:00+00:00 --reason TEXT",
        "  parkbrake ledger attribute i-00000000000000002 --tenant TENANT "
        "--since 2036-05-05T10:02:00+00:00 --reason TEXT",
    ]


def test_many_hosts_are_all_named_the_first_few_with_a_command() -> None:
    hosts = [host(number) for number in range(12)]

    lines = attribute_hint(hosts).splitlines()

    assert lines[0].startswith("unattributed: 12 hosts metered for no tenant: ")
    commands = [line for line in lines if line.startswith("  parkbrake ledger attribute ")]
    assert [line.split()[3] for line in commands] == [h.instance_id for h in hosts[:HINT_COMMANDS]]
    assert lines[-1].startswith(f"  and the same for the other {len(hosts) - HINT_COMMANDS} hosts: ")
    assert "i-0000000000000000b --since 2036-05-05T10:11:00+00:00" in lines[-1]
    for each in hosts:  # every host named in the summary, and given its own line or its --since
        assert each.instance_id in lines[0]
        assert sum(each.instance_id in line for line in lines[1:]) == 1
    assert len(lines) == 1 + HINT_COMMANDS + 1
