-- The ledger guarded: the app role appends events and reservations through SECURITY DEFINER
-- functions only; prices are the owner's, append-only, never backdated and audited; admission
-- reserves a tenant's money before hosts start; a backfill never rewrites closed history.
-- See docs/ledger.md.

-- Every price ever recorded, with who recorded it: prices only grow, and this says by whom.
CREATE TABLE price_changes (
    id            bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_type text          NOT NULL,
    valid_from    timestamptz   NOT NULL,
    usd_per_hour  numeric(14, 6) NOT NULL,
    source        text          NOT NULL,
    recorded_by   text          NOT NULL DEFAULT session_user,
    recorded_at   timestamptz   NOT NULL DEFAULT now()
);
CREATE TRIGGER price_changes_append_only BEFORE UPDATE OR DELETE ON price_changes
    FOR EACH ROW EXECUTE FUNCTION ledger_reject_change();
CREATE TRIGGER price_changes_no_truncate BEFORE TRUNCATE ON price_changes
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_reject_change();
CREATE TRIGGER prices_no_truncate BEFORE TRUNCATE ON prices
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_reject_change();

-- A type's first price covers all time before it (usage metered while it was unpriced is priced
-- by it); every later change starts now or later, so billed time is never repriced.
CREATE FUNCTION ledger_guard_price() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.valid_from < date_trunc('milliseconds', statement_timestamp())
       AND EXISTS (SELECT 1 FROM prices WHERE instance_type = NEW.instance_type) THEN
        RAISE EXCEPTION 'a price change for % cannot start in the past (%)', NEW.instance_type, NEW.valid_from
            USING ERRCODE = 'check_violation',
                  HINT = 'record the change from now or later; billed time keeps the price it had';
    END IF;
    INSERT INTO price_changes (instance_type, valid_from, usd_per_hour, source)
    VALUES (NEW.instance_type, NEW.valid_from, NEW.usd_per_hour, NEW.source);
    RETURN NEW;
END
$$;
CREATE TRIGGER prices_guard BEFORE INSERT ON prices
    FOR EACH ROW EXECUTE FUNCTION ledger_guard_price();

