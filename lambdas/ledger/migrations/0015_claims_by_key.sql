-- 0003's claims, with the new `running` events and their hosts' claims found by key: the append's
-- plans are made once per session (0014), and on a young ledger a join of the batch to events would
-- be planned as a scan of the table and kept while it grows. Lateral and scalar look-ups are never
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
