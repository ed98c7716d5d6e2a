-- Prices keyed by where and how a host is bought: (instance type, region, pricing model, zone).
-- On-demand prices are per type and region (zone ''); spot prices per type, region and
-- availability zone, each from the instant EC2's spot history says it took effect. A spot span
-- with no spot price for its zone at some instant is priced there at its region's on-demand price
-- ("on-demand fallback"). One function, ledger_prices_for, gives the price ranges of a span's key;
-- every cost, runway, admission and invoice query asks it. See docs/ledger.md (*Prices*).

-- The rows recorded so far were prices.json's us-east-1 on-demand prices.
ALTER TABLE prices
    ADD COLUMN region text NOT NULL DEFAULT 'us-east-1',
    ADD COLUMN pricing_model text NOT NULL DEFAULT 'on-demand'
        CHECK (pricing_model IN ('on-demand', 'spot')),
    ADD COLUMN zone text NOT NULL DEFAULT '',
    -- A spot price has its zone and an instant; an on-demand price has no zone.
    ADD CONSTRAINT prices_zone_by_model CHECK ((pricing_model = 'spot') = (zone <> '')),
    ADD CONSTRAINT prices_spot_from_an_instant CHECK (pricing_model = 'on-demand' OR isfinite(valid_from));
ALTER TABLE prices
    ALTER COLUMN region DROP DEFAULT, ALTER COLUMN pricing_model DROP DEFAULT, ALTER COLUMN zone DROP DEFAULT,
    DROP CONSTRAINT prices_pkey,
    ADD PRIMARY KEY (instance_type, region, pricing_model, zone, valid_from);

ALTER TABLE price_changes
    ADD COLUMN region text NOT NULL DEFAULT 'us-east-1',
    ADD COLUMN pricing_model text NOT NULL DEFAULT 'on-demand',
    ADD COLUMN zone text NOT NULL DEFAULT '';
ALTER TABLE price_changes
    ALTER COLUMN region DROP DEFAULT, ALTER COLUMN pricing_model DROP DEFAULT, ALTER COLUMN zone DROP DEFAULT;

-- A price is in effect from valid_from until the next row of its key.
CREATE OR REPLACE VIEW price_ranges AS
SELECT instance_type, usd_per_hour, valid_from,
       ledger_ms(valid_from) AS from_ms,
       coalesce(ledger_ms(lead(valid_from) OVER by_key), 4611686018427387904) AS until_ms,
       region, pricing_model, zone, source
FROM prices
WINDOW by_key AS (PARTITION BY instance_type, region, pricing_model, zone ORDER BY valid_from);

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

-- The price ranges of one span's key, each with where its price comes from (basis): 'on-demand',
-- 'spot', or for a spot span before its zone's first spot price, 'on-demand fallback'. Ranges
-- never overlap. A plain SQL function, so the planner inlines it into each caller's join.
CREATE FUNCTION ledger_prices_for(kind text, place text, model text, spot_zone text)
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

-- Billed time carries its price key.
ALTER TYPE ledger_billed ADD ATTRIBUTE region text, ADD ATTRIBUTE pricing_model text, ADD ATTRIBUTE zone text;

-- 0007's cost of billed spans, priced by their own key.
CREATE OR REPLACE FUNCTION ledger_cost_of(spans ledger_billed[])
RETURNS TABLE (tenant text, pool text, instance_type text, usd_hour_ms numeric)
LANGUAGE sql STABLE AS $$
    SELECT s.tenant, s.pool, s.instance_type,
           sum(p.usd_per_hour * (least(s.until_ms, p.until_ms) - greatest(s.from_ms, p.from_ms)))
    FROM unnest(spans) AS s
    CROSS JOIN LATERAL ledger_prices_for(s.instance_type, s.region, s.pricing_model, s.zone) AS p
    WHERE p.from_ms < s.until_ms AND p.until_ms > s.from_ms
    GROUP BY s.tenant, s.pool, s.instance_type
$$;

-- 0007's rollup of closed intervals, passing each interval's price key.
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

-- 0001's daily spend of closed intervals, priced by their own key.
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
    )
    SELECT x.tenant, x.day_ms, x.instance_type,
           sum(p.usd_per_hour * (least(x.billed_until_ms, x.day_ms + 86400000, p.until_ms)
                                 - greatest(x.started_ms, x.day_ms, p.from_ms)))
    FROM parts x
    CROSS JOIN LATERAL ledger_prices_for(x.instance_type, x.region, x.pricing_model, x.zone) AS p
    WHERE p.from_ms < least(x.billed_until_ms, x.day_ms + 86400000)
      AND p.until_ms > greatest(x.started_ms, x.day_ms)
    GROUP BY x.tenant, x.day_ms, x.instance_type
$$;

-- New on-demand prices, one per (type, region), each from its ``effective`` instant (-infinity: a
-- key's first price, covering the past). Closed intervals of those types are counted again (their
-- cost changes where a first price covers them, and a spot span's fallback may too), under the
-- exclusive prices lock, so no rollup mixes old and new prices.
DROP FUNCTION ledger_add_price(text, timestamptz, numeric, text);
CREATE FUNCTION ledger_add_prices(kinds text[], places text[], effective timestamptz[], amounts numeric[],
                                  origin text)
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

-- Reservations are priced by their hosts' key (a spot admission names no zone in advance, so it
-- reserves at its region's on-demand price, the fallback).
ALTER TABLE reservations
    ADD COLUMN region text NOT NULL DEFAULT 'us-east-1',
    ADD COLUMN pricing_model text NOT NULL DEFAULT 'on-demand',
    ADD COLUMN zone text;
ALTER TABLE reservations ALTER COLUMN region DROP DEFAULT, ALTER COLUMN pricing_model DROP DEFAULT;

DROP FUNCTION ledger_reserve(text, text, integer, bigint, bigint, bigint);
-- Reserve ``hosts`` × the ledger's price now for their key × the billable cap; NULL when unpriced.
CREATE FUNCTION ledger_reserve(who text, kind text, place text, model text, spot_zone text, hosts integer,
                               cap_ms bigint, now_ms bigint, lease_ms bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    price numeric;
    reservation bigint;
BEGIN
    SELECT p.usd_per_hour INTO price
    FROM ledger_prices_for(kind, place, model, spot_zone) AS p
    WHERE p.from_ms <= now_ms AND p.until_ms > now_ms;
    IF price IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO tenants (tenant) VALUES (who) ON CONFLICT (tenant) DO NOTHING;
    INSERT INTO reservations (tenant, instance_type, region, pricing_model, zone, hosts, cap_ms, usd_per_hour,
                              created_ms, expires_ms)
    VALUES (who, kind, place, model, spot_zone, hosts, cap_ms, price, now_ms, now_ms + lease_ms)
    RETURNING id INTO reservation;
    RETURN reservation;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_reserve(text, text, text, text, text, integer, bigint, bigint, bigint) '
                   'SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_reserve(text, text, text, text, text, integer, bigint, bigint, bigint),
    ledger_add_prices(text[], text[], timestamptz[], numeric[], text),
    ledger_prices_for(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_reserve(text, text, text, text, text, integer, bigint, bigint, bigint),
    ledger_prices_for(text, text, text, text) TO parkbrake_app;
GRANT SELECT ON price_ranges TO parkbrake_app;

-- What was rolled up at us-east-1 rates is counted again by each interval's own key (intervals in
-- other regions stay unpriced until `ledger migrate` records their region's prices).
SELECT ledger_recount_rollups(NULL);
