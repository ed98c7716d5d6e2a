-- Prices: what a span of billed time costs, the rules on recording a price, and recording them.
-- Prices are keyed by (instance type, region, pricing model, zone); see docs/ledger.md (*Prices*).
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- The price ranges of one span's key, each with where its price comes from (basis): 'on-demand',
-- 'spot', or for a spot span before its zone's first spot price, 'on-demand fallback'. Ranges
-- never overlap. A plain SQL function, so the planner inlines it into each caller's join.
CREATE OR REPLACE FUNCTION ledger_prices_for(kind text, place text, model text, spot_zone text)
RETURNS TABLE (from_ms bigint, until_ms bigint, usd_per_hour numeric, valid_from timestamptz, source text,
               basis text)
LANGUAGE sql STABLE AS $$
    SELECT r.from_ms, r.until_ms, r.usd_per_hour, r.valid_from, r.source, 'spot'
    FROM price_ranges r
    WHERE model = 'spot' AND r.instance_type = kind AND r.region = place AND r.pricing_model = 'spot'
      AND r.zone = spot_zone
    UNION ALL
    SELECT r.from_ms, least(r.until_ms, spot.first_ms), r.usd_per_hour, r.valid_from, r.source,
           CASE WHEN model = 'spot' THEN 'on-demand fallback' ELSE 'on-demand' END
    FROM price_ranges r
    CROSS JOIN (
        SELECT coalesce(min(ledger_ms(p.valid_from)), 4611686018427387904) AS first_ms
        FROM prices p
        WHERE model = 'spot' AND p.instance_type = kind AND p.region = place AND p.pricing_model = 'spot'
          AND p.zone = spot_zone
    ) AS spot
    WHERE r.instance_type = kind AND r.region = place AND r.pricing_model = 'on-demand' AND r.zone = ''
      AND r.from_ms < spot.first_ms
