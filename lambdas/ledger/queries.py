"""The SQL of the ledger's store (:mod:`lambdas.ledger.store` and its modules), kept apart so each query reads as one piece.

Appends pass their column arrays in binary (``%b``): for a batch of a thousand events that is a
sixth less time than quoting every text element.

Usage and runway follow guardrails.ledger and guardrails.runway rule for rule (the tests compare
them on random data): times are integer milliseconds, ±2^62 stands for an unbounded window, cost is
Σ usd_per_hour × milliseconds (exact NUMERIC; the caller divides by an hour and rounds once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardrails.ledger import PriceKey

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS ledger_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

# The function files (lambdas/ledger/functions/) as last applied: a file is applied again when its
# checksum is not this one.
FUNCTION_FILES_TABLE = """
CREATE TABLE IF NOT EXISTS ledger_function_files (
    name       text        PRIMARY KEY,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

RECORD_FUNCTION_FILE = """
INSERT INTO ledger_function_files (name, checksum) VALUES (%s, %s)
ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now()
"""

# The one way events enter the ledger (a SECURITY DEFINER function): each event's outcome.
APPEND_EVENTS = """
SELECT event_id, outcome
FROM ledger_append_events(%(event_ids)b::text[], %(instance_ids)b::text[], %(states)b::text[],
                          %(times_ms)b::bigint[], %(attributed)b::integer[], %(tenants)b::text[],
                          %(pools)b::text[], %(instance_types)b::text[], %(accelerators)b::integer[],
                          %(caps)b::bigint[], %(regions)b::text[], %(pricing_models)b::text[],
                          %(zones)b::text[], %(accounts)b::text[], %(source)b::text,
                          %(received_at)b::timestamptz)
"""

APPEND_EVENT = """
SELECT ledger_append_event(%b::text, %b::text, %b::text, %b::bigint, %b::text, %b::text, %b::text,
                           %b::integer, %b::bigint, %b::text, %b::text, %b::text, %b::text, %b::text,
                           %b::timestamptz)
"""

# The same, and settled in the same call (the meter's whole path).
APPEND_SETTLED_EVENT = APPEND_EVENT.replace("ledger_append_event(", "ledger_append_settled_event(")

SETTLE = "SELECT ledger_settle()"
# One slice settled after the key where the previous one ended: how many events were derived, the
# key where this one ended, and whether a backfill is still queued.
SETTLE_SLICE = "SELECT * FROM ledger_settle_slice(%s, %s, %s::smallint, %s)"
# Taken first by a batch appended and settled in one transaction: its append takes the lock shared
# and its settle exclusively, and two such transactions holding it shared would each wait for the
# other to let go (a deadlock).
SETTLE_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0))"

# A settled backfill's events (appends.backfill_outcomes): appended by it, or there before it.
BACKFILL_OUTCOMES = """
SELECT q.event_id,
       CASE WHEN e.source = 'ingest' AND e.received_at = %s THEN 'appended'
            ELSE 'duplicate' END
FROM unnest(%s::text[]) AS q (event_id)
LEFT JOIN LATERAL (SELECT x.source, x.received_at FROM events x WHERE x.event_id = q.event_id LIMIT 1) AS e ON true
"""

# For each price key (type, region, pricing model, zone), in the order given: the price in effect
# at a moment (None: unpriced), where it comes from (on-demand, spot, on-demand fallback), and
# whether the key itself has any price recorded.
PRICES_AT = """
SELECT p.usd_per_hour, p.basis,
       EXISTS (SELECT 1 FROM prices q
               WHERE q.instance_type = k.instance_type AND q.region = k.region
                 AND q.pricing_model = k.pricing_model AND q.zone = coalesce(k.zone, ''))
FROM unnest(%(types)s::text[], %(regions)s::text[], %(models)s::text[], %(zones)s::text[])
     WITH ORDINALITY AS k (instance_type, region, pricing_model, zone, n)
LEFT JOIN LATERAL ledger_prices_for(k.instance_type, k.region, k.pricing_model, k.zone) AS p
       ON p.from_ms <= %(at_ms)s AND p.until_ms > %(at_ms)s
ORDER BY k.n
"""


