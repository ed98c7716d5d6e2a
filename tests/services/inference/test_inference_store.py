"""The PostgreSQL idempotency store: atomic claims, lease lapse, owner-checked completion, retention."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from guardrails.errors import InputError
from guardrails.idempotency import Lease, wait_intervals
from lambdas.ledger.connections import LedgerUnavailable, PooledConnections, SingleConnection
from services.inference.idempotency import (
    COMPRESS_FROM_BYTES,
    IdempotencyStore,
    Outcome,
    PostgresIdempotencyStore,
    ResponseTooLarge,
    Scope,
    StoredResponse,
)
from services.inference.keys import ApiKeyStore
from services.inference.redis_store import RedisIdempotencyStore, redis_client, row_key
from services.inference.settings import settings_from_environment

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LEASE = Lease(lease=timedelta(seconds=30), retention=timedelta(hours=24))
SCOPE = Scope("acme", "POST /v1/embeddings", "key-1")
OK = StoredResponse(200, {"Content-Type": "application/json"}, b'{"data":[]}')


@pytest.fixture(params=["postgres", "redis"])
def store(request: pytest.FixtureRequest, ledger_url: str) -> Iterator[IdempotencyStore]:
    """Each behavioural test runs against both stores: PostgreSQL and a real Valkey/Redis server."""
    connections = PooledConnections(ledger_url, max_size=20)
    if request.param == "postgres":
        yield PostgresIdempotencyStore(connections, LEASE, max_stored_bytes=64 * 1024)
    else:
        client = redis_client(request.getfixturevalue("redis_url"), pool_size=20)
        client.flushdb()
        yield RedisIdempotencyStore(client, ApiKeyStore(connections), LEASE, max_stored_bytes=64 * 1024)
        client.close()
    connections.close()


@pytest.fixture
def postgres_store(ledger_url: str) -> Iterator[PostgresIdempotencyStore]:
    connections = PooledConnections(ledger_url, max_size=2)
    yield PostgresIdempotencyStore(connections, LEASE, max_stored_bytes=64 * 1024)
    connections.close()


def test_concurrent_claims_on_one_key_have_exactly_one_winner(store: IdempotencyStore):
    start, outcomes = threading.Barrier(20), []

    def claim() -> None:
        start.wait()
        outcomes.append(store.claim(SCOPE, "fp", T0).outcome)

    threads = [threading.Thread(target=claim) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count(Outcome.CLAIMED) == 1
    assert outcomes.count(Outcome.IN_PROGRESS) == 19


def test_a_lapsed_lease_is_taken_over_once_by_the_same_request_only(store: IdempotencyStore):
    first = store.claim(SCOPE, "fp", T0)
    during = store.claim(SCOPE, "fp", T0 + timedelta(seconds=29))
    other_body = store.claim(SCOPE, "other", T0 + timedelta(seconds=31))
    taken = store.claim(SCOPE, "fp", T0 + timedelta(seconds=31))
    again = store.claim(SCOPE, "fp", T0 + timedelta(seconds=32))

    assert first.outcome is Outcome.CLAIMED
    assert during.outcome is Outcome.IN_PROGRESS
    assert other_body.outcome is Outcome.MISMATCH
    assert taken.outcome is Outcome.CLAIMED
    assert taken.owner != first.owner
    assert again.outcome is Outcome.IN_PROGRESS
    # The worker that lost its lease cannot overwrite the new owner's result.
    assert first.owner is not None
    assert taken.owner is not None
    assert store.complete(SCOPE, first.owner, OK, T0 + timedelta(seconds=33)) is False
    assert store.complete(SCOPE, taken.owner, OK, T0 + timedelta(seconds=33)) is True


def test_a_renewed_lease_is_not_taken_over_and_only_its_owner_renews(store: IdempotencyStore):
    first = store.claim(SCOPE, "fp", T0)
    assert first.owner is not None
    renewed = store.renew(SCOPE, first.owner, T0 + timedelta(seconds=25))
    not_ours = store.renew(SCOPE, uuid.uuid4(), T0 + timedelta(seconds=26))
    past_first_lease = store.claim(SCOPE, "fp", T0 + timedelta(seconds=40))
    past_renewed_lease = store.claim(SCOPE, "fp", T0 + timedelta(seconds=56))

    assert renewed is True
    assert not_ours is False
    assert past_first_lease.outcome is Outcome.IN_PROGRESS  # 30 s from the renewal at 25 s
    assert past_renewed_lease.outcome is Outcome.CLAIMED
    assert store.renew(SCOPE, first.owner, T0 + timedelta(seconds=57)) is False  # taken over


def test_a_completed_claim_is_not_renewed(store: IdempotencyStore):
    claim = store.claim(SCOPE, "fp", T0)
    assert claim.owner is not None
    store.complete(SCOPE, claim.owner, OK, T0)
    assert store.renew(SCOPE, claim.owner, T0 + timedelta(seconds=5)) is False
    assert store.claim(SCOPE, "fp", T0 + timedelta(seconds=6)).response == OK


def test_a_completed_response_replays_until_its_retention_ends(store: IdempotencyStore):
    claim = store.claim(SCOPE, "fp", T0)
    assert claim.owner is not None
    store.complete(SCOPE, claim.owner, OK, T0)

    replay = store.claim(SCOPE, "fp", T0 + timedelta(hours=23))
    mismatch = store.claim(SCOPE, "changed", T0 + timedelta(hours=23))
    reused = store.claim(SCOPE, "changed", T0 + timedelta(hours=24))

    assert replay.outcome is Outcome.REPLAY
    assert replay.response == OK
    assert mismatch.outcome is Outcome.MISMATCH
    assert reused.outcome is Outcome.CLAIMED  # after retention the key is free again


def test_a_released_claim_lets_the_retry_run_at_once(store: IdempotencyStore):
    claim = store.claim(SCOPE, "fp", T0)
    assert claim.owner is not None
    store.release(SCOPE, claim.owner)
    assert store.claim(SCOPE, "fp", T0 + timedelta(seconds=1)).outcome is Outcome.CLAIMED


def test_large_bodies_are_stored_compressed_and_replayed_exactly(
    postgres_store: PostgresIdempotencyStore, ledger_url: str
):
    store = postgres_store
    body = b'{"embedding":[' + b",".join(b"0.0123456789" for _ in range(5000)) + b"]}"
    claim = store.claim(SCOPE, "fp", T0)
    assert claim.owner is not None
    store.complete(SCOPE, claim.owner, StoredResponse(200, {}, body), T0)

    with psycopg.connect(ledger_url) as connection:
        row = connection.execute("SELECT compressed, length(body) FROM inference_idempotency").fetchone()
    assert row is not None
    assert row[0] is True
    assert len(body) > COMPRESS_FROM_BYTES
    assert row[1] < len(body) // 4
    replay = store.claim(SCOPE, "fp", T0)
    assert replay.response is not None
    assert replay.response.body == body


def test_a_body_past_the_cap_is_refused_with_the_limit(store: IdempotencyStore):
    noise = os.urandom(256 * 1024)  # incompressible: 256 KiB against a 64 KiB cap
    claim = store.claim(SCOPE, "fp", T0)
    assert claim.owner is not None
    with pytest.raises(ResponseTooLarge, match="65536 bytes"):
        store.complete(SCOPE, claim.owner, StoredResponse(200, {}, noise), T0)


def test_the_sweeper_deletes_expired_rows_in_bounded_batches(
    postgres_store: PostgresIdempotencyStore, ledger_url: str
):
    store = postgres_store
    for index in range(10):
        scope = Scope("acme", "POST /v1/embeddings", f"key-{index}")
        claim = store.claim(scope, "fp", T0 + timedelta(minutes=index))
        assert claim.owner is not None
        store.complete(scope, claim.owner, OK, T0 + timedelta(minutes=index))
    expiry = T0 + LEASE.retention

    assert store.sweep(expiry - timedelta(seconds=1), batch=3) == 0
    # At expiry + 4 minutes, rows 0-4 have expired: batches of 3 take them oldest first.
    now = expiry + timedelta(minutes=4)
    assert [store.sweep(now, batch=3) for _ in range(3)] == [3, 2, 0]
    with psycopg.connect(ledger_url) as connection:
        left = [row[0] for row in connection.execute("SELECT key FROM inference_idempotency ORDER BY key")]
    assert left == [f"key-{index}" for index in range(5, 10)]


def test_wait_intervals_double_and_stay_within_the_bound():
    intervals = wait_intervals(timedelta(seconds=1))
    assert intervals[:4] == [0.01, 0.02, 0.04, 0.08]
    assert max(intervals) == 0.2
    assert sum(intervals) == pytest.approx(1.0)


@pytest.fixture
def service_role_url(ledger_url: str) -> Iterator[str]:
    """A login role that is a member of parkbrake_inference, as the service's role is."""
    name = f"parkbrake_inference_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE parkbrake_inference")
    yield make_conninfo(ledger_url, user=name)
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute(f"DROP ROLE {name}")