$$;
REVOKE EXECUTE ON FUNCTION ledger_prices_for(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_prices_for(text, text, text, text) TO parkbrake_app;

-- Σ price in effect × billed ms, per tenant, pool and instance type, each span priced by its own key
-- (time no price covers costs nothing here; the callers count it as unpriced). The rollup of closed
-- intervals (ledger_usage_of) and the all-time totals' running hosts (queries.py, USAGE_TOTALS)
-- both ask it. PL/pgSQL: its callers pass ARRAY(SELECT …), which keeps PostgreSQL from inlining a
-- SQL function, and a SQL function that is not inlined is planned again on every call (0.9 ms of
-- planning for a 0.02 ms query, on every settle that closes an interval); PL/pgSQL keeps the plan
-- for the session.
CREATE OR REPLACE FUNCTION ledger_cost_of(spans ledger_billed[])
RETURNS TABLE (tenant text, pool text, instance_type text, usd_hour_ms numeric)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    -- Each key's prices read once, then joined to its spans by hash (read span by span, a
    -- settle of 50k closed intervals spent a second on the look-ups alone). A key is normalized as
    -- ledger_prices_for reads it: no zone prices as zone '', no pricing model as on-demand.
    RETURN QUERY
    WITH keys AS (
        SELECT DISTINCT s.instance_type, s.region, coalesce(s.pricing_model, 'on-demand') AS pricing_model,
               coalesce(s.zone, '') AS zone
        FROM unnest(spans) AS s
    ), ranges AS MATERIALIZED (
        SELECT k.instance_type, k.region, k.pricing_model, k.zone, p.from_ms, p.until_ms, p.usd_per_hour
        FROM keys k
        CROSS JOIN LATERAL ledger_prices_for(k.instance_type, k.region, k.pricing_model, k.zone) AS p
    )
    SELECT s.tenant, s.pool, s.instance_type,
           sum(p.usd_per_hour * (least(s.until_ms, p.until_ms) - greatest(s.from_ms, p.from_ms)))
    FROM unnest(spans) AS s
    JOIN ranges p ON p.instance_type = s.instance_type AND p.region = s.region
                 AND p.pricing_model = coalesce(s.pricing_model, 'on-demand') AND p.zone = coalesce(s.zone, '')
    WHERE p.from_ms < s.until_ms AND p.until_ms > s.from_ms
    GROUP BY s.tenant, s.pool, s.instance_type;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_cost_of(ledger_billed[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_cost_of(ledger_billed[]) TO parkbrake_app;

-- The trigger on prices (every row, the owner's too), which copies each row to price_changes.
-- On-demand: a key's first price covers all time before it (usage metered while it was unpriced is
-- priced by it); every later change starts now or later, so billed time is never repriced.
-- Spot: EC2's history is necessarily a little in the past, so a spot price may start up to
-- 24 hours back (and not later than 5 minutes ahead, for clock skew), but never at or before its
-- key's latest row: history only grows at its end.
CREATE OR REPLACE FUNCTION ledger_guard_price() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    latest timestamptz;
    now_ms timestamptz := date_trunc('milliseconds', statement_timestamp());
BEGIN
    SELECT max(p.valid_from) INTO latest
    FROM prices p
    WHERE p.instance_type = NEW.instance_type AND p.region = NEW.region
      AND p.pricing_model = NEW.pricing_model AND p.zone = NEW.zone;
    IF NEW.pricing_model = 'on-demand' AND NEW.valid_from < now_ms AND latest IS NOT NULL THEN
        RAISE EXCEPTION 'a price change for % in % cannot start in the past (%)',
                        NEW.instance_type, NEW.region, NEW.valid_from
            USING ERRCODE = 'check_violation',
                  HINT = 'record the change from now or later; billed time keeps the price it had';
    END IF;
    IF NEW.pricing_model = 'spot' AND (NEW.valid_from < now_ms - interval '24 hours'
                                       OR NEW.valid_from > now_ms + interval '5 minutes') THEN
        RAISE EXCEPTION 'a spot price for % in % must start within the last 24 hours (%)',
                        NEW.instance_type, NEW.zone, NEW.valid_from
            USING ERRCODE = 'check_violation',
                  HINT = 'spot prices are recorded from the last 24 hours of EC2''s history';
    END IF;
    IF NEW.pricing_model = 'spot' AND NEW.valid_from <= latest THEN
        RAISE EXCEPTION 'a spot price for % in % cannot start at or before its latest recorded one (%)',
                        NEW.instance_type, NEW.zone, latest
            USING ERRCODE = 'check_violation',
                  HINT = 'spot history is appended at its end; billed time keeps the price it had';
    END IF;
    INSERT INTO price_changes (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source)
    VALUES (NEW.instance_type, NEW.region, NEW.pricing_model, NEW.zone, NEW.valid_from, NEW.usd_per_hour,
            NEW.source);
    RETURN NEW;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_guard_price() FROM PUBLIC;

-- New on-demand prices, one per (type, region), each from its ``effective`` instant (-infinity: a
-- key's first price, covering the past). Closed intervals of those types are counted again (their
-- cost changes where a first price covers them, and a spot span's fallback may too), under the
-- exclusive prices lock, so no rollup mixes old and new prices. The owner's only.
CREATE OR REPLACE FUNCTION ledger_add_prices(kinds text[], places text[], effective timestamptz[],
                                             amounts numeric[], origin text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    kind text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake prices', 0));
    INSERT INTO prices (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source)
    SELECT n.kind, n.place, 'on-demand', '', n.effective, n.amount, origin
    FROM unnest(kinds, places, effective, amounts) AS n (kind, place, effective, amount)
    ORDER BY n.kind, n.place;
    FOR kind IN SELECT DISTINCT k FROM unnest(kinds) AS k ORDER BY k LOOP
        PERFORM ledger_recount_rollups(kind);
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_add_prices(text[], text[], timestamptz[], numeric[], text) FROM PUBLIC;

-- Record spot prices (type, region, zone, the instant it took effect, USD per hour). A row that is
-- already recorded exactly is skipped (a run that asks again); any other row the trigger refuses fails
-- the whole call. The closed spot intervals the new prices reach are taken out of the rollups at
-- their old prices and put back at the new ones, under the exclusive prices lock. Returns how many
-- rows were recorded.
CREATE OR REPLACE FUNCTION ledger_record_spot_prices(kinds text[], places text[], zones text[],
                                                     starts timestamptz[], amounts numeric[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    reached ledger_interval[];
    recorded integer;
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(zones) AS z WHERE coalesce(z, '') = '') THEN
        RAISE EXCEPTION 'a spot price needs the availability zone it is the price of'
            USING ERRCODE = 'check_violation';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake prices', 0));
    SELECT coalesce(array_agg(ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type, i.accelerators,
                                  i.cap_ms, i.started_ms, i.ended_ms, i.closed_by, i.region, i.pricing_model,
                                  i.zone)::ledger_interval), '{}')
    INTO reached
    FROM intervals i
    JOIN (SELECT b.kind, b.place, b.zone, min(ledger_ms(b.start)) AS from_ms
          FROM unnest(kinds, places, zones, starts) AS b (kind, place, zone, start)
          GROUP BY b.kind, b.place, b.zone) AS k
      ON i.instance_type = k.kind AND i.region = k.place AND i.pricing_model = 'spot' AND i.zone = k.zone
    WHERE i.billed_until_ms > k.from_ms;
    PERFORM ledger_move_rollups('{}', reached);
    INSERT INTO prices (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source)
    SELECT b.kind, b.place, 'spot', b.zone, b.start, b.amount, 'EC2 DescribeSpotPriceHistory'
    FROM unnest(kinds, places, zones, starts, amounts) AS b (kind, place, zone, start, amount)
    WHERE NOT EXISTS (SELECT 1 FROM prices p
                      WHERE p.instance_type = b.kind AND p.region = b.place AND p.pricing_model = 'spot'
                        AND p.zone = b.zone AND p.valid_from = b.start AND p.usd_per_hour = b.amount)
    ORDER BY b.kind, b.place, b.zone, b.start;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    PERFORM ledger_move_rollups(reached, '{}');
    RETURN recorded;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_record_spot_prices(text[], text[], text[], timestamptz[], '
                   'numeric[]) SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_record_spot_prices(text[], text[], text[], timestamptz[],
    numeric[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_record_spot_prices(text[], text[], text[], timestamptz[],
    numeric[]) TO parkbrake_app;