def price_key_parameters(keys: Sequence[PriceKey], at_ms: int) -> dict[str, Any]:
    """:data:`PRICES_AT`'s parameters for ``keys`` at ``at_ms``."""
    return {
        "types": [key.instance_type for key in keys],
        "regions": [key.region for key in keys],
        "models": [key.pricing_model for key in keys],
        "zones": [key.zone for key in keys],
        "at_ms": at_ms,
    }


# New on-demand prices (the owner's: ledger_add_prices is not granted to the app role).
ADD_PRICES = "SELECT ledger_add_prices(%s::text[], %s::text[], %s::timestamptz[], %s::numeric[], %s)"

# Each spot key's latest recorded price (NULLs: none yet), in the order given.
LATEST_SPOT_PRICES = """
SELECT latest.from_ms, latest.usd_per_hour
FROM unnest(%(types)s::text[], %(regions)s::text[], %(zones)s::text[])
     WITH ORDINALITY AS k (instance_type, region, zone, n)
LEFT JOIN LATERAL (
    SELECT ledger_ms(p.valid_from) AS from_ms, p.usd_per_hour
    FROM prices p
    WHERE p.instance_type = k.instance_type AND p.region = k.region AND p.pricing_model = 'spot'
      AND p.zone = k.zone
    ORDER BY p.valid_from DESC
    LIMIT 1
) AS latest ON true
ORDER BY k.n
"""

# Spot prices from EC2 (a SECURITY DEFINER function the app role may call): how many were new.
RECORD_SPOT_PRICES = """
SELECT ledger_record_spot_prices(%s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::numeric[])
"""

# Every price recorded, with its key (the pure rules' PriceBook).
PRICE_ROWS = """
SELECT instance_type, region, pricing_model, zone, CASE WHEN isfinite(valid_from) THEN ledger_ms(valid_from) END,
       usd_per_hour
FROM prices
"""

# What the ledger knew of each host at each moment: its latest event at or before it, else its
# earliest after it (a stop only needs to close what is open, whatever the attribution).
ATTRIBUTIONS_AT = """
SELECT q.instance_id, q.at_ms, a.tenant, a.pool, a.instance_type, a.accelerators, a.cap_ms, a.region,
       a.pricing_model, a.zone
FROM unnest(%s::text[], %s::bigint[]) AS q (instance_id, at_ms)
CROSS JOIN LATERAL (
    SELECT e.tenant, e.pool, e.instance_type, e.accelerators, e.cap_ms, e.region, e.pricing_model, e.zone
    FROM events e
    WHERE e.instance_id = q.instance_id
    ORDER BY e.at_ms > q.at_ms, CASE WHEN e.at_ms <= q.at_ms THEN -e.at_ms ELSE e.at_ms END
    LIMIT 1
) AS a
"""

# Each host's latest interval: of the hosts named, and of every host with an open interval.
LATEST_INTERVALS = """
SELECT DISTINCT ON (instance_id) opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
       started_ms, ended_ms, closed_by, region, pricing_model, zone,
       (SELECT e.account FROM events e WHERE e.event_id = candidates.opened_by)
FROM (
    SELECT * FROM intervals WHERE instance_id = ANY(%(instance_ids)s::text[])
    UNION ALL
    SELECT * FROM intervals WHERE billed_until_ms IS NULL
) AS candidates
ORDER BY instance_id, started_ms DESC
"""

# An interval's account is its opening event's (migration 0027): the host's.
INTERVALS = """
SELECT opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
       started_ms, ended_ms, closed_by, region, pricing_model, zone,
       (SELECT e.account FROM events e WHERE e.event_id = intervals.opened_by)
FROM intervals
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
ORDER BY instance_id, started_ms
"""