-- Money set aside for hosts about to start: hosts × price × cap, until each host's `running`
-- event claims its share (from then on the host's interval commits it) or the lease lapses.
CREATE TABLE reservations (
    id            bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant        text          NOT NULL,
    instance_type text          NOT NULL,
    hosts         integer       NOT NULL CHECK (hosts > 0),
    cap_ms        bigint        NOT NULL CHECK (cap_ms > 0),
    usd_per_hour  numeric(14, 6) NOT NULL,  -- the ledger's price when reserved
    created_ms    bigint        NOT NULL,
    expires_ms    bigint        NOT NULL,
    released_ms   bigint,
    claimed       integer       NOT NULL DEFAULT 0 CHECK (claimed BETWEEN 0 AND hosts),
    requested_by  text          NOT NULL DEFAULT session_user
);
CREATE INDEX reservations_open ON reservations (tenant, instance_type, id) WHERE released_ms IS NULL;

-- Which reservation a host's first `running` used: a host claims at most once, so it is never
-- counted both as reserved and as running.
CREATE TABLE reservation_claims (
    instance_id    text   PRIMARY KEY,
    reservation_id bigint NOT NULL REFERENCES reservations,
    claimed_ms     bigint NOT NULL
);

-- Serialises a tenant's admissions: the caller takes it, reads the runway, then reserves.
CREATE FUNCTION ledger_lock_tenant(who text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('parkbrake tenant ' || who, 0))
$$;

-- Reserve ``hosts`` × the ledger's price now × the billable cap; NULL when the type is unpriced.
CREATE FUNCTION ledger_reserve(who text, kind text, hosts integer, cap_ms bigint, now_ms bigint,
                               lease_ms bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    price numeric;
    reservation bigint;
BEGIN
    SELECT p.usd_per_hour INTO price
    FROM price_ranges p
    WHERE p.instance_type = kind AND p.from_ms <= now_ms AND p.until_ms > now_ms;
    IF price IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO tenants (tenant) VALUES (who) ON CONFLICT (tenant) DO NOTHING;
    INSERT INTO reservations (tenant, instance_type, hosts, cap_ms, usd_per_hour, created_ms, expires_ms)
    VALUES (who, kind, hosts, cap_ms, price, now_ms, now_ms + lease_ms)
    RETURNING id INTO reservation;
    RETURN reservation;
END
$$;

-- Give back what a reservation still holds (hosts it started keep their own commitment).
CREATE FUNCTION ledger_release(reservation bigint, now_ms bigint) RETURNS boolean
LANGUAGE sql SECURITY DEFINER AS $$
    UPDATE reservations SET released_ms = now_ms
    WHERE id = reservation AND released_ms IS NULL
    RETURNING true
$$;

-- Hosts whose `running` just arrived take a share of the oldest live reservation of their tenant
-- and type, once per host.
CREATE FUNCTION ledger_claim_reservations(running_ids text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    host record;
    reservation bigint;
BEGIN
    FOR host IN
        SELECT DISTINCT ON (e.instance_id) e.instance_id, e.at_ms, e.tenant, e.instance_type
        FROM events e
        WHERE e.event_id = ANY(running_ids)
          AND NOT EXISTS (SELECT 1 FROM reservation_claims c WHERE c.instance_id = e.instance_id)
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

-- Append a batch of transitions and refresh their hosts: the only way events enter the ledger.
-- Duplicates are ignored; a backfill (source 'ingest') never reaches into a host's closed
-- history. Returns each event's outcome: appended, duplicate or closed-history.
CREATE FUNCTION ledger_append_events(
    event_ids text[], instance_ids text[], states text[], times timestamptz[], tenant_names text[],
    pools text[], instance_types text[], accelerator_counts integer[], caps bigint[], regions text[],
    origin text, received timestamptz
) RETURNS TABLE (event_id text, outcome text)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    new_ids text[];
    new_hosts text[];
    new_ms bigint[];
    started_ids text[];
BEGIN
    IF origin NOT IN ('meter', 'ingest', 'reconciler', 'replay') THEN
        RAISE EXCEPTION 'source % is not one of meter, ingest, reconciler, replay', origin
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(key)
    FROM (SELECT DISTINCT hashtextextended(host, 0) AS key FROM unnest(instance_ids) AS host ORDER BY key) AS keys;
    INSERT INTO tenants (tenant)
    SELECT DISTINCT t FROM unnest(tenant_names) AS t ORDER BY t
    ON CONFLICT (tenant) DO NOTHING;
    WITH batch AS (
        SELECT b.*
        FROM unnest(event_ids, instance_ids, states, times, tenant_names, pools, instance_types,
                    accelerator_counts, caps, regions)
             AS b (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                   cap_ms, region)
        WHERE origin <> 'ingest' OR NOT EXISTS (
            SELECT 1 FROM intervals i
            WHERE i.instance_id = b.instance_id AND i.ended_ms >= ledger_ms(b.event_time))
    ), inserted AS (
        INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type,
                            accelerators, cap_ms, region, source, received_at)
        SELECT batch.*, origin, received FROM batch
        ON CONFLICT DO NOTHING
        RETURNING events.event_id, events.instance_id, events.at_ms, events.state
    )
    SELECT array_agg(x.event_id), array_agg(x.instance_id), array_agg(x.at_ms),
           array_agg(x.event_id) FILTER (WHERE x.state = 'running')
    INTO new_ids, new_hosts, new_ms, started_ids
    FROM inserted AS x;
    IF new_ids IS NOT NULL THEN
        PERFORM ledger_refresh_intervals(array_agg(h.host), array_agg(h.earliest))
        FROM (SELECT n.host, min(n.at_ms) AS earliest
              FROM unnest(new_hosts, new_ms) AS n (host, at_ms)
              GROUP BY n.host ORDER BY n.host) AS h;
        IF started_ids IS NOT NULL THEN
            PERFORM ledger_claim_reservations(started_ids);
        END IF;
    END IF;
    RETURN QUERY
    SELECT b.event_id,
           CASE WHEN b.event_id = ANY(coalesce(new_ids, '{}')) THEN 'appended'
                WHEN EXISTS (SELECT 1 FROM events e WHERE e.event_id = b.event_id) THEN 'duplicate'
                ELSE 'closed-history' END
    FROM unnest(event_ids) AS b (event_id);
END
$$;

-- A tenant's budget and the actions it takes, set as one change.
CREATE FUNCTION ledger_set_budget(who text, allowed text[], every text, limit_usd numeric,
                                  thresholds numeric[])
RETURNS void
LANGUAGE sql SECURITY DEFINER AS $$
    INSERT INTO tenants (tenant, actions) VALUES (who, allowed)
    ON CONFLICT (tenant) DO UPDATE SET actions = excluded.actions;
    INSERT INTO budgets (tenant, period, limit_usd, soft_thresholds) VALUES (who, every, limit_usd, thresholds)
    ON CONFLICT (tenant) DO UPDATE
    SET period = excluded.period, limit_usd = excluded.limit_usd,
        soft_thresholds = excluded.soft_thresholds, updated_at = now();
$$;

-- The app role reads everything and writes only through the functions above (and appends the
-- guardrails' action log). Functions run with their caller's rights unless granted here.
DO $$
DECLARE
    schema_name text := current_schema();
    definer text;
BEGIN
    EXECUTE format('REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', schema_name);
    -- A SECURITY DEFINER function resolves names only in the ledger's schema.
    FOREACH definer IN ARRAY ARRAY[
        'ledger_reserve(text, text, integer, bigint, bigint, bigint)',
        'ledger_release(bigint, bigint)',
        'ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[], integer[], '
            'bigint[], text[], text, timestamptz)',
        'ledger_set_budget(text, text[], text, numeric, numeric[])'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', definer, schema_name);
    END LOOP;
END
$$;
REVOKE ALL ON events, prices, price_changes, intervals, usage_totals, spend_daily, tenants, budgets,
    guardrail_actions, reservations, reservation_claims FROM parkbrake_app;
GRANT SELECT ON events, prices, price_ranges, price_changes, intervals, usage_totals, spend_daily, tenants,
    budgets, guardrail_actions, reservations, reservation_claims TO parkbrake_app;
GRANT INSERT ON guardrail_actions TO parkbrake_app;
GRANT EXECUTE ON FUNCTION
    ledger_ms(timestamptz), ledger_billable_ms(bigint), ledger_state_rank(text), ledger_lock_tenant(text),
    ledger_reserve(text, text, integer, bigint, bigint, bigint), ledger_release(bigint, bigint),
    ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[], integer[], bigint[],
                         text[], text, timestamptz),
    ledger_set_budget(text, text[], text, numeric, numeric[])
TO parkbrake_app;
