"""The SQL of :mod:`lambdas.ledger.store`, kept apart so each query reads as one piece.

Appends pass their column arrays in binary (``%b``): for a batch of a thousand events that is a
sixth less time than quoting every text element.

Usage and runway follow guardrails.ledger and guardrails.runway rule for rule (the tests compare
them on random data): times are integer milliseconds, ±2^62 stands for an unbounded window, cost is
Σ usd_per_hour × milliseconds (exact NUMERIC; the caller divides by an hour and rounds once).
"""

from __future__ import annotations

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS ledger_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

# One advisory lock per host, taken in hash order so two batches can never wait on each other.
LOCK_INSTANCES = """
SELECT pg_advisory_xact_lock(key)
FROM (SELECT DISTINCT hashtextextended(instance_id, 0) AS key
      FROM unnest(%b::text[]) AS instance_id ORDER BY key) AS keys
"""

ADD_TENANTS = """
INSERT INTO tenants (tenant)
SELECT DISTINCT tenant FROM unnest(%b::text[]) AS tenant ORDER BY tenant
ON CONFLICT (tenant) DO NOTHING
"""

# prices.json's price covers all time before the first recorded change, so usage is never unpriced.
SEED_PRICES = """
INSERT INTO prices (instance_type, valid_from, usd_per_hour, source)
SELECT instance_type, '-infinity', usd_per_hour, %s
FROM unnest(%s::text[], %s::numeric[]) AS seed (instance_type, usd_per_hour)
ORDER BY instance_type
ON CONFLICT (instance_type, valid_from) DO NOTHING
"""

INSERT_EVENTS = """
INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type,
                    accelerators, cap_ms, region, source, received_at)
SELECT e.*, %(source)b, %(received_at)b
FROM unnest(%(event_ids)b::text[], %(instance_ids)b::text[], %(states)b::text[],
            %(times)b::timestamptz[], %(tenants)b::text[], %(pools)b::text[],
            %(instance_types)b::text[], %(accelerators)b::integer[], %(caps)b::bigint[],
            %(regions)b::text[]) AS e
ON CONFLICT (event_id) DO NOTHING
RETURNING instance_id, at_ms
"""

# Per host that got new events, the earliest of them: where its intervals may have changed.
REFRESH_INTERVALS = """
SELECT ledger_refresh_intervals(%(instance_ids)b::text[], %(earliest_ms)b::bigint[])
"""

LAST_ATTRIBUTIONS = """
SELECT DISTINCT ON (instance_id) instance_id, tenant, pool, instance_type, accelerators, cap_ms
FROM events
WHERE instance_id = ANY(%s::text[])
ORDER BY instance_id, event_time DESC
"""

INTERVALS = """
SELECT opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
       started_ms, ended_ms, closed_by
FROM intervals
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
ORDER BY instance_id, started_ms
"""

# Per tenant, pool and instance type: accelerator-ms used and Σ price × ms billed in the window.
# priced_ms = billed_ms proves every billed millisecond found its price.
USAGE = """
WITH spans AS (
    SELECT i.tenant, i.pool, i.instance_type, i.accelerators, i.started_ms,
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
    JOIN price_ranges p ON p.instance_type = c.instance_type
                       AND p.from_ms < c.to_ms AND p.until_ms > c.from_ms
    GROUP BY c.tenant, c.pool, c.instance_type
)
SELECT u.tenant, u.pool, u.instance_type, u.accelerator_ms, u.billed_ms,
       coalesce(c.usd_hour_ms, 0), coalesce(c.priced_ms, 0), u.running_accelerators
FROM used u
LEFT JOIN cost c USING (tenant, pool, instance_type)
ORDER BY u.tenant, u.pool, u.instance_type
"""

# All time, per tenant, pool and instance type: the closed intervals' rollup plus the open ones.
USAGE_TOTALS = """
WITH running AS (
    SELECT tenant, pool, instance_type, accelerators, started_ms,
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
    SELECT r.tenant, r.pool, r.instance_type,
           sum(p.usd_per_hour * (least(r.billed_until_ms, p.until_ms) - greatest(r.started_ms, p.from_ms)))
               AS usd_hour_ms
    FROM running r
    JOIN price_ranges p ON p.instance_type = r.instance_type
                       AND p.from_ms < r.billed_until_ms AND p.until_ms > r.started_ms
    GROUP BY r.tenant, r.pool, r.instance_type
)
SELECT tenant, pool, instance_type,
       coalesce(t.accelerator_ms, 0) + coalesce(u.accelerator_ms, 0),
       coalesce(t.usd_hour_ms, 0) + coalesce(c.usd_hour_ms, 0),
       coalesce(u.accelerators, 0)
FROM usage_totals t
FULL JOIN running_used u USING (tenant, pool, instance_type)
LEFT JOIN running_cost c USING (tenant, pool, instance_type)
ORDER BY tenant, pool, instance_type
"""