# Per tenant, pool and instance type: accelerator-ms used and Σ price × ms billed in the window;
# billed_ms − priced_ms is the billed time no price covers yet (unpriced).
USAGE = """
WITH spans AS (
    SELECT i.tenant, i.pool, i.instance_type, i.region, i.pricing_model, i.zone, i.accelerators, i.started_ms,
           i.ended_ms IS NULL AS running,
           coalesce(i.ended_ms, greatest(i.started_ms, %(now_ms)s)) AS used_until_ms,
           coalesce(i.billed_until_ms,
                    i.started_ms + ledger_billable_ms(greatest(%(now_ms)s - i.started_ms, 0)))
               AS billed_until_ms
    FROM intervals i
    WHERE (%(tenants)s::text[] IS NULL OR i.tenant = ANY(%(tenants)s::text[]))
      AND i.started_ms < %(until_ms)s
      AND (i.billed_until_ms IS NULL OR i.billed_until_ms > %(since_ms)s)
), clipped AS (
    SELECT s.*,
           greatest(s.started_ms, %(since_ms)s) AS from_ms,
           least(s.billed_until_ms, %(until_ms)s) AS to_ms
    FROM spans s
    WHERE s.billed_until_ms > %(since_ms)s
), used AS (
    SELECT tenant, pool, instance_type,
           sum(accelerators::bigint * greatest(0, least(used_until_ms, %(until_ms)s) - from_ms))
               AS accelerator_ms,
           sum(to_ms - from_ms) AS billed_ms,
           coalesce(sum(accelerators) FILTER (WHERE running), 0) AS running_accelerators
    FROM clipped
    GROUP BY tenant, pool, instance_type
), cost AS (
    SELECT c.tenant, c.pool, c.instance_type,
           sum(p.usd_per_hour * (least(c.to_ms, p.until_ms) - greatest(c.from_ms, p.from_ms)))
               AS usd_hour_ms,
           sum(least(c.to_ms, p.until_ms) - greatest(c.from_ms, p.from_ms)) AS priced_ms
    FROM clipped c
    CROSS JOIN LATERAL ledger_prices_for(c.instance_type, c.region, c.pricing_model, c.zone) AS p
    WHERE p.from_ms < c.to_ms AND p.until_ms > c.from_ms
    GROUP BY c.tenant, c.pool, c.instance_type
)
SELECT u.tenant, u.pool, u.instance_type, u.accelerator_ms, u.billed_ms,
       coalesce(c.usd_hour_ms, 0), coalesce(c.priced_ms, 0), u.running_accelerators
FROM used u
LEFT JOIN cost c USING (tenant, pool, instance_type)
ORDER BY u.tenant, u.pool, u.instance_type
"""

