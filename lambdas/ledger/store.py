"""The ledger in PostgreSQL (psycopg 3): migrations, appending transitions, usage, runway, actions.

Where the database is: ``PARKBRAKE_DATABASE_URL``, or the secret named by
``PARKBRAKE_DATABASE_SECRET_ARN`` (RDS's JSON secret, or a URL). A Lambda keeps one connection per
container (:class:`SingleConnection`, reconnecting when it breaks); long-running processes use a
``psycopg_pool`` pool (:class:`PooledConnections`). A database that cannot be reached raises
:class:`LedgerUnavailable`, which the CLI prints as one line and which makes the meter fail, so
that EventBridge delivers the event again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any, Protocol, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from guardrails.errors import InputError, ParkbrakeError
from guardrails.invoice import InvoiceLine
from guardrails.launch import Admission, AdmissionRequest, decide_admission
from guardrails.ledger import Attribution, Interval, PriceBook, Transition, Usage, UsageKey, from_ms, to_ms
from guardrails.pricing import PriceTable
from guardrails.runway import Budget, BudgetDecision, Period, RunwayTotals, TenantRunway, period_bounds_ms
from guardrails.settings import DATABASE_SECRET_ARN, DATABASE_URL
from lambdas.ledger import queries as sql

MIGRATIONS = Path(__file__).with_name("migrations")
CONNECT_TIMEOUT_S = 5
# pg_advisory_xact_lock key that serialises migrations: "parkbrak" read as a 64-bit integer.
MIGRATION_LOCK = int.from_bytes(b"parkbrak", "big") - 2**63
UNBOUNDED_MS = 2**62  # the SQL side's ±infinity (ledger_ms)
_MIGRATION_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


class LedgerUnavailable(ParkbrakeError):
    """The database cannot be reached or used; nothing was written."""


class LedgerError(ParkbrakeError):
    """The ledger's contents or schema are not what this code expects."""


def database_url(environ: Mapping[str, str], secrets: Callable[[], Any] | None = None) -> str:
    """``PARKBRAKE_DATABASE_URL``, else the Secrets Manager secret ``PARKBRAKE_DATABASE_SECRET_ARN``.

    ``secrets`` makes the Secrets Manager client only when it is needed.
    """
    url = environ.get(DATABASE_URL, "").strip()
    if url:
        return url
    secret_arn = environ.get(DATABASE_SECRET_ARN, "").strip()
    if not secret_arn:
        raise ParkbrakeError(
            f"no ledger database configured: set {DATABASE_URL} (postgresql://user:password@host/db) "
            f"or {DATABASE_SECRET_ARN}"
        )
    if secrets is None:
        from lambdas.aws.clients import client

        secrets = lambda: client("secretsmanager")  # noqa: E731
    text = secrets().get_secret_value(SecretId=secret_arn)["SecretString"]
    return url_from_secret(text)


def url_from_secret(text: str) -> str:
    """A URL secret as is; RDS's JSON secret (username, password, host, port, dbname) as a conninfo."""
    if not text.lstrip().startswith("{"):
        return text.strip()
    secret = json.loads(text)
    if "url" in secret:
        return str(secret["url"])
    fields = {"user": secret.get("username"), "password": secret.get("password"), "host": secret.get("host")}
    fields |= {"port": secret.get("port"), "dbname": secret.get("dbname")}
    return make_conninfo("", **{key: str(value) for key, value in fields.items() if value is not None})


