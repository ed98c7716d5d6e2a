-- The rollups: what closed intervals add to usage_totals (all-time, per tenant, pool and type) and
-- to spend_daily (per tenant, UTC day and type), moved as intervals change and counted again when
-- prices change. See docs/ledger.md (*Schema, rollups and indexes*).
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- What some closed intervals add to usage_totals: accelerator-ms, and their billed time (AWS's
-- 60-second minimum included) priced by each interval's own key.
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
        SELECT ROW(tenant, pool, instance_type, started_ms, billed_until_ms, region, pricing_model,
                   zone)::ledger_billed
        FROM closed
    )) AS c USING (tenant, pool, instance_type)
$$;
REVOKE EXECUTE ON FUNCTION ledger_usage_of(ledger_interval[]) FROM PUBLIC;

-- What some closed intervals add to spend_daily: their billed time cut at each UTC midnight,
-- priced by each interval's own key.
CREATE OR REPLACE FUNCTION ledger_daily_spend_of(spans ledger_interval[]) RETURNS SETOF ledger_day_spend
LANGUAGE sql STABLE AS $$
    WITH closed AS (
        SELECT s.tenant, s.instance_type, s.region, s.pricing_model, s.zone, s.started_ms,
               s.started_ms + ledger_billable_ms(s.ended_ms - s.started_ms) AS billed_until_ms
        FROM unnest(spans) AS s
        WHERE s.ended_ms IS NOT NULL
    ), parts AS (
        SELECT c.*, day.ms AS day_ms
        FROM closed c
        CROSS JOIN LATERAL generate_series(c.started_ms / 86400000 * 86400000, c.billed_until_ms - 1,
                                           86400000::bigint) AS day (ms)
    ), keys AS (  -- each key's prices read once, joined to its parts by hash (not part by part)
        SELECT DISTINCT c.instance_type, c.region, coalesce(c.pricing_model, 'on-demand') AS pricing_model,
               coalesce(c.zone, '') AS zone
        FROM closed c
    ), ranges AS MATERIALIZED (
        SELECT k.instance_type, k.region, k.pricing_model, k.zone, r.from_ms, r.until_ms, r.usd_per_hour
        FROM keys k
        CROSS JOIN LATERAL ledger_prices_for(k.instance_type, k.region, k.pricing_model, k.zone) AS r
    )
    SELECT x.tenant, x.day_ms, x.instance_type,
           sum(p.usd_per_hour * (least(x.billed_until_ms, x.day_ms + 86400000, p.until_ms)
                                 - greatest(x.started_ms, x.day_ms, p.from_ms)))
    FROM parts x
    JOIN ranges p ON p.instance_type = x.instance_type AND p.region = x.region
                 AND p.pricing_model = coalesce(x.pricing_model, 'on-demand') AND p.zone = coalesce(x.zone, '')
    WHERE p.from_ms < least(x.billed_until_ms, x.day_ms + 86400000)
      AND p.until_ms > greatest(x.started_ms, x.day_ms)
    GROUP BY x.tenant, x.day_ms, x.instance_type
$$;
REVOKE EXECUTE ON FUNCTION ledger_daily_spend_of(ledger_interval[]) FROM PUBLIC;