# Invoice lines in a window: per tenant, pool, instance type, region, pricing model and price in
# effect (with its source, the instant it took effect and its basis: on-demand, spot, or on-demand
# fallback for spot time before its zone's first spot price), and account (the interval's opening
# event's: migration 0027), the billed instance-ms, the accelerator-ms used and Σ price × ms. Billed
# time with no price gives one line without a price. Only the accounts named, when they are.
INVOICE_LINES = """
WITH spans AS (
    SELECT i.tenant, i.pool, i.instance_type, i.accelerators, i.region, i.pricing_model, i.zone, i.started_ms,
           coalesce(i.ended_ms, greatest(i.started_ms, %(now_ms)s)) AS used_until_ms,
           coalesce(i.billed_until_ms,
                    i.started_ms + ledger_billable_ms(greatest(%(now_ms)s - i.started_ms, 0))) AS billed_until_ms,
           o.account
    FROM intervals i
    JOIN events o ON o.event_id = i.opened_by
    WHERE (%(tenants)s::text[] IS NULL OR i.tenant = ANY(%(tenants)s::text[]))
      AND (%(accounts)s::text[] IS NULL OR o.account = ANY(%(accounts)s::text[]))
      AND i.started_ms < %(until_ms)s
      AND (i.billed_until_ms IS NULL OR i.billed_until_ms > %(since_ms)s)
), clipped AS (
    SELECT s.*, greatest(s.started_ms, %(since_ms)s) AS from_ms, least(s.billed_until_ms, %(until_ms)s) AS to_ms,
           least(s.used_until_ms, %(until_ms)s) AS used_to_ms
    FROM spans s
    WHERE s.billed_until_ms > %(since_ms)s
), parts AS (
    SELECT c.tenant, c.pool, c.instance_type, c.region, c.account, c.pricing_model, c.accelerators, p.usd_per_hour,
           p.valid_from, p.source, p.basis,
           greatest(c.from_ms, coalesce(p.from_ms, c.from_ms)) AS part_from,
           least(c.to_ms, coalesce(p.until_ms, c.to_ms)) AS part_to,
           least(c.used_to_ms, coalesce(p.until_ms, c.used_to_ms)) AS used_to
    FROM clipped c
    LEFT JOIN LATERAL ledger_prices_for(c.instance_type, c.region, c.pricing_model, c.zone) AS p
           ON p.from_ms < c.to_ms AND p.until_ms > c.from_ms
)
SELECT x.tenant, x.pool, x.instance_type, x.region, x.account, x.pricing_model, x.usd_per_hour, x.source,
       CASE WHEN isfinite(x.valid_from) THEN x.valid_from END, x.basis,
       sum(x.part_to - x.part_from), sum(x.accelerators::bigint * greatest(0, x.used_to - x.part_from)),
       coalesce(sum(x.usd_per_hour * (x.part_to - x.part_from)), 0)
FROM parts x
GROUP BY x.tenant, x.pool, x.instance_type, x.region, x.account, x.pricing_model, x.usd_per_hour, x.source,
         x.valid_from, x.basis
ORDER BY x.tenant, x.pool, x.instance_type, x.region, x.account, x.pricing_model, x.valid_from NULLS FIRST,
         x.basis
"""

# All time, per tenant, pool and instance type: the closed intervals' rollup, and the open ones apart
# (priced by ledger_cost_of, as the rollup is).
USAGE_TOTALS = """
WITH running AS (
    SELECT tenant, pool, instance_type, region, pricing_model, zone, accelerators, started_ms,
           greatest(started_ms, %(now_ms)s) AS used_until_ms,
           started_ms + ledger_billable_ms(greatest(%(now_ms)s - started_ms, 0)) AS billed_until_ms
    FROM intervals
    WHERE billed_until_ms IS NULL
), running_used AS (
    SELECT tenant, pool, instance_type,
           sum(accelerators::bigint * (used_until_ms - started_ms)) AS accelerator_ms,
           sum(accelerators) AS accelerators
    FROM running
    GROUP BY tenant, pool, instance_type
), running_cost AS (
    SELECT * FROM ledger_cost_of(ARRAY(
        SELECT ROW(tenant, pool, instance_type, started_ms, billed_until_ms, region, pricing_model,
                   zone)::ledger_billed
        FROM running
    ))
)
SELECT tenant, pool, instance_type,
       coalesce(t.accelerator_ms, 0), coalesce(t.usd_hour_ms, 0),
       coalesce(u.accelerator_ms, 0), coalesce(c.usd_hour_ms, 0),
       coalesce(u.accelerators, 0)
FROM usage_totals t
FULL JOIN running_used u USING (tenant, pool, instance_type)
LEFT JOIN running_cost c USING (tenant, pool, instance_type)
ORDER BY tenant, pool, instance_type
"""

# The (period, time zone) pairs of the tenants' budgets (no budget: the UTC month), whose starts
# the caller computes for RUNWAYS.
BUDGET_PERIODS = """
SELECT DISTINCT coalesce(b.period, 'month'), coalesce(b.timezone, 'UTC')
FROM tenants t
LEFT JOIN budgets b USING (tenant)
WHERE %(tenants)s::text[] IS NULL OR t.tenant = ANY(%(tenants)s::text[])
"""