def test_the_service_role_keeps_idempotency_rows_but_cannot_make_keys_or_touch_the_ledger(
    ledger_url: str, service_role_url: str
):
    made = ApiKeyStore(SingleConnection(ledger_url)).create("acme", T0)
    connections = SingleConnection(service_role_url)
    store = PostgresIdempotencyStore(connections, LEASE)
    claim = store.claim(SCOPE, "fp", T0)
    assert claim.owner is not None
    assert store.complete(SCOPE, claim.owner, OK, T0)
    assert store.sweep(T0 + LEASE.retention, batch=10) == 1
    assert ApiKeyStore(connections).tenant_of(made.key) == ("acme", made.id)
    connections.close()
    with psycopg.connect(service_role_url, autocommit=True) as connection:
        for statement in (
            "INSERT INTO inference_api_keys VALUES ('key_x', 'acme', 'x', now(), NULL)",
            "UPDATE inference_api_keys SET revoked_at = NULL",
            "SELECT * FROM events",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute(statement)


@pytest.fixture
def api_key(ledger_url: str) -> str:
    return ApiKeyStore(SingleConnection(ledger_url)).create("acme", T0).key


def test_admit_names_the_caller_and_claims_its_key(store: IdempotencyStore, api_key: str):
    first = store.admit(api_key, SCOPE.endpoint, SCOPE.key, "fp", T0)
    assert first is not None
    assert (first.tenant, first.key_id.startswith("key_")) == ("acme", True)
    assert first.claim.outcome is Outcome.CLAIMED
    assert first.claim.owner is not None
    running = store.admit(api_key, SCOPE.endpoint, SCOPE.key, "fp", T0)
    mismatch = store.admit(api_key, SCOPE.endpoint, SCOPE.key, "other", T0)
    store.complete(SCOPE, first.claim.owner, OK, T0)
    replay = store.admit(api_key, SCOPE.endpoint, SCOPE.key, "fp", T0 + timedelta(seconds=1))

    assert running is not None
    assert running.claim.outcome is Outcome.IN_PROGRESS
    assert running.claim.lease_until == T0 + LEASE.lease
    assert mismatch is not None
    assert mismatch.claim.outcome is Outcome.MISMATCH
    assert replay is not None
    assert replay.claim.outcome is Outcome.REPLAY
    assert replay.claim.response == OK


def test_admit_refuses_unknown_and_revoked_keys_and_claims_nothing(store: IdempotencyStore, ledger_url: str):
    keys = ApiKeyStore(SingleConnection(ledger_url))
    revoked = keys.create("acme", T0)
    keys.revoke(revoked.id, T0)

    assert store.admit("pbk_unknown", SCOPE.endpoint, SCOPE.key, "fp", T0) is None
    assert store.admit(revoked.key, SCOPE.endpoint, SCOPE.key, "fp", T0) is None
    assert store.claim(SCOPE, "another request", T0).outcome is Outcome.CLAIMED  # nothing held the key


def test_concurrent_admissions_with_one_key_have_exactly_one_winner(store: IdempotencyStore, api_key: str):
    # Losers whose statement began before the winner committed do not see its row in their snapshot:
    # they read it again (the claim path), and never claim a second time.
    start, outcomes = threading.Barrier(20), []

    def admit() -> None:
        start.wait()
        admission = store.admit(api_key, SCOPE.endpoint, SCOPE.key, "fp", T0)
        assert admission is not None
        outcomes.append(admission.claim.outcome)

    threads = [threading.Thread(target=admit) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count(Outcome.CLAIMED) == 1
    assert outcomes.count(Outcome.IN_PROGRESS) == 19


def test_the_redis_store_keeps_a_row_for_its_retention_compressed_and_forgets_it_after(
    redis_url: str, ledger_url: str
):
    client = redis_client(redis_url, pool_size=2)
    client.flushdb()
    connections = PooledConnections(ledger_url, max_size=1)
    store = RedisIdempotencyStore(client, ApiKeyStore(connections), LEASE)
    body = b'{"embedding":[' + b",".join(b"0.0123456789" for _ in range(5000)) + b"]}"
    claim = store.claim(SCOPE, "fp", T0)
    assert claim.owner is not None
    assert store.complete(SCOPE, claim.owner, StoredResponse(200, {}, body), T0)

    stored = client.hgetall(row_key(SCOPE))
    ttl_ms = client.pttl(row_key(SCOPE))
    assert stored[b"compressed"] == b"1"
    assert len(stored[b"body"]) < len(body) // 4
    assert LEASE.retention.total_seconds() * 1000 - 60_000 < ttl_ms <= LEASE.retention.total_seconds() * 1000
    client.pexpire(row_key(SCOPE), 1)  # the retention ends: the server drops the row itself
    for _ in range(100):
        if not client.exists(row_key(SCOPE)):
            break
        threading.Event().wait(0.01)
    assert store.claim(SCOPE, "another request", T0).outcome is Outcome.CLAIMED
    assert store.sweep(T0 + LEASE.retention, batch=10) == 0  # nothing left for a sweeper
    client.close()
    connections.close()


def test_an_unreachable_redis_is_a_clear_unavailable_error(ledger_url: str):
    connections = PooledConnections(ledger_url, max_size=1)
    client = redis_client("redis://127.0.0.1:9/0", pool_size=1)  # nothing listens on the discard port
    store = RedisIdempotencyStore(client, ApiKeyStore(connections), LEASE)

    with pytest.raises(LedgerUnavailable, match="PARKBRAKE_INFERENCE_REDIS_URL"):
        store.claim(SCOPE, "fp", T0)
    connections.close()


@pytest.mark.parametrize("url", ["http://cache:6379", "cache:6379"])
def test_a_redis_url_that_is_not_one_is_refused_by_name(url: str):
    with pytest.raises(InputError, match="PARKBRAKE_INFERENCE_REDIS_URL") as refused:
        settings_from_environment({"PARKBRAKE_INFERENCE_REDIS_URL": url})
    assert "redis://" in str(refused.value)
