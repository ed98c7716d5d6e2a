"""The ledger in PostgreSQL (psycopg 3): one object for appending, reading, prices and budgets.

Connections are :mod:`lambdas.ledger.connections`', the schema :mod:`lambdas.ledger.schema`'s;
appends live in :mod:`lambdas.ledger.appends`, runways and admissions in :mod:`lambdas.ledger.budgets`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cache
from typing import Any

import psycopg

from guardrails.errors import InputError
from guardrails.invoice import InvoiceLine
from guardrails.launch import Admission, AdmissionRequest
from guardrails.ledger import (
    ON_DEMAND,
    Attribution,
    Interval,
    PriceBook,
    PriceKey,
    Transition,
    Usage,
    UsageKey,
    from_ms,
    to_ms,
)
from guardrails.pricing import HOME_REGION, PriceTable
from guardrails.runway import Budget, BudgetDecision, TenantRunway
from guardrails.settings import database_location
from guardrails.spot_prices import SpotPrice
from lambdas.ledger import budgets
from lambdas.ledger import queries as sql
from lambdas.ledger.appends import (
    INGEST,
    AppendResult,
    append_transitions,
    backfill_outcomes,
    settle,
    settle_all,
)
from lambdas.ledger.connections import (
    Connections,
    PooledConnections,
    SingleConnection,
    database_url,
    joined_transaction,
)
from lambdas.ledger.schema import FunctionFile, Migration, apply_migrations, function_files, migrations

UNBOUNDED_MS = 2**62  # the SQL side's ±infinity (ledger_ms)


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


def invoice_line(tenant: str, row: Sequence[Any]) -> InvoiceLine:
    """One of ``tenant``'s invoice lines from a query's row: pool, instance type, region, pricing
    model, price, its source and start, price basis, billed ms, used ms, cost, and (a close's rows
    only) late and service period. The invoice query and the closes' queries share it."""
    pool, kind, region, account, model, price, source, valid_from, basis, billed, used, cost, *closed = row
    return InvoiceLine(
        tenant,
        pool,
        kind,
        region,
        model,
        price,
        source,
        valid_from,
        int(billed),
        int(used),
        Decimal(cost),
        basis,
        account=account or "",
        **dict(zip(("late", "service_period"), closed, strict=False)),
    )