# Per tenant: budget, Σ price × ms billed since its period's start (spent: the daily rollup for
# closed intervals, the running hosts live), still to be billed by its running hosts up to their
# caps (committed), set aside by live reservations for hosts not yet running (reserved), what the
# running hosts cost per hour now (burn) and how many of them have no price. A period that starts
# off a UTC midnight (a tenant in its own time zone) takes its closed intervals' cost from the start
# to the first UTC midnight from the intervals themselves, and the daily rollup after it. The last
# columns are the budget's time zone and its period's start (NULL: a pair not passed in), its GPU-hour
# limit and source, and when its first running host reaches its cap (NULL: none running).
RUNWAYS = """
WITH budgeted AS (
    SELECT t.tenant, t.actions, b.limit_usd, coalesce(b.period, 'month') AS period, b.soft_thresholds,
           coalesce(b.timezone, 'UTC') AS timezone, b.gpu_hours, b.source
    FROM tenants t
    LEFT JOIN budgets b USING (tenant)
    WHERE %(tenants)s::text[] IS NULL OR t.tenant = ANY(%(tenants)s::text[])
), scope AS (
    SELECT x.*, s.start_ms AS period_start_ms, (s.start_ms + 86399999) / 86400000 * 86400000 AS first_day_ms
    FROM budgeted x
    LEFT JOIN unnest(%(periods)s::text[], %(zones)s::text[], %(starts_ms)s::bigint[])
              AS k (period, timezone, start_ms)
           ON k.period = x.period AND k.timezone = x.timezone
    -- A month budget starts where the tenant's closed month before it ended, whatever its zone now
    -- (lambdas.ledger.closes.open_bounds): the latest close, when it ended within 26 hours of the
    -- zone's own start (the month just before), is the start.
    LEFT JOIN LATERAL (
        SELECT ledger_ms(c.until) AS until_ms FROM period_closes c
        WHERE c.tenant = x.tenant AND x.period = 'month'
        ORDER BY c.period DESC
        LIMIT 1
    ) AS closed ON true
    CROSS JOIN LATERAL (
        SELECT CASE WHEN abs(closed.until_ms - k.start_ms) <= 93600000 THEN closed.until_ms
                    ELSE k.start_ms END AS start_ms
    ) AS s
), running AS (
    SELECT s.tenant, s.period_start_ms, i.instance_type, i.region, i.pricing_model, i.zone, i.accelerators,
           i.started_ms,
           i.started_ms + ledger_billable_ms(greatest(%(now_ms)s - i.started_ms, 0)) AS billed_until_ms,
           i.started_ms + ledger_billable_ms(greatest(%(now_ms)s - i.started_ms,
                                                      coalesce(i.cap_ms, %(default_cap_ms)s)))
               AS projected_until_ms
    FROM scope s
    JOIN intervals i ON i.tenant = s.tenant AND i.billed_until_ms IS NULL
), closed_spent AS (
    -- The outer bound lets every tenant at once be read as one range of the recent days.
    SELECT s.tenant, sum(d.usd_hour_ms) AS usd_hour_ms
    FROM spend_daily d
    JOIN scope s ON s.tenant = d.tenant AND d.day_ms >= s.first_day_ms
    WHERE d.day_ms >= (SELECT min(first_day_ms) FROM scope)
    GROUP BY s.tenant
), closed_partial AS (
    SELECT s.tenant,
           sum(p.usd_per_hour * (least(i.billed_until_ms, s.first_day_ms, p.until_ms)
                                 - greatest(i.started_ms, s.period_start_ms, p.from_ms))) AS usd_hour_ms
    FROM scope s
    JOIN intervals i ON i.tenant = s.tenant AND i.billed_until_ms > s.period_start_ms
                    AND i.started_ms < s.first_day_ms
    CROSS JOIN LATERAL ledger_prices_for(i.instance_type, i.region, i.pricing_model, i.zone) AS p
    WHERE s.period_start_ms < s.first_day_ms
      AND p.from_ms < least(i.billed_until_ms, s.first_day_ms)
      AND p.until_ms > greatest(i.started_ms, s.period_start_ms)
    GROUP BY s.tenant
), running_spent AS (
    SELECT r.tenant,
           sum(p.usd_per_hour * (least(r.billed_until_ms, p.until_ms)
                                 - greatest(r.started_ms, r.period_start_ms, p.from_ms))) AS usd_hour_ms
    FROM running r
    CROSS JOIN LATERAL ledger_prices_for(r.instance_type, r.region, r.pricing_model, r.zone) AS p
    WHERE p.from_ms < r.billed_until_ms AND p.until_ms > greatest(r.started_ms, r.period_start_ms)
    GROUP BY r.tenant
), committed AS (
    SELECT r.tenant,
           sum(p.usd_per_hour * (least(r.projected_until_ms, p.until_ms)
                                 - greatest(r.billed_until_ms, p.from_ms))) AS usd_hour_ms
    FROM running r
    CROSS JOIN LATERAL ledger_prices_for(r.instance_type, r.region, r.pricing_model, r.zone) AS p
    WHERE p.from_ms < r.projected_until_ms AND p.until_ms > r.billed_until_ms
    GROUP BY r.tenant
), reserved AS (
    SELECT v.tenant, sum((v.hosts - v.claimed) * v.usd_per_hour * ledger_billable_ms(v.cap_ms)) AS usd_hour_ms
    FROM reservations v
    JOIN scope s ON s.tenant = v.tenant
    WHERE v.released_ms IS NULL AND v.expires_ms > %(now_ms)s AND v.claimed < v.hosts
    GROUP BY v.tenant
), burning AS (
    SELECT r.tenant, sum(p.usd_per_hour) AS usd_per_hour, count(*) AS hosts,
           sum(r.accelerators) AS accelerators, count(*) FILTER (WHERE p.usd_per_hour IS NULL) AS unpriced,
           min(r.projected_until_ms) AS first_cap_end_ms
    FROM running r
    LEFT JOIN LATERAL ledger_prices_for(r.instance_type, r.region, r.pricing_model, r.zone) AS p
           ON p.from_ms <= %(now_ms)s AND p.until_ms > %(now_ms)s
    GROUP BY r.tenant
)
SELECT s.tenant, s.actions, s.limit_usd, s.period, s.soft_thresholds,
       coalesce(closed_spent.usd_hour_ms, 0) + coalesce(closed_partial.usd_hour_ms, 0)
           + coalesce(running_spent.usd_hour_ms, 0),
       coalesce(committed.usd_hour_ms, 0),
       coalesce(burning.usd_per_hour, 0), coalesce(burning.hosts, 0), coalesce(burning.accelerators, 0),
       coalesce(reserved.usd_hour_ms, 0), coalesce(burning.unpriced, 0), s.timezone, s.period_start_ms,
       s.gpu_hours, s.source, burning.first_cap_end_ms
FROM scope s
LEFT JOIN closed_spent USING (tenant)
LEFT JOIN closed_partial USING (tenant)
LEFT JOIN running_spent USING (tenant)
LEFT JOIN committed USING (tenant)
LEFT JOIN burning USING (tenant)
LEFT JOIN reserved USING (tenant)
ORDER BY s.tenant
"""

