-- Admission: money reserved for hosts about to start (hosts × price × cap), released, or claimed
-- by each host's first `running` as it is derived. See docs/ledger.md (*Admission: reserve before
-- starting*).
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- Serialises a tenant's admissions: the caller takes it, reads the runway, then reserves.
CREATE OR REPLACE FUNCTION ledger_lock_tenant(who text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('parkbrake tenant ' || who, 0))
$$;
REVOKE EXECUTE ON FUNCTION ledger_lock_tenant(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_lock_tenant(text) TO parkbrake_app;

-- Reserve ``hosts`` × the ledger's price now for their key × the billable cap; NULL when unpriced.
CREATE OR REPLACE FUNCTION ledger_reserve(who text, kind text, place text, model text, spot_zone text,
                                          hosts integer, cap_ms bigint, now_ms bigint, lease_ms bigint)
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
    EXECUTE format('ALTER FUNCTION ledger_reserve(text, text, text, text, text, integer, bigint, bigint, '
                   'bigint) SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_reserve(text, text, text, text, text, integer, bigint, bigint,
    bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_reserve(text, text, text, text, text, integer, bigint, bigint,
    bigint) TO parkbrake_app;

-- Give back what a reservation still holds (hosts it started keep their own commitment).
CREATE OR REPLACE FUNCTION ledger_release(reservation bigint, now_ms bigint) RETURNS boolean
LANGUAGE sql SECURITY DEFINER AS $$
    UPDATE reservations SET released_ms = now_ms
    WHERE id = reservation AND released_ms IS NULL
    RETURNING true
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_release(bigint, bigint) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_release(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_release(bigint, bigint) TO parkbrake_app;

-- Hosts whose `running` was just derived take a share of the oldest live reservation of their
-- tenant and type, once per host. The events and the hosts' claims are found by key: the settle's
-- plans are made once per session, and on a young ledger a join of the batch to events would be
-- planned as a scan of the table and kept while it grows. Lateral and scalar look-ups are never
-- turned into joins.
CREATE OR REPLACE FUNCTION ledger_claim_reservations(running_ids text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    host record;
    reservation bigint;
BEGIN
    FOR host IN
        SELECT DISTINCT ON (e.instance_id) e.instance_id, e.at_ms, e.tenant, e.instance_type
        FROM unnest(running_ids) AS r (event_id)
        CROSS JOIN LATERAL (
            SELECT x.instance_id, x.at_ms, x.tenant, x.instance_type FROM events x WHERE x.event_id = r.event_id LIMIT 1
        ) AS e
        WHERE (SELECT true FROM reservation_claims c WHERE c.instance_id = e.instance_id) IS NULL
        ORDER BY e.instance_id, e.at_ms
    LOOP
        SELECT r.id INTO reservation
        FROM reservations r
        WHERE r.tenant = host.tenant AND r.instance_type = host.instance_type
          AND r.released_ms IS NULL AND r.claimed < r.hosts AND r.expires_ms > host.at_ms
        ORDER BY r.id
        LIMIT 1
        FOR UPDATE;
        IF FOUND THEN
            UPDATE reservations SET claimed = claimed + 1 WHERE id = reservation;
            INSERT INTO reservation_claims VALUES (host.instance_id, reservation, host.at_ms);
        END IF;
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_claim_reservations(text[]) FROM PUBLIC;
