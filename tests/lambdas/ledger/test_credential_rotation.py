"""A rotated database password: the Lambda's store reads the secret again when its login fails.

RDS rotates the managed master password every seven days while a Lambda container keeps the
credentials it read at start. Here a real PostgreSQL role, with password authentication, gets a new
password and the Secrets Manager secret (moto) the new value, as RDS's rotation does; the container's
connection then drops, and the next use must log in with the new password.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from lambdas.ledger.connections import LedgerUnavailable
from lambdas.ledger.store import store_from_environment


@pytest.fixture
def password_role(database_url: str) -> Iterator[dict[str, str]]:
    """A login role that must give its password (an hba rule of its own), on the test server."""
    role = f"rotating_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        hba_file = Path(str(admin.execute("SHOW hba_file").fetchone()[0]))  # type: ignore[index]
        if not os.access(hba_file, os.W_OK):
            pytest.skip(
                "the test PostgreSQL's pg_hba.conf is not ours to give a role password authentication"
            )
        original = hba_file.read_text()
        hba_file.write_text(f"local all {role} scram-sha-256\nhost all {role} all scram-sha-256\n{original}")
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'first-password'")
        admin.execute("SELECT pg_reload_conf()")
        try:
            parts = conninfo_to_dict(database_url)
            yield {
                "role": role,
                "host": str(parts.get("host", "")),
                "port": str(parts.get("port", 5432)),
                "dbname": str(parts.get("dbname", "postgres")),
            }
        finally:
            hba_file.write_text(original)
            admin.execute("SELECT pg_reload_conf()")
            admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
            admin.execute(f"DROP ROLE {role}")


def rds_secret(role: dict[str, str], password: str) -> str:
    """The JSON layout RDS keeps a managed master password in."""
    return json.dumps(
        {"username": role["role"], "password": password, "host": role["host"], "port": role["port"],
         "dbname": role["dbname"]}
    )  # fmt: skip


def who_am_i(store: object) -> str:
    with store._connections.connection() as connection:  # type: ignore[attr-defined]
        return str(connection.execute("SELECT current_user").fetchone()[0])


@pytest.mark.usefixtures("aws")
def test_a_rotated_password_is_read_again_from_the_secret(
    database_url: str, password_role: dict[str, str]
) -> None:
    secrets = boto3.client("secretsmanager")
    arn = secrets.create_secret(
        Name="rds!cluster-dev", SecretString=rds_secret(password_role, "first-password")
    )["ARN"]
    store = store_from_environment({"PARKBRAKE_DATABASE_SECRET_ARN": arn})
    assert who_am_i(store) == password_role["role"]

    # The rotation: a new password in the database and in the secret; the old session goes away.
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"ALTER ROLE {password_role['role']} PASSWORD 'second-password'")
        admin.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{password_role['role']}'"
        )
    secrets.put_secret_value(SecretId=arn, SecretString=rds_secret(password_role, "second-password"))

    # The invocation that finds its connection gone fails (EventBridge delivers again); the next one
    # logs in with the stale password, is refused, reads the secret again and gets in.
    with pytest.raises(LedgerUnavailable, match="terminating connection"):
        who_am_i(store)
    assert who_am_i(store) == password_role["role"]
    assert "second-password" in store._connections.url  # type: ignore[attr-defined]
    store.close()


@pytest.mark.usefixtures("aws")
def test_a_wrong_password_that_the_secret_does_not_fix_is_reported(
    database_url: str, password_role: dict[str, str]
) -> None:
    secrets = boto3.client("secretsmanager")
    arn = secrets.create_secret(Name="rds!cluster-dev", SecretString=rds_secret(password_role, "not-it"))[
        "ARN"
    ]

    with pytest.raises(LedgerUnavailable, match="password authentication failed"):
        who_am_i(store_from_environment({"PARKBRAKE_DATABASE_SECRET_ARN": arn}))