SET_BUDGET = """
SELECT ledger_set_budget(%s, %s::text[], %s, %s, %s::numeric[], %s, %s::numeric)
"""

# The budget a stack declares for a tenant, unless a person changed it since (budgets.sql).
APPLY_STACK_BUDGET = "SELECT ledger_apply_stack_budget(%s, %s, %s::numeric, %s::numeric, %s)"

# Each tenant's budget as the stack last declared it, and who set it last.
BUDGET_SOURCES = """
SELECT tenant, source, stack_name, stack_limit_usd, stack_gpu_hours, limit_usd, gpu_hours
FROM budgets
WHERE %(tenants)s::text[] IS NULL OR tenant = ANY(%(tenants)s::text[])
ORDER BY tenant
"""

# Accelerator-milliseconds of one tenant's period: used by its hosts from the period's start to now,
# committed by its running hosts up to their caps, and its live reservations' (per instance type: the
# caller knows each type's accelerators). For the tenants with a GPU-hour budget only.
GPU_MS = """
SELECT coalesce(sum(i.accelerators::bigint
                    * (least(coalesce(i.ended_ms, %(now_ms)s), %(now_ms)s)
                       - greatest(i.started_ms, %(start_ms)s))), 0),
       coalesce(sum(i.accelerators::bigint
                    * greatest(0, i.started_ms + coalesce(i.cap_ms, %(default_cap_ms)s)
                                  - greatest(i.started_ms, %(now_ms)s, %(start_ms)s)))
                FILTER (WHERE i.ended_ms IS NULL), 0)
FROM intervals i
WHERE i.tenant = %(tenant)s AND (i.billed_until_ms IS NULL OR i.billed_until_ms > %(start_ms)s)
  AND (i.ended_ms IS NULL OR i.ended_ms > %(start_ms)s) AND i.started_ms < %(now_ms)s
"""
RESERVED_HOSTS = """
SELECT instance_type, sum((hosts - claimed)::bigint * cap_ms)
FROM reservations
WHERE tenant = %(tenant)s AND released_ms IS NULL AND expires_ms > %(now_ms)s AND claimed < hosts
GROUP BY instance_type
"""