def describe_target(url: str) -> str:
    """``user@host:port/dbname`` without the password, for error messages."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return f"(unparsable {DATABASE_URL})"
    host = parts.get("host") or "localhost"
    return f"{parts.get('user', '')}@{host}:{parts.get('port', 5432)}/{parts.get('dbname', '')}".lstrip("@")


def _unavailable(url: str, error: Exception) -> LedgerUnavailable:
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return LedgerUnavailable(
        f"cannot use the ledger database {describe_target(url)}: {detail}; "
        f"check {DATABASE_URL} (or {DATABASE_SECRET_ARN}) and that the server is up"
    )


class Connections(Protocol):
    def connection(self) -> Any:
        """A context manager yielding an autocommit ``psycopg.Connection``."""
        ...

    def close(self) -> None: ...


# SQLSTATE invalid_password and invalid_authorization_specification: the credentials, not the server.
LOGIN_FAILURES = frozenset({"28P01", "28000"})


def is_login_failure(error: psycopg.OperationalError) -> bool:
    return error.sqlstate in LOGIN_FAILURES or "password authentication failed" in str(error)


class SingleConnection:
    """One connection, made on first use and remade when broken: what a Lambda container keeps.

    ``reread`` gives the current URL again (from the Secrets Manager secret): RDS rotates the master
    password every seven days, so a login that fails is retried once with the credentials read anew.
    """

    def __init__(self, url: str, *, reread: Callable[[], str] | None = None) -> None:
        self.url = url
        self._reread = reread
        self._connection: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.OperationalError as error:
            if self._reread is None or not is_login_failure(error):
                raise
            self.url = self._reread()
            return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            if self._connection is None or self._connection.closed or self._connection.broken:
                self._connection = self._connect()
            yield self._connection
        except psycopg.OperationalError as error:
            raise _unavailable(self.url, error) from error

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


class PooledConnections:
    """A ``psycopg_pool`` pool for processes that live long and serve many requests (exporter, CLI)."""

    def __init__(self, url: str, *, max_size: int = 4, timeout: float = CONNECT_TIMEOUT_S * 2) -> None:
        self.url = url
        self._pool: ConnectionPool[Any] = ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            check=ConnectionPool.check_connection,
            open=False,
            timeout=timeout,
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except PoolTimeout as error:
            self._pool.close()
            raise _unavailable(url, error) from error

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as connection:
                yield connection
        except (psycopg.OperationalError, PoolTimeout) as error:
            raise _unavailable(self.url, error) from error

    def close(self) -> None:
        self._pool.close()


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations(folder: Path = MIGRATIONS) -> list[Migration]:
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _MIGRATION_NAME.fullmatch(path.name)
        if match is None:
            raise LedgerError(f"{path.name}: migrations are named NNNN_name.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text()))
    return found


APPENDED = "appended"
DUPLICATE = "duplicate"
CLOSED_HISTORY = "closed-history"  # a backfilled event inside a host's closed history: not appended


@dataclass(frozen=True)
class AppendResult:
    inserted: int
    duplicates: int  # not appended: duplicates, and backfilled events inside closed history
    tenants: frozenset[str]  # tenants whose usage changed
    outcomes: Mapping[str, str] = field(
        default_factory=dict
    )  # event id → appended, duplicate, closed-history


@dataclass(frozen=True)
class UsageRow:
    tenant: str
    pool: str
    instance_type: str
    usage: Usage
    running_accelerators: int
    unpriced_ms: int = 0  # billed milliseconds no price covers yet (priced once one is recorded)
    open_usage: Usage = field(
        default_factory=Usage
    )  # usage_totals only: the open intervals', kept apart from the closed

    @property
    def key(self) -> UsageKey:
        return self.tenant, self.pool, self.instance_type

    @property
    def total(self) -> Usage:
        """Closed and open intervals together."""
        return self.usage + self.open_usage


class LedgerStore:
    def __init__(self, connections: Connections) -> None:
        self._connections = connections
        self._known_tenants: set[str] = set()
        self._seeded_types: set[str] = set()

    @classmethod
    def connect(cls, url: str, *, pooled: bool = False) -> LedgerStore:
        return cls(PooledConnections(url) if pooled else SingleConnection(url))

    def close(self) -> None:
        self._connections.close()

    @property
    def connections(self) -> Connections:
        """The store's connections, shared with the ledger's other tables (lambdas.ledger.decisions)."""
        return self._connections

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self._connections.connection() as connection, connection.transaction():
            yield connection

    def migrate(self, available: Sequence[Migration] | None = None) -> list[str]:
        """Apply pending migrations in order, in one transaction; safe to run from many processes."""
        available = migrations() if available is None else available
        with self._transaction() as connection:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            connection.execute(sql.MIGRATIONS_TABLE)
            applied = dict(connection.execute("SELECT version, checksum FROM ledger_migrations").fetchall())
            done = []
            for migration in available:
                if migration.version in applied:
                    if applied[migration.version] != migration.checksum:
                        raise LedgerError(
                            f"migration {migration.version:04d}_{migration.name} was changed after it "
                            "was applied; add a new migration instead"
                        )
                    continue
                connection.execute(cast(Any, migration.sql))
                connection.execute(
                    "INSERT INTO ledger_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
                done.append(f"{migration.version:04d}_{migration.name}")
            return done

    def append(
        self, transitions: Sequence[Transition], *, source: str, received_at: datetime
    ) -> AppendResult:
        """Append transitions and refresh their hosts' intervals, through ``ledger_append_events``.

        A duplicate event id is ignored; a backfill (``source="ingest"``) never reaches into a
        host's closed history. Appends touching the same host are serialised by an advisory lock
        per host, taken in one order, so concurrent meters never derive from a partial history.
        """
        unique = list({transition.event_id: transition for transition in reversed(transitions)}.values())
        if not unique:
            return AppendResult(0, 0, frozenset())
        parameters = _columns(unique) | {"source": source, "received_at": received_at}
        with self._transaction() as connection:
            outcomes = dict(connection.execute(sql.APPEND_EVENTS, parameters).fetchall())
        appended = {event_id for event_id, outcome in outcomes.items() if outcome == APPENDED}
        changed = {t.instance_id for t in unique if t.event_id in appended}
        tenants = frozenset(t.attribution.tenant for t in unique if t.instance_id in changed)
        return AppendResult(len(appended), len(transitions) - len(appended), tenants, outcomes)

    def attributions_at(self, moments: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Attribution]:
        """What the ledger knew of each ``(instance id, ms)``: for events EC2 can no longer attribute."""
        with self._connections.connection() as connection:
            rows = connection.execute(
                sql.ATTRIBUTIONS_AT, ([host for host, _ in moments], [at_ms for _, at_ms in moments])
            ).fetchall()
        return {(row[0], row[1]): Attribution(*row[2:]) for row in rows}

    def add_price(
        self, instance_type: str, usd_per_hour: Decimal, valid_from: datetime | None, source: str
    ) -> None:
        """A new price from ``valid_from`` on (None: a type's first price, covering all time before).

        Only the ledger's owner may; a change cannot start in the past.
        """
        effective = "-infinity" if valid_from is None else from_ms(to_ms(valid_from))
        try:
            with self._transaction() as connection:
                connection.execute(
                    "SELECT ledger_add_price(%s, %s, %s, %s)",
                    (instance_type, effective, usd_per_hour, source),
                )
        except psycopg.errors.CheckViolation as error:
            raise InputError(str(error).splitlines()[0] + "; record the change from now or later") from None
        except psycopg.errors.UniqueViolation:
            raise InputError(
                f"a price for {instance_type} from {effective} is already recorded; "
                "prices are never rewritten, record a change from a later time"
            ) from None

    def sync_prices(self, table: PriceTable, *, source: str) -> list[str]:
        """Record ``table``'s on-demand prices (the owner's step, with ``migrate``): a type's first
        price covers all time before it; a changed price applies from now on. Returns what changed."""
        instances = table.instances
        with self._connections.connection() as connection:
            now = connection.execute("SELECT statement_timestamp()").fetchone()[0]
            rows = connection.execute(
                sql.PRICES_AT, {"types": sorted(instances), "at_ms": to_ms(now)}
            ).fetchall()
        changed = []
        for instance_type, in_effect, has_price in rows:
            wanted = instances[instance_type].usd_per_hour
            if has_price and in_effect == wanted:
                continue
            valid_from = from_ms(to_ms(now) + 1) if has_price else None
            self.add_price(instance_type, wanted, valid_from, source)
            changed.append(instance_type)
        return changed

    def prices_at(self, instance_types: Sequence[str], at: datetime) -> dict[str, Decimal | None]:
        """The ledger's hourly price of each type at ``at``; None where it has none (unpriced)."""
        with self._connections.connection() as connection:
            rows = connection.execute(
                sql.PRICES_AT, {"types": sorted(set(instance_types)), "at_ms": to_ms(at)}
            ).fetchall()
        return {instance_type: price for instance_type, price, _ in rows}

    def price_book(self) -> PriceBook:
        with self._connections.connection() as connection:
            rows = connection.execute(
                "SELECT instance_type, CASE WHEN isfinite(valid_from) THEN ledger_ms(valid_from) END, "
                "usd_per_hour FROM prices"
            ).fetchall()
        return PriceBook.of(rows)

    def intervals(self, *, tenant: str | None = None) -> list[Interval]:
        with self._connections.connection() as connection:
            rows = connection.execute(sql.INTERVALS, {"tenant": tenant}).fetchall()
        return [_interval(row) for row in rows]

    def latest_intervals(self, instance_ids: Sequence[str]) -> dict[str, Interval]:
        """The latest interval of each host named, and of every host with an open interval."""
        with self._connections.connection() as connection:
            rows = connection.execute(sql.LATEST_INTERVALS, {"instance_ids": list(instance_ids)}).fetchall()
        return {row[1]: _interval(row) for row in rows}

    def usage_rows(
        self,
        *,
        now: datetime,
        since: datetime | None = None,
        until: datetime | None = None,
        tenants: Sequence[str] | None = None,
    ) -> list[UsageRow]:
        """Usage per tenant, pool and instance type in ``[since, until)``, as guardrails.ledger defines it."""
        parameters = {
            "now_ms": to_ms(now),
            "since_ms": to_ms(since) if since else -UNBOUNDED_MS,
            "until_ms": to_ms(until) if until else UNBOUNDED_MS,
            "tenants": list(tenants) if tenants is not None else None,
        }
        with self._connections.connection() as connection:
            rows = connection.execute(sql.USAGE, parameters).fetchall()
        result = []
        for tenant, pool, instance_type, accelerator_ms, billed_ms, usd_hour_ms, priced_ms, running in rows:
            usage = Usage(int(accelerator_ms), Decimal(usd_hour_ms))
            unpriced_ms = int(billed_ms) - int(priced_ms)
            result.append(UsageRow(tenant, pool, instance_type, usage, int(running), unpriced_ms))
        return result

    def invoice_lines(
        self, *, now: datetime, since: datetime, until: datetime, tenants: Sequence[str] | None = None
    ) -> list[InvoiceLine]:
        """Invoice lines for ``[since, until)`` (guardrails.invoice), split wherever the price changed."""
        parameters = {
            "now_ms": to_ms(now),
            "since_ms": to_ms(since),
            "until_ms": to_ms(until),
            "tenants": list(tenants) if tenants is not None else None,
        }
        with self._connections.connection() as connection:
            rows = connection.execute(sql.INVOICE_LINES, parameters).fetchall()
        return [
            InvoiceLine(
                tenant, pool, kind, region, price, source, valid_from, int(billed), int(used), Decimal(cost)
            )
            for tenant, pool, kind, region, price, source, valid_from, billed, used, cost in rows
        ]

    def usage_totals(self, *, now: datetime) -> list[UsageRow]:
        """All-time usage per tenant, pool and instance type: what the exporter serves.

        ``usage`` is the closed intervals' (from the rollup: it only grows, so it is a counter);
        ``open_usage`` the running hosts' so far (a gauge). Together they equal
        ``usage_rows(now=now)`` (the tests check), at the cost of one row per key plus the hosts
        running now.
        """
        with self._connections.connection() as connection:
            rows = connection.execute(sql.USAGE_TOTALS, {"now_ms": to_ms(now)}).fetchall()
        return [
            UsageRow(
                tenant,
                pool,
                instance_type,
                Usage(int(closed_ms), Decimal(closed_cost)),
                int(running),
                open_usage=Usage(int(open_ms), Decimal(open_cost)),
            )
            for tenant, pool, instance_type, closed_ms, closed_cost, open_ms, open_cost, running in rows
        ]

    def usage(self, **window: Any) -> dict[UsageKey, Usage]:
        return {row.key: row.usage for row in self.usage_rows(**window)}

    def runways(
        self, *, now: datetime, default_cap: timedelta, tenants: Sequence[str] | None = None
    ) -> list[TenantRunway]:
        """Every known tenant's (or just ``tenants``') budget and runway at ``now``."""
        with self._connections.connection() as connection:
            return _runways(connection, now=now, default_cap=default_cap, tenants=tenants)

    def admit(
        self, request: AdmissionRequest, *, now: datetime, default_cap: timedelta, lease: timedelta
    ) -> Admission:
        """Reserve what ``request``'s hosts can cost, if the tenant's remaining budget covers it.

        Admissions of one tenant are serialised (an advisory lock held to the commit), so the runway
        read here already counts every reservation granted before: 20 concurrent admissions against
        a budget that covers k grant exactly k. A reservation lapses after ``lease`` unless hosts'
        `running` events claim it first.
        """
        with self._transaction() as connection:
            connection.execute(sql.LOCK_TENANT, (request.tenant,))
            if request.instance_id is not None:
                (running,) = connection.execute(sql.IS_RUNNING, (request.instance_id,)).fetchone() or (False,)
                if running:  # already committed in the runway: never counted twice
                    request = replace(request, hosts=0)
            ((_, price, _),) = connection.execute(
                sql.PRICES_AT, {"types": [request.instance_type], "at_ms": to_ms(now)}
            ).fetchall()
            statuses = _runways(connection, now=now, default_cap=default_cap, tenants=[request.tenant])
            admission = decide_admission(request, statuses[0] if statuses else None, price)
            if not admission.granted or price is None or request.hosts == 0:
                return admission
            reserved = connection.execute(
                sql.RESERVE,
                (
                    request.tenant,
                    request.instance_type,
                    request.hosts,
                    request.cap // timedelta(milliseconds=1),
                    to_ms(now),
                    lease // timedelta(milliseconds=1),
                ),
            ).fetchone()
        return replace(admission, reservation_id=reserved[0] if reserved else None)

    def release(self, reservation_id: int, *, now: datetime) -> bool:
        """Give back what a reservation still holds; False when it was unknown or already released."""
        with self._transaction() as connection:
            row = connection.execute(sql.RELEASE, (reservation_id, to_ms(now))).fetchone()
        return bool(row and row[0])

    def set_budget(self, budget: Budget) -> None:
        """Create or replace a tenant's budget and the actions it takes."""
        if budget.limit_usd is None:
            raise ValueError("a budget needs a limit")
        with self._transaction() as connection:
            connection.execute(
                sql.SET_BUDGET,
                (
                    budget.tenant,
                    sorted(budget.actions),
                    budget.period,
                    budget.limit_usd,
                    list(budget.soft_thresholds),
                ),
            )

    @contextmanager
    def claim_once(
        self, decisions: Sequence[BudgetDecision], *, now: datetime, period_start: datetime
    ) -> Iterator[list[BudgetDecision]]:
        """Record ``decisions`` (each with a ``once_key``) and yield those not recorded before.

        The records commit only if the body succeeds: an action that fails (SNS down, say) is
        claimed again on the next run, and one that succeeded is never repeated in the period.
        """
        with self._transaction() as connection:
            claimed = [
                decision
                for decision in decisions
                if connection.execute(sql.CLAIM_ACTION, _action_row(decision, now, period_start)).fetchone()
            ]
            yield claimed

    def record_action(
        self,
        decision: BudgetDecision,
        *,
        now: datetime,
        period_start: datetime | None,
        instance_ids: Sequence[str] = (),
        errors: Sequence[Mapping[str, str]] = (),
    ) -> None:
        row = _action_row(decision, now, period_start) | {
            "instance_ids": list(instance_ids),
            "errors": json.dumps(list(errors)),
        }
        with self._transaction() as connection:
            connection.execute(sql.RECORD_ACTION, row)

    def actions(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        with self._connections.connection() as connection:
            cursor = connection.execute(sql.ACTIONS, {"tenant": tenant})
            names = [column.name for column in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _runways(
    connection: psycopg.Connection[Any],
    *,
    now: datetime,
    default_cap: timedelta,
    tenants: Sequence[str] | None,
) -> list[TenantRunway]:
    starts = period_bounds_ms(now)
    parameters = {
        "now_ms": to_ms(now),
        "default_cap_ms": default_cap // timedelta(milliseconds=1),
        "tenants": list(tenants) if tenants is not None else None,
        "day_ms": starts["day"],
        "week_ms": starts["week"],
        "month_ms": starts["month"],
    }
    runways = []
    for row in connection.execute(sql.RUNWAYS, parameters).fetchall():
        (
            tenant,
            actions,
            limit,
            period,
            thresholds,
            spent,
            committed,
            burn,
            hosts,
            gpus,
            reserved,
            unpriced,
        ) = row
        if limit is None:  # no budget: usage is shown against the calendar month
            budget = Budget(tenant, None, actions=frozenset(actions))
        else:
            budget = Budget(tenant, limit, cast(Period, period), tuple(thresholds), frozenset(actions))
        totals = RunwayTotals(
            Decimal(spent),
            Decimal(committed),
            Decimal(burn),
            int(hosts),
            int(gpus),
            Decimal(reserved),
            int(unpriced),
        )
        runways.append(TenantRunway(budget, now, totals))
    return runways


def _interval(row: Sequence[Any]) -> Interval:
    return Interval(row[0], row[1], Attribution(*row[2:7]), row[7], row[8], row[9])


def _columns(transitions: Sequence[Transition]) -> dict[str, list[Any]]:
    """Column arrays for one ``unnest`` insert: a batch is one statement, not one per event."""
    return {
        "event_ids": [t.event_id for t in transitions],
        "instance_ids": [t.instance_id for t in transitions],
        "states": [t.state for t in transitions],
        "times": [from_ms(t.at_ms) for t in transitions],
        "tenants": [t.attribution.tenant for t in transitions],
        "pools": [t.attribution.pool for t in transitions],
        "instance_types": [t.attribution.instance_type for t in transitions],
        "accelerators": [t.attribution.accelerators for t in transitions],
        "caps": [t.attribution.cap_ms for t in transitions],
        "regions": [t.region for t in transitions],
    }


def _action_row(decision: BudgetDecision, now: datetime, period_start: datetime | None) -> dict[str, Any]:
    return {
        "at": now,
        "guardrail": "budget",
        "action": decision.action,
        "tenant": decision.tenant,
        "reason": decision.reason,
        "period_start": period_start,
        "threshold": decision.threshold,
        "once_key": decision.once_key,
    }


def store_from_environment(environ: Mapping[str, str] | None = None, *, pooled: bool = False) -> LedgerStore:
    environ = os.environ if environ is None else environ
    url = database_url(environ)
    if pooled:
        return LedgerStore(PooledConnections(url))
    # Credentials from a secret are read again when a login fails (the secret was rotated).
    from_secret = not environ.get(DATABASE_URL, "").strip()
    return LedgerStore(SingleConnection(url, reread=(lambda: database_url(environ)) if from_secret else None))


@cache
def container_store() -> LedgerStore:
    """The Lambda container's store: made on first use; its one connection serves every invocation."""
    return store_from_environment()
