-- One price join for what billed spans cost: the rollup of closed intervals (ledger_usage_of) and
-- the all-time totals' running hosts (lambdas/ledger/queries.py, USAGE_TOTALS) both ask it.

-- Billed time of one tenant, pool and instance type: [from_ms, until_ms).
CREATE TYPE ledger_billed AS (tenant text, pool text, instance_type text, from_ms bigint, until_ms bigint);

-- Σ price in effect × billed ms, per tenant, pool and instance type (time no price covers costs
-- nothing here; the callers count it as unpriced).
CREATE FUNCTION ledger_cost_of(spans ledger_billed[])
RETURNS TABLE (tenant text, pool text, instance_type text, usd_hour_ms numeric)
LANGUAGE sql STABLE AS $$
    SELECT s.tenant, s.pool, s.instance_type,
           sum(p.usd_per_hour * (least(s.until_ms, p.until_ms) - greatest(s.from_ms, p.from_ms)))
    FROM unnest(spans) AS s
    JOIN price_ranges p ON p.instance_type = s.instance_type
                       AND p.from_ms < s.until_ms AND p.until_ms > s.from_ms
    GROUP BY s.tenant, s.pool, s.instance_type
$$;

-- What some closed intervals add to usage_totals (as 0001's, its cost from ledger_cost_of).
CREATE OR REPLACE FUNCTION ledger_usage_of(spans ledger_interval[]) RETURNS SETOF ledger_usage
LANGUAGE sql STABLE AS $$
    WITH closed AS (
        SELECT s.*, s.started_ms + ledger_billable_ms(s.ended_ms - s.started_ms) AS billed_until_ms
        FROM unnest(spans) AS s
        WHERE s.ended_ms IS NOT NULL
    ), used AS (
        SELECT tenant, pool, instance_type,
               sum(accelerators::bigint * (ended_ms - started_ms))::numeric AS accelerator_ms
        FROM closed
        GROUP BY tenant, pool, instance_type
    )
    SELECT u.tenant, u.pool, u.instance_type, u.accelerator_ms, coalesce(c.usd_hour_ms, 0)
    FROM used u
    LEFT JOIN ledger_cost_of(ARRAY(
        SELECT ROW(tenant, pool, instance_type, started_ms, billed_until_ms)::ledger_billed FROM closed
    )) AS c USING (tenant, pool, instance_type)
$$;

REVOKE EXECUTE ON FUNCTION ledger_cost_of(ledger_billed[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_cost_of(ledger_billed[]) TO parkbrake_app;
