"""What the guardrails saved, read from the ledger: each stop decision of a month (``stop`` with its
host, ``budget-stop`` with the hosts it acted on), the host's interval it ended, its next start and
its price at the stop; the counterfactual is :mod:`guardrails.savings`'."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from guardrails.ledger import to_ms
from guardrails.savings import STOP_KINDS, Saving, StoppedHost, saving_of
from lambdas.ledger.store import LedgerStore

# Each host a stop decision of [since, until) names, with the interval that ran when it was decided
# (started by then, ended no earlier than a minute before: a host already stopped avoided nothing),
# the start of its next interval and the price of its key at the interval's end.
STOPPED_HOSTS = """
WITH stops AS (
    SELECT d.id, d.at, d.kind, d.actor, d.details ->> 'rule' AS rule, d.tenant, h.instance_id
    FROM decisions d
    CROSS JOIN LATERAL (
        SELECT d.instance_id WHERE d.instance_id IS NOT NULL
        UNION ALL
        SELECT jsonb_array_elements_text(d.details -> 'instance_ids')
        WHERE d.instance_id IS NULL AND jsonb_typeof(d.details -> 'instance_ids') = 'array'
    ) AS h (instance_id)
    WHERE d.kind = ANY(%(kinds)s::text[]) AND d.at >= %(since)s AND d.at < %(until)s
      AND (%(tenants)s::text[] IS NULL OR d.tenant = ANY(%(tenants)s::text[]))
)
SELECT s.id, s.at, s.kind, s.actor, s.rule, s.instance_id, i.tenant, i.pool, i.instance_type, i.accelerators,
       coalesce(i.cap_ms, %(default_cap_ms)s), i.ended_ms, next.started_ms, price.usd_per_hour
FROM stops s
CROSS JOIN LATERAL (
    SELECT * FROM intervals x
    WHERE x.instance_id = s.instance_id AND x.started_ms <= ledger_ms(s.at)
    ORDER BY x.started_ms DESC
    LIMIT 1
) AS i
LEFT JOIN LATERAL (
    SELECT min(n.started_ms) AS started_ms FROM intervals n
    WHERE n.instance_id = s.instance_id AND n.started_ms >= i.ended_ms
) AS next ON true
LEFT JOIN LATERAL (
    SELECT p.usd_per_hour FROM ledger_prices_for(i.instance_type, i.region, i.pricing_model, i.zone) AS p
    WHERE p.from_ms <= i.ended_ms AND p.until_ms > i.ended_ms
    LIMIT 1
) AS price ON true
WHERE i.ended_ms IS NOT NULL AND i.ended_ms >= ledger_ms(s.at) - 60000
ORDER BY s.at, s.id, s.instance_id
"""


def stopped_hosts(
    store: LedgerStore,
    *,
    since: datetime,
    until: datetime,
    tenants: Sequence[str] | None,
    default_cap: timedelta,
) -> list[StoppedHost]:
    """The hosts the stop decisions of ``[since, until)`` stopped, as the ledger metered them."""
    parameters = {
        "kinds": list(STOP_KINDS),
        "since": since,
        "until": until,
        "tenants": list(tenants) if tenants else None,
        "default_cap_ms": default_cap // timedelta(milliseconds=1),
    }
    store.settle()  # every stop metered so far ends its interval
    with store.connections.connection() as connection:
        rows = connection.execute(STOPPED_HOSTS, parameters).fetchall()
    return [StoppedHost(*row) for row in rows]


def month_savings(
    store: LedgerStore,
    *,
    since: datetime,
    until: datetime,
    tenants: Sequence[str] | None,
    default_cap: timedelta,
) -> list[Saving]:
    """Each stop of ``[since, until)`` with what it avoided, bounded by ``until`` (the period's end)."""
    hosts = stopped_hosts(store, since=since, until=until, tenants=tenants, default_cap=default_cap)
    return [saving_of(host, period_end_ms=to_ms(until)) for host in hosts]