class LedgerStore:
    def __init__(self, connections: Connections) -> None:
        self._connections = connections

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

    @contextmanager
    def _settled(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection to read derived tables from, once every pending event and one slice of a
        queued backfill is derived (its own transaction, so that the settle lock is not held while
        the caller reads): a reader never pays for a whole backfill."""
        with self._connections.connection() as connection:
            settle(connection)
            yield connection

    def settle(self) -> int:
        """Derive every pending event and every queued backfill now, a slice per transaction
        (:func:`settle_all`); how many there were."""
        with self._connections.connection() as connection:
            return settle_all(connection)

    def migrate(
        self, available: Sequence[Migration] | None = None, functions: Sequence[FunctionFile] | None = None
    ) -> list[str]:
        """Apply pending migrations in order, then the function files that changed, in one transaction;
        safe to run from many processes. The function files are written for the schema the last
        migration leaves: to stop at an older migration, pass ``functions=()``."""
        with self._transaction() as connection:
            return apply_migrations(
                connection,
                migrations() if available is None else available,
                function_files() if functions is None else functions,
            )

    def append(
        self, transitions: Sequence[Transition], *, source: str, received_at: datetime, settled: bool = False
    ) -> AppendResult:
        """Append transitions (:func:`append_transitions`); readers derive them (:meth:`settle`).

        One statement, so one round trip: the function call is atomic by itself (autocommit). With
        ``settled`` they are derived in the same transaction (one event: in the same call), as a
        caller about to read the runway wants. A backfill (``source="ingest"``) is queued, settled
        and answered for; a backfill of many batches queues them all (:meth:`queue_backfill`), then
        settles once (:meth:`backfill_outcomes`).
        """
        if source == INGEST:
            self.queue_backfill(transitions, received_at=received_at)
            return self.backfill_outcomes(transitions, received_at=received_at)
        with self._connections.connection() as connection:
            return append_transitions(
                connection, transitions, source=source, received_at=received_at, settled=settled
            )

    def queue_backfill(self, transitions: Sequence[Transition], *, received_at: datetime) -> None:
        """Queue backfilled transitions, checked; the next settle appends them (duplicates ignored)
        and derives them, each placed by its time."""
        with self._connections.connection() as connection:
            append_transitions(connection, transitions, source=INGEST, received_at=received_at)

    def backfill_outcomes(self, transitions: Sequence[Transition], *, received_at: datetime) -> AppendResult:
        """Settle, then what became of transitions queued at ``received_at``: appended or duplicate,
        per event id."""
        with self._connections.connection() as connection:
            settle_all(connection)
            return backfill_outcomes(connection, transitions, received_at=received_at)

    def attributions_at(self, moments: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Attribution]:
        """What the ledger knew of each ``(instance id, ms)``: for events EC2 can no longer attribute."""
        with self._connections.connection() as connection:
            rows = connection.execute(
                sql.ATTRIBUTIONS_AT, ([host for host, _ in moments], [at_ms for _, at_ms in moments])
            ).fetchall()
        return {(row[0], row[1]): Attribution(*row[2:]) for row in rows}

    def add_price(
        self,
        instance_type: str,
        usd_per_hour: Decimal,
        valid_from: datetime | None,
        source: str,
        *,
        region: str = HOME_REGION,
    ) -> None:
        """A new on-demand price of ``instance_type`` in ``region`` from ``valid_from`` on (None: the
        key's first price, covering all time before). Only the ledger's owner may; a change cannot
        start in the past."""
        self.add_prices([(PriceKey(instance_type, region), usd_per_hour, valid_from)], source)

    def add_prices(self, prices: Sequence[tuple[PriceKey, Decimal, datetime | None]], source: str) -> None:
        """New on-demand prices at once (:meth:`add_price`): their types' rollups are counted again once."""
        spot = [key for key, _, _ in prices if key.pricing_model != ON_DEMAND]
        if spot:
            raise InputError(f"{spot[0]}: only on-demand prices are added here; spot prices come from EC2")
        effective = [
            "-infinity" if valid_from is None else from_ms(to_ms(valid_from)) for _, _, valid_from in prices
        ]
        try:
            with self._transaction() as connection:
                connection.execute(
                    sql.ADD_PRICES,
                    (
                        [key.instance_type for key, _, _ in prices],
                        [key.region for key, _, _ in prices],
                        effective,
                        [usd_per_hour for _, usd_per_hour, _ in prices],
                        source,
                    ),
                )
        except psycopg.errors.CheckViolation as error:
            raise InputError(str(error).splitlines()[0] + "; record the change from now or later") from None
        except psycopg.errors.UniqueViolation:
            raise InputError(
                f"a price of {', '.join(sorted({str(key) for key, _, _ in prices}))} from that instant is "
                "already recorded; prices are never rewritten, record a change from a later time"
            ) from None

    def sync_prices(self, table: PriceTable, *, source: str) -> list[str]:
        """Record ``table``'s on-demand prices of every region (the owner's step, with ``migrate``): a
        key's first price covers all time before it; a changed price applies from now on. Returns
        what changed, as ``type in region``."""
        wanted = {
            PriceKey(instance_type, region): usd_per_hour
            for region, prices in table.regions.items()
            for instance_type, usd_per_hour in prices.on_demand.items()
        }
        keys = sorted(wanted)
        with self._connections.connection() as connection:
            now = connection.execute("SELECT statement_timestamp()").fetchone()[0]
            rows = connection.execute(sql.PRICES_AT, sql.price_key_parameters(keys, to_ms(now))).fetchall()
        changes = [
            (key, wanted[key], from_ms(to_ms(now) + 1) if has_price else None)
            for key, (in_effect, _, has_price) in zip(keys, rows, strict=True)
            if not (has_price and in_effect == wanted[key])
        ]
        if changes:
            self.add_prices(changes, source)
        return [f"{key.instance_type} in {key.region}" for key, _, _ in changes]

    def prices_at(self, keys: Sequence[PriceKey], at: datetime) -> dict[PriceKey, Decimal | None]:
        """The ledger's hourly price of each key at ``at`` (a spot key's fallback included); None
        where it has none (unpriced)."""
        unique = sorted(set(keys))
        with self._connections.connection() as connection:
            rows = connection.execute(sql.PRICES_AT, sql.price_key_parameters(unique, to_ms(at))).fetchall()
        return {key: price for key, (price, _, _) in zip(unique, rows, strict=True)}

    def latest_spot_prices(self, keys: Sequence[PriceKey]) -> tuple[int, dict[PriceKey, SpotPrice]]:
        """The database's time (ms) and each spot key's latest recorded price (absent: none yet)."""
        unique = sorted(set(keys))
        parameters = {
            "types": [key.instance_type for key in unique],
            "regions": [key.region for key in unique],
            "zones": [key.zone for key in unique],
        }
        with self._connections.connection() as connection:
            now_ms = connection.execute("SELECT ledger_ms(statement_timestamp())").fetchone()[0]
            rows = connection.execute(sql.LATEST_SPOT_PRICES, parameters).fetchall()
        latest = {
            key: SpotPrice(key, from_ms, usd_per_hour)
            for key, (from_ms, usd_per_hour) in zip(unique, rows, strict=True)
            if from_ms is not None
        }
        return now_ms, latest

    def record_spot_prices(self, prices: Sequence[SpotPrice]) -> int:
        """Append spot prices from EC2 (``ledger_record_spot_prices``, which the app role may call): each
        within the last 24 hours and after its key's latest. Returns how many were new."""
        if not prices:
            return 0
        try:
            with self._transaction() as connection:
                row = connection.execute(
                    sql.RECORD_SPOT_PRICES,
                    (
                        [price.key.instance_type for price in prices],
                        [price.key.region for price in prices],
                        [price.key.zone for price in prices],
                        [from_ms(price.from_ms) for price in prices],
                        [price.usd_per_hour for price in prices],
                    ),
                ).fetchone()
        except psycopg.errors.CheckViolation as error:
            raise InputError(str(error).splitlines()[0]) from None
        return int(row[0]) if row else 0

    def price_book(self) -> PriceBook:
        with self._connections.connection() as connection:
            rows = connection.execute(sql.PRICE_ROWS).fetchall()
        return PriceBook.of(
            (PriceKey(kind, region, model, zone or None), valid_from_ms, usd_per_hour)
            for kind, region, model, zone, valid_from_ms, usd_per_hour in rows
        )

    def intervals(self, *, tenant: str | None = None) -> list[Interval]:
        with self._settled() as connection:
            rows = connection.execute(sql.INTERVALS, {"tenant": tenant}).fetchall()
        return [_interval(row) for row in rows]

    def latest_intervals(self, instance_ids: Sequence[str]) -> dict[str, Interval]:
        """The latest interval of each host named, and of every host with an open interval."""
        with self._settled() as connection:
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
        with self._settled() as connection:
            rows = connection.execute(sql.USAGE, parameters).fetchall()
        result = []
        for tenant, pool, instance_type, accelerator_ms, billed_ms, usd_hour_ms, priced_ms, running in rows:
            usage = Usage(int(accelerator_ms), Decimal(usd_hour_ms))
            unpriced_ms = int(billed_ms) - int(priced_ms)
            result.append(UsageRow(tenant, pool, instance_type, usage, int(running), unpriced_ms))
        return result

    def invoice_lines(
        self,
        *,
        now: datetime,
        since: datetime,
        until: datetime,
        tenants: Sequence[str] | None = None,
        accounts: Sequence[str] | None = None,
    ) -> list[InvoiceLine]:
        """Invoice lines for ``[since, until)`` (guardrails.invoice), split wherever the price changed
        and per account; only ``accounts``' hosts when given (None: every account)."""
        parameters = {
            "now_ms": to_ms(now),
            "since_ms": to_ms(since),
            "until_ms": to_ms(until),
            "tenants": list(tenants) if tenants is not None else None,
            "accounts": list(accounts) if accounts is not None else None,
        }
        with self._settled() as connection:
            rows = connection.execute(sql.INVOICE_LINES, parameters).fetchall()
        return [invoice_line(row[0], row[1:]) for row in rows]

    def usage_totals(self, *, now: datetime) -> list[UsageRow]:
        """All-time usage per tenant, pool and instance type: what the exporter serves.

        ``usage`` is the closed intervals' (from the rollup: it only grows, so it is a counter);
        ``open_usage`` the running hosts' so far (a gauge). Together they equal
        ``usage_rows(now=now)`` (the tests check), at the cost of one row per key plus the hosts
        running now.
        """
        with self._settled() as connection:
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
        with self._settled() as connection:
            return budgets.runways(connection, now=now, default_cap=default_cap, tenants=tenants)

    def admit(
        self, request: AdmissionRequest, *, now: datetime, default_cap: timedelta, lease: timedelta
    ) -> Admission:
        """Reserve what ``request``'s hosts can cost, if the tenant's remaining budget covers it.

        Admissions of one tenant are serialised (an advisory lock held to the commit), so the runway
        read here already counts every reservation granted before: 20 concurrent admissions against
        a budget that covers k grant exactly k. A reservation lapses after ``lease`` unless hosts'
        `running` events claim it first.
        """
        return self.admit_together([request], now=now, default_cap=default_cap, lease=lease)[0]

    def admit_together(
        self,
        requests: Sequence[AdmissionRequest],
        *,
        now: datetime,
        default_cap: timedelta,
        lease: timedelta,
    ) -> list[Admission]:
        """:meth:`admit` for several tenants' requests (one each) in one transaction, a statement for
        each step rather than one per request (budgets.admit_together); in the caller's transaction
        when it holds one."""
        with self._settled():  # a reader's settle: what is pending, one slice of a backfill at most
            pass
        with self._connections.connection() as connection, joined_transaction(connection):
            return budgets.admit_together(connection, requests, now=now, default_cap=default_cap, lease=lease)

    def release(self, reservation_id: int, *, now: datetime) -> bool:
        """Give back what a reservation still holds; False when it was unknown or already released."""
        with self._transaction() as connection:
            row = connection.execute(sql.RELEASE, (reservation_id, to_ms(now))).fetchone()
        return bool(row and row[0])

    def set_budget(self, budget: Budget) -> None:
        """Create or replace a tenant's budget, the actions it takes and its time zone."""
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
                    budget.timezone,
                    budget.gpu_hours,
                ),
            )

    def remove_budget(self, tenant: str) -> bool:
        """Remove ``tenant``'s budget (its usage is still metered); False when it had none."""
        with self._transaction() as connection:
            row = connection.execute(sql.REMOVE_BUDGET, (tenant,)).fetchone()
        return bool(row and row[0])

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
                if connection.execute(
                    sql.CLAIM_ACTION, budgets.action_row(decision, now, period_start)
                ).fetchone()
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
        row = budgets.action_row(decision, now, period_start) | {
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


def _interval(row: Sequence[Any]) -> Interval:
    return Interval(
        row[0], row[1], Attribution(*row[2:7], *row[10:13]), row[7], row[8], row[9], row[13] or ""
    )


def store_from_environment(environ: Mapping[str, str] | None = None, *, pooled: bool = False) -> LedgerStore:
    environ = os.environ if environ is None else environ
    url = database_url(environ)
    if pooled:
        return LedgerStore(PooledConnections(url))
    # Credentials from a secret are read again when a login fails (the secret was rotated).
    from_secret = database_location(environ)[0] is None
    return LedgerStore(SingleConnection(url, reread=(lambda: database_url(environ)) if from_secret else None))


def migrate_and_price(store: LedgerStore) -> tuple[list[str], list[str]]:
    """The ledger owner's step (``ledger migrate``, ``dev database``): pending migrations applied, then
    the shipped price table's new prices recorded; what each did."""
    from guardrails.pricing import PRICES_FILE, load_price_table

    table = load_price_table()
    applied = store.migrate()
    priced = store.sync_prices(table, source=f"{PRICES_FILE.name}, taken {table.taken}")
    return applied, priced


@cache
def container_store() -> LedgerStore:
    """The Lambda container's store: made on first use; its one connection serves every invocation."""
    return store_from_environment()