REMOVE_BUDGET = "SELECT ledger_remove_budget(%s)"

# The tenants' admission locks, in the order given (the caller sorts them: one order for every batch).
LOCK_TENANTS = "SELECT count(ledger_lock_tenant(t)) FROM unnest(%s::text[]) AS t"

# Which of these hosts are running (an open interval).
RUNNING_OF = (
    "SELECT DISTINCT instance_id FROM intervals WHERE instance_id = ANY(%s::text[]) AND ended_ms IS NULL"
)

# One reservation a row of the arrays, their ids in the arrays' order.
RESERVE_EACH = """
SELECT ledger_reserve(r.who, r.kind, r.place, r.model, r.spot_zone, r.hosts, r.cap_ms, r.now_ms, r.lease_ms)
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::integer[], %s::bigint[],
            %s::bigint[], %s::bigint[])
     WITH ORDINALITY AS r (who, kind, place, model, spot_zone, hosts, cap_ms, now_ms, lease_ms, n)
ORDER BY r.n
"""

RELEASE = "SELECT ledger_release(%s, %s)"

CLAIM_ACTION = """
INSERT INTO guardrail_actions (at, guardrail, action, tenant, reason, period_start, threshold, once_key)
VALUES (%(at)s, %(guardrail)s, %(action)s, %(tenant)s, %(reason)s, %(period_start)s, %(threshold)s,
        %(once_key)s)
ON CONFLICT (once_key) DO NOTHING
RETURNING id
"""

RECORD_ACTION = """
INSERT INTO guardrail_actions (at, guardrail, action, tenant, reason, period_start, threshold,
                               instance_ids, errors, once_key)
VALUES (%(at)s, %(guardrail)s, %(action)s, %(tenant)s, %(reason)s, %(period_start)s, %(threshold)s,
        %(instance_ids)s::text[], %(errors)s::jsonb, %(once_key)s)
"""

ACTIONS = """
SELECT id, at, guardrail, action, tenant, reason, period_start, threshold, instance_ids, errors, once_key
FROM guardrail_actions
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
ORDER BY at, id
"""
