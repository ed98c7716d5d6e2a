"""``parkbrake keys``: API keys of the inference service (create, list, revoke), in its database."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from cli.options import TENANT, confirm_or_abort, dry_run_option, output_option, yes_option
from guardrails.errors import InputError

if TYPE_CHECKING:
    from services.inference.keys import ApiKey, ApiKeyStore


@contextmanager
def key_store() -> Iterator[ApiKeyStore]:
    from lambdas.ledger.connections import SingleConnection, database_url
    from services.inference.keys import ApiKeyStore

    connections = SingleConnection(database_url(os.environ))
    try:
        yield ApiKeyStore(connections)
    finally:
        connections.close()


def key_document(key: ApiKey) -> dict[str, str | None]:
    return {
        "id": key.id,
        "tenant": key.tenant,
        "created_at": key.created_at.isoformat(),
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


@click.group()
def keys() -> None:
    """API keys of the inference service: one tenant per key, stored hashed (PARKBRAKE_DATABASE_URL)."""


@keys.command()
@click.option(
    "--tenant",
    "-t",
    type=TENANT,
    required=True,
    help="Who pays for this key's requests (the parkbrake:tenant value).",
)
@output_option
def create(tenant: str, output: str) -> None:
    """Make a key for TENANT and print it once; only its hash is kept.

    \b
    Example:
      parkbrake keys create --tenant research --output json
    """
    with key_store() as store:
        new = store.create(tenant, datetime.now(UTC))
    if output == "json":
        click.echo(json.dumps({"tenant": new.tenant, "id": new.id, "key": new.key}))
    else:
        click.echo(f"key {new.id} for tenant {new.tenant} (shown once, store it now):\n{new.key}")


@keys.command(name="list")
@click.option("--tenant", "-t", type=TENANT, default=None, help="Only this tenant's keys.")
@output_option
def list_keys(tenant: str | None, output: str) -> None:
    """List keys (ids, tenants, when made and revoked); the keys themselves cannot be shown.

    \b
    Example:
      parkbrake keys list --tenant research
    """
    with key_store() as store:
        found = store.list(tenant=tenant)
    if output == "json":
        click.echo(json.dumps([key_document(key) for key in found], indent=2))
        return
    if not found:
        click.echo("no API keys")
    for key in found:
        state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}Z" if key.revoked_at else "active"
        click.echo(f"{key.id}  {key.tenant}  created {key.created_at:%Y-%m-%d %H:%M}Z  {state}")


@keys.command()
@click.argument("key_id")
@dry_run_option
@yes_option
@output_option
def revoke(key_id: str, dry_run: bool, yes: bool, output: str) -> None:
    """Revoke KEY_ID: requests with it get 401 from then on.

    \b
    Example:
      parkbrake keys revoke 42 --yes
    """
    with key_store() as store:
        matching = [key for key in store.list() if key.id == key_id]
        if not matching:
            raise InputError(f"no API key with id {key_id!r}; `parkbrake keys list` shows the ids")
        if dry_run:
            click.echo(
                json.dumps(key_document(matching[0]) | {"dry_run": True})
                if output == "json"
                else f"would revoke {key_id} (tenant {matching[0].tenant})"
            )
            return
        confirm_or_abort(f"Revoke {key_id} of tenant {matching[0].tenant}?", assume_yes=yes)
        revoked = store.revoke(key_id, datetime.now(UTC))
    click.echo(
        json.dumps(key_document(revoked))
        if output == "json"
        else f"revoked {key_id} (tenant {revoked.tenant})"
    )
