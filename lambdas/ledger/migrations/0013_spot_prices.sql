-- Spot prices from EC2's DescribeSpotPriceHistory, appended by the reconciler (the app role) through
-- one SECURITY DEFINER function. Its rows pass the prices trigger (0012) like any other: a spot price
-- starts within the last 24 hours and after its key's latest row, so history only grows at its end,
-- and every row is audited in price_changes with the session user. See docs/ledger.md (*Spot prices*).

-- Record spot prices (type, region, zone, the instant it took effect, USD per hour). A row that is
-- already recorded exactly is skipped (a run that asks again); any other row the trigger refuses fails
-- the whole call. The closed spot intervals the new prices reach are taken out of the rollups at
-- their old prices and put back at the new ones, under the exclusive prices lock. Returns how many
-- rows were recorded.
CREATE FUNCTION ledger_record_spot_prices(kinds text[], places text[], zones text[], starts timestamptz[],
                                          amounts numeric[])
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
    EXECUTE format('ALTER FUNCTION ledger_record_spot_prices(text[], text[], text[], timestamptz[], numeric[]) '
                   'SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_record_spot_prices(text[], text[], text[], timestamptz[], numeric[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_record_spot_prices(text[], text[], text[], timestamptz[], numeric[])
    TO parkbrake_app;