-- Move the rollups by what ``added`` intervals bring and ``gone`` ones took. Each upsert runs in key
-- order, so concurrent refreshes lock rollup rows in one order and never deadlock.
-- (PL/pgSQL, unlike a SQL function, keeps its statements' plans for the session: refreshes are hot.)
CREATE OR REPLACE FUNCTION ledger_move_rollups(added ledger_interval[], gone ledger_interval[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_totals AS total (tenant, pool, instance_type, accelerator_ms, usd_hour_ms)
    SELECT tenant, pool, instance_type, sum(accelerator_ms), sum(usd_hour_ms)
    FROM (
        SELECT * FROM ledger_usage_of(added)
        UNION ALL
        SELECT tenant, pool, instance_type, -accelerator_ms, -usd_hour_ms FROM ledger_usage_of(gone)
    ) AS delta
    GROUP BY tenant, pool, instance_type
    HAVING sum(accelerator_ms) <> 0 OR sum(usd_hour_ms) <> 0
    ORDER BY tenant, pool, instance_type
    ON CONFLICT (tenant, pool, instance_type) DO UPDATE
    SET accelerator_ms = total.accelerator_ms + excluded.accelerator_ms,
        usd_hour_ms = total.usd_hour_ms + excluded.usd_hour_ms;
    INSERT INTO spend_daily AS spend (tenant, day_ms, instance_type, usd_hour_ms)
    SELECT tenant, day_ms, instance_type, sum(usd_hour_ms)
    FROM (
        SELECT * FROM ledger_daily_spend_of(added)
        UNION ALL
        SELECT tenant, day_ms, instance_type, -usd_hour_ms FROM ledger_daily_spend_of(gone)
    ) AS delta
    GROUP BY tenant, day_ms, instance_type
    HAVING sum(usd_hour_ms) <> 0
    ORDER BY tenant, day_ms, instance_type
    ON CONFLICT (tenant, day_ms, instance_type) DO UPDATE
    SET usd_hour_ms = spend.usd_hour_ms + excluded.usd_hour_ms;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_move_rollups(ledger_interval[], ledger_interval[]) FROM PUBLIC;

-- What one closed interval adds to the rollups: ledger_move_rollups(ARRAY[closed], '{}') in one
-- statement, priced by the interval's key alone. The meter closes one interval per stop, and the
-- set-based statements (arrays unnested, grouped and joined by hash) cost it 0.27 ms a stop where
-- two upserts cost 0.15 ms (track_functions, 1,500 stops), each reading the prices; this one
-- statement reads them once (the meter's append about 6 % faster: docs/ledger.md, *Benchmark*).
-- The interval's spend per UTC day goes to spend_daily, and the sum of its days to usage_totals:
-- the midnights cut each price range's overlap with the billed time into parts that add up to it
-- exactly (numeric, integer ms). Must add exactly what ledger_move_rollups adds
-- (tests/lambdas/ledger/test_rollup_of_one_interval.py compares them). The caller holds the settle
-- lock exclusively, so no other derivation writes a rollup row meanwhile, whichever of the two
-- upserts runs first.
CREATE OR REPLACE FUNCTION ledger_add_closed_interval(closed ledger_interval) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    billed_until_ms bigint := closed.started_ms + ledger_billable_ms(closed.ended_ms - closed.started_ms);
    used numeric := closed.accelerators::bigint * (closed.ended_ms - closed.started_ms);
    model text := coalesce(closed.pricing_model, 'on-demand');  -- the key as ledger_cost_of reads it
    place text := coalesce(closed.zone, '');
BEGIN
    WITH days AS MATERIALIZED (
        SELECT day.ms AS day_ms,
               sum(p.usd_per_hour * (least(billed_until_ms, day.ms + 86400000, p.until_ms)
                                     - greatest(closed.started_ms, day.ms, p.from_ms))) AS usd
        FROM generate_series(closed.started_ms / 86400000 * 86400000, billed_until_ms - 1, 86400000::bigint)
            AS day (ms)
        JOIN ledger_prices_for(closed.instance_type, closed.region, model, place) AS p
          ON p.from_ms < least(billed_until_ms, day.ms + 86400000) AND p.until_ms > greatest(closed.started_ms, day.ms)
        GROUP BY day.ms
    ), daily AS (
        INSERT INTO spend_daily AS spend (tenant, day_ms, instance_type, usd_hour_ms)
        SELECT closed.tenant, d.day_ms, closed.instance_type, d.usd
        FROM days d
        WHERE d.usd <> 0
        ORDER BY d.day_ms
        ON CONFLICT (tenant, day_ms, instance_type) DO UPDATE
        SET usd_hour_ms = spend.usd_hour_ms + excluded.usd_hour_ms
    )
    INSERT INTO usage_totals AS total (tenant, pool, instance_type, accelerator_ms, usd_hour_ms)
    SELECT closed.tenant, closed.pool, closed.instance_type, used, c.usd
    FROM (SELECT coalesce(sum(d.usd), 0) AS usd FROM days d) AS c
    WHERE used <> 0 OR c.usd <> 0
    ON CONFLICT (tenant, pool, instance_type) DO UPDATE
    SET accelerator_ms = total.accelerator_ms + excluded.accelerator_ms,
        usd_hour_ms = total.usd_hour_ms + excluded.usd_hour_ms;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_add_closed_interval(ledger_interval) FROM PUBLIC;

-- Closed intervals of one instance type (or of all, NULL), a tenant at a time: for recounting.
CREATE OR REPLACE FUNCTION ledger_closed_by_tenant(kind text)
RETURNS TABLE (tenant text, spans ledger_interval[])
LANGUAGE sql STABLE AS $$
    SELECT i.tenant, array_agg(ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type,
                                   i.accelerators, i.cap_ms, i.started_ms, i.ended_ms, i.closed_by,
                                   i.region, i.pricing_model, i.zone)::ledger_interval)
    FROM intervals i
    WHERE i.ended_ms IS NOT NULL AND (kind IS NULL OR i.instance_type = kind)
    GROUP BY i.tenant
$$;
REVOKE EXECUTE ON FUNCTION ledger_closed_by_tenant(text) FROM PUBLIC;

-- Count the rollups again from the intervals (of one instance type, or of all).
CREATE OR REPLACE FUNCTION ledger_recount_rollups(kind text) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM usage_totals WHERE kind IS NULL OR instance_type = kind;
    DELETE FROM spend_daily WHERE kind IS NULL OR instance_type = kind;
    INSERT INTO usage_totals (tenant, pool, instance_type, accelerator_ms, usd_hour_ms)
    SELECT u.* FROM ledger_closed_by_tenant(kind) AS t CROSS JOIN LATERAL ledger_usage_of(t.spans) AS u;
    INSERT INTO spend_daily (tenant, day_ms, instance_type, usd_hour_ms)
    SELECT d.* FROM ledger_closed_by_tenant(kind) AS t CROSS JOIN LATERAL ledger_daily_spend_of(t.spans) AS d;
$$;
REVOKE EXECUTE ON FUNCTION ledger_recount_rollups(text) FROM PUBLIC;
