"""A database password is never printed: whatever reserved characters it holds, escaped or not, in a
URL, a conninfo or RDS's JSON secret, no error line the ledger commands print shows any of it.

Passwords are drawn as distinct marker words joined by reserved characters, so a leak of any piece of
one (libpq reading the rest of a password as a host, a port or a database name) is a marker in the
output.
"""

from __future__ import annotations

import json
import uuid
from urllib.parse import quote

import boto3
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from cli.main import parkbrake
from guardrails.errors import InputError
from lambdas.ledger.connections import checked_url, masked_url

RESERVED = list(":/?#[]@!$&'()*+,;=% ")
UNREACHABLE = "127.0.0.1:9"  # the discard port: nothing listens, the connection is refused at once

passwords = st.lists(
    st.tuples(st.sampled_from(RESERVED), st.text(RESERVED, max_size=2)), min_size=1, max_size=4
).map(lambda pieces: "".join(f"{lead}Pw{index}q{tail}" for index, (lead, tail) in enumerate(pieces)))
escapes = st.sampled_from(["raw", "encoded", "encoded but '/'", "encoded but '@'"])


def markers(password: str) -> list[str]:
    return [f"Pw{index}q" for index in range(password.count("Pw"))]


def written(password: str, escape: str) -> str:
    if escape == "raw":
        return password
    kept = {"encoded": "", "encoded but '/'": "/", "encoded but '@'": "@"}[escape]
    return quote(password, safe=kept)


def ledger_runway(url: str) -> str:
    result = CliRunner(env={"PARKBRAKE_DATABASE_URL": url}).invoke(parkbrake, ["ledger", "runway"])
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    return result.output


def assert_hidden(password: str, *outputs: str) -> None:
    for output in outputs:
        for marker in markers(password):
            assert marker not in output, output


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(password=passwords, escape=escapes)
def test_a_url_password_with_any_reserved_character_is_never_printed(password: str, escape: str) -> None:
    url = f"postgresql://ana:{written(password, escape)}@{UNREACHABLE}/ledger"
    assert_hidden(password, masked_url(url), ledger_runway(url))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(password=passwords)
def test_a_conninfo_or_rds_secret_password_is_never_printed(aws: str, password: str) -> None:
    conninfo = make_conninfo("", host="127.0.0.1", port="9", user="ana", password=password)
    secret = json.dumps({"username": "ana", "password": password, "host": "127.0.0.1", "port": 9})
    arn = boto3.client("secretsmanager").create_secret(Name=f"ledger-{uuid.uuid4().hex}", SecretString=secret)
    from_secret = CliRunner(env={"PARKBRAKE_DATABASE_SECRET_ARN": arn["ARN"], "PARKBRAKE_DATABASE_URL": None})
    result = from_secret.invoke(parkbrake, ["ledger", "runway"])
    assert result.exit_code == 1, result.output
    assert "Connection refused" in result.output
    assert_hidden(password, masked_url(conninfo), ledger_runway(conninfo), result.output)


@pytest.mark.parametrize(
    ("password", "escape"), [("pa/ss", "%2F"), ("p@ss", "%40"), ("a/b@c", "%2F")]
)  # fmt: skip
def test_a_url_libpq_would_misread_is_refused_naming_the_escape(password: str, escape: str) -> None:
    with pytest.raises(InputError) as refused:
        checked_url(f"postgresql://ana:{password}@{UNREACHABLE}/ledger", "PARKBRAKE_DATABASE_URL")
    assert escape in str(refused.value)
    assert password not in str(refused.value)
    assert "postgresql://ana:***@127.0.0.1:9/ledger" in str(refused.value)


@pytest.mark.parametrize("password", ["pa?ss", "pa#ss", "pa:ss", "pa%2Fss", "p%40ss"])
def test_a_url_libpq_reads_as_written_is_accepted(password: str) -> None:
    url = f"postgresql://ana:{password}@{UNREACHABLE}/ledger"
    assert checked_url(url, "PARKBRAKE_DATABASE_URL") == url
    assert masked_url(url) == "postgresql://ana:***@127.0.0.1:9/ledger"


def test_a_password_in_the_query_is_never_shown() -> None:
    assert masked_url("postgresql://db.internal/ledger?password=Pw0q&sslmode=require") == (
        "postgresql://db.internal/ledger"
    )


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(password=passwords)
def test_the_migrate_hint_of_a_real_empty_database_never_shows_the_password(
    empty_database_url: str, password: str
) -> None:
    """The server (trust authentication on its socket) lets the login in: the error is the ledger's own
    'has no schema' line, which shows the URL masked."""
    parts = conninfo_to_dict(empty_database_url)
    location = f"/{parts['dbname']}?host={quote(str(parts.get('host', '')), safe='/')}&port={parts.get('port', 5432)}"
    url = f"postgresql://{parts.get('user', 'postgres')}:{quote(password, safe='')}@{location}"
    output = ledger_runway(url)
    assert "run parkbrake ledger migrate" in output
    assert_hidden(password, output)