# Per tenant: budget, Σ price × ms billed since its period's start (spent: the daily rollup for
# closed intervals, the running hosts live), still to be billed by its running hosts up to their
# caps (committed), and what those hosts cost per hour now (burn).
RUNWAYS = """
WITH scope AS (
    SELECT t.tenant, t.actions, b.limit_usd, coalesce(b.period, 'month') AS period, b.soft_thresholds,
           CASE coalesce(b.period, 'month')
               WHEN 'day' THEN %(day_ms)s WHEN 'week' THEN %(week_ms)s ELSE %(month_ms)s
           END::bigint AS period_start_ms
    FROM tenants t
    LEFT JOIN budgets b USING (tenant)
    WHERE %(tenants)s::text[] IS NULL OR t.tenant = ANY(%(tenants)s::text[])
), running AS (
    SELECT s.tenant, s.period_start_ms, i.instance_type, i.accelerators, i.started_ms,
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
    JOIN scope s ON s.tenant = d.tenant AND d.day_ms >= s.period_start_ms
    WHERE d.day_ms >= (SELECT min(period_start_ms) FROM scope)
    GROUP BY s.tenant
), running_spent AS (
    SELECT r.tenant,
           sum(p.usd_per_hour * (least(r.billed_until_ms, p.until_ms)
                                 - greatest(r.started_ms, r.period_start_ms, p.from_ms))) AS usd_hour_ms
    FROM running r
    JOIN price_ranges p ON p.instance_type = r.instance_type
                       AND p.from_ms < r.billed_until_ms
                       AND p.until_ms > greatest(r.started_ms, r.period_start_ms)
    GROUP BY r.tenant
), committed AS (
    SELECT r.tenant,
           sum(p.usd_per_hour * (least(r.projected_until_ms, p.until_ms)
                                 - greatest(r.billed_until_ms, p.from_ms))) AS usd_hour_ms
    FROM running r
    JOIN price_ranges p ON p.instance_type = r.instance_type
                       AND p.from_ms < r.projected_until_ms AND p.until_ms > r.billed_until_ms
    GROUP BY r.tenant
), burning AS (
    SELECT r.tenant, sum(p.usd_per_hour) AS usd_per_hour, count(*) AS hosts,
           sum(r.accelerators) AS accelerators
    FROM running r
    LEFT JOIN price_ranges p ON p.instance_type = r.instance_type
                            AND p.from_ms <= %(now_ms)s AND p.until_ms > %(now_ms)s
    GROUP BY r.tenant
)
SELECT s.tenant, s.actions, s.limit_usd, s.period, s.soft_thresholds,
       coalesce(closed_spent.usd_hour_ms, 0) + coalesce(running_spent.usd_hour_ms, 0),
       coalesce(committed.usd_hour_ms, 0),
       coalesce(burning.usd_per_hour, 0), coalesce(burning.hosts, 0), coalesce(burning.accelerators, 0)
FROM scope s
LEFT JOIN closed_spent USING (tenant)
LEFT JOIN running_spent USING (tenant)
LEFT JOIN committed USING (tenant)
LEFT JOIN burning USING (tenant)
ORDER BY s.tenant
"""

UPSERT_TENANT = """
INSERT INTO tenants (tenant, actions) VALUES (%s, %s::text[])
ON CONFLICT (tenant) DO UPDATE SET actions = excluded.actions
"""

UPSERT_BUDGET = """
INSERT INTO budgets (tenant, period, limit_usd, soft_thresholds) VALUES (%s, %s, %s, %s::numeric[])
ON CONFLICT (tenant) DO UPDATE
SET period = excluded.period, limit_usd = excluded.limit_usd,
    soft_thresholds = excluded.soft_thresholds, updated_at = now()
"""

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
