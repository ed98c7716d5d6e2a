"""``parkbrake keys``: create prints the key once, only its hash is stored, list and revoke, clear errors."""

from __future__ import annotations

import hashlib
import json

import psycopg
import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from services.inference.keys import ApiKeyStore
from tests.lambdas.ledger.conftest import ledger_template, ledger_url

__all__ = ["ledger_template", "ledger_url"]  # a migrated database per test


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, ["keys", *args])


@pytest.fixture
def database(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    return ledger_url


def test_create_prints_the_key_once_and_stores_only_its_hash(database: str):
    created = invoke("create", "--tenant", "acme", "--output", "json")

    assert created.exit_code == 0, created.output
    document = json.loads(created.output)
    assert set(document) == {"tenant", "id", "key"}
    assert document["tenant"] == "acme"
    with psycopg.connect(database) as connection:
        stored = connection.execute("SELECT * FROM inference_api_keys").fetchall()
    assert document["key"] not in repr(stored)
    assert stored[0][2] == hashlib.sha256(document["key"].encode()).digest()


def test_list_and_revoke(database: str):
    first = json.loads(invoke("create", "-t", "acme", "-o", "json").output)
    second = json.loads(invoke("create", "-t", "globex", "-o", "json").output)

    dry = invoke("revoke", first["id"], "--dry-run")
    revoked = invoke("revoke", first["id"], "--yes", "-o", "json")
    listed = json.loads(invoke("list", "-o", "json").output)
    only_globex = json.loads(invoke("list", "--tenant", "globex", "-o", "json").output)

    assert dry.exit_code == 0
    assert "would revoke" in dry.output
    assert revoked.exit_code == 0
    assert json.loads(revoked.output)["revoked_at"] is not None
    assert [(key["id"], key["revoked_at"] is not None) for key in listed] == [
        (first["id"], True),
        (second["id"], False),
    ]
    assert [key["id"] for key in only_globex] == [second["id"]]
    store_view = invoke("list")
    assert "revoked" in store_view.output
    assert "active" in store_view.output


def test_a_revoked_key_no_longer_authenticates(database: str):
    from lambdas.ledger.connections import SingleConnection

    created = json.loads(invoke("create", "-t", "acme", "-o", "json").output)
    store = ApiKeyStore(SingleConnection(database))
    assert store.tenant_of(created["key"]) == ("acme", created["id"])
    invoke("revoke", created["id"], "--yes")
    assert store.tenant_of(created["key"]) is None


def test_bad_input_is_a_clear_error_without_a_traceback(database: str):
    bad_tenant = invoke("create", "--tenant", "no spaces please")
    unknown = invoke("revoke", "key_missing", "--yes")
    unconfirmed = invoke("revoke", json.loads(invoke("create", "-t", "acme", "-o", "json").output)["id"])

    assert bad_tenant.exit_code == 2
    assert "--tenant" in bad_tenant.output
    assert unknown.exit_code == 2
    assert "keys list" in unknown.output
    assert unconfirmed.exit_code != 0
    assert "--yes" in unconfirmed.output
    for result in (bad_tenant, unknown):
        assert "Traceback" not in result.output
