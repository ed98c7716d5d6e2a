-- Appending and deriving, apart (docs/ledger.md, "Appends and settles"). An append now only checks
-- its events, stores them and marks them pending: what a meter pays per event is one insert, not
-- the derivation. ledger_settle derives every pending event at once (0014's derivation, unchanged:
-- in-order hosts continue their open interval, hosts with a late event are derived again) and
-- every read of derived tables settles first, so a reader never sees a stale interval.
--
-- Appends hold the settle lock shared and a settle holds it exclusively, to its commit: a settle
-- derives from a history no append is still writing to, takes every pending row, and a host's last
-- derived event is its last event that was not pending.

-- 0001's ledger_ms, with the epoch read from the UTC wall time: extract() of a timestamptz is
-- STABLE, and an IMMUTABLE SQL function calling it is never inlined, so every price range and
-- spot look-up called it row by row (2,500 calls, 7.5 ms, per 1,000 events settled). Both
-- functions of the new body are IMMUTABLE, so it is inlined. Same result for every instant.
CREATE OR REPLACE FUNCTION ledger_ms(moment timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN moment = '-infinity' THEN -4611686018427387904
        WHEN moment = 'infinity' THEN 4611686018427387904
        ELSE floor(extract(epoch FROM moment AT TIME ZONE 'UTC') * 1000)::bigint
    END
$$;

CREATE TABLE ledger_pending (event_id text NOT NULL);  -- appended, not yet derived; no index: read whole

-- Derive the intervals, rollups and claims of newly stored events ("fresh"), everything stored
-- before them being derived already. The caller holds the settle lock exclusively.
CREATE FUNCTION ledger_derive(fresh events[]) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    heads ledger_head[];
    late text[];
    late_ms bigint[];
    steady ledger_head[];
    steady_fresh events[];
    closed ledger_interval[];
    ended ledger_interval[];
    opened ledger_interval[];
BEGIN
    INSERT INTO tenants (tenant)
    SELECT DISTINCT f.tenant FROM unnest(fresh) AS f ORDER BY f.tenant
    ON CONFLICT (tenant) DO NOTHING;
    -- Where each host stood before its pending events: its last event that was not pending, and
    -- its open interval.
    SELECT array_agg(ROW(h.instance_id, ROW(h.instance_id, last.at_ms, last.state_rank, last.event_id)::ledger_cut,
                         open)::ledger_head)
    INTO heads
    FROM (SELECT f.instance_id, array_agg(f.event_id) AS taken FROM unnest(fresh) AS f GROUP BY f.instance_id) AS h
    LEFT JOIN LATERAL (
        SELECT e.at_ms, e.state_rank, e.event_id
        FROM events e
        WHERE e.instance_id = h.instance_id AND e.event_id <> ALL (h.taken)
        ORDER BY e.at_ms DESC, e.state_rank DESC, e.event_id COLLATE "C" DESC
        LIMIT 1
    ) AS last ON true
    LEFT JOIN LATERAL (
        SELECT ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type, i.accelerators, i.cap_ms,
                   i.started_ms, i.ended_ms, i.closed_by, i.region, i.pricing_model, i.zone)::ledger_interval
                   AS open
        FROM intervals i
        WHERE i.instance_id = h.instance_id AND i.ended_ms IS NULL
        LIMIT 1
    ) AS running ON true;
    -- Hosts with an event at or before their last derived one are derived again from before it.
    SELECT array_agg(n.instance_id), array_agg(n.earliest_ms)
    INTO late, late_ms
    FROM (
        SELECT f.instance_id, min(f.at_ms) AS earliest_ms
        FROM unnest(fresh) AS f
        JOIN unnest(heads) AS h ON h.instance_id = f.instance_id
        WHERE (h.last).at_ms IS NOT NULL
          AND (f.at_ms, f.state_rank, f.event_id COLLATE "C")
              <= ((h.last).at_ms, (h.last).state_rank, (h.last).event_id COLLATE "C")
        GROUP BY f.instance_id
        ORDER BY f.instance_id
    ) AS n;
    steady := heads;
    steady_fresh := fresh;
    IF late IS NOT NULL THEN
        SELECT array_agg(h) INTO steady FROM unnest(heads) AS h WHERE h.instance_id <> ALL (late);
        SELECT array_agg(f) INTO steady_fresh FROM unnest(fresh) AS f WHERE f.instance_id <> ALL (late);
        PERFORM ledger_refresh_intervals(late, late_ms);
    END IF;
    IF steady_fresh IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake prices', 0));
        -- Of the continued intervals: those that closed (for the rollups), the heads' open ones
        -- that closed (updated) and the new ones (inserted, open or closed).
        SELECT coalesce(array_agg(c) FILTER (WHERE c.ended_ms IS NOT NULL), '{}'),
               coalesce(array_agg(c) FILTER (WHERE c.ended_ms IS NOT NULL AND h.instance_id IS NOT NULL), '{}'),
               coalesce(array_agg(c) FILTER (WHERE h.instance_id IS NULL), '{}')
        INTO closed, ended, opened
        FROM ledger_continue_intervals(steady, steady_fresh) AS c
        LEFT JOIN unnest(steady) AS h ON (h.open).opened_by = c.opened_by;
        -- Each row found by its key (a lateral look-up), then by its ctid.
        IF cardinality(ended) > 0 THEN
            UPDATE intervals i
            SET ended_ms = c.ended_ms, closed_by = c.closed_by
            FROM unnest(ended) AS c
            CROSS JOIN LATERAL (SELECT x.ctid AS row_id FROM intervals x WHERE x.opened_by = c.opened_by LIMIT 1) AS t
            WHERE i.ctid = t.row_id;
        END IF;
        IF cardinality(opened) > 0 THEN
            INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                                   started_ms, ended_ms, closed_by, region, pricing_model, zone)
            SELECT * FROM unnest(opened);
        END IF;
        IF cardinality(closed) > 0 THEN
            PERFORM ledger_move_rollups(closed, '{}');
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM reservations r WHERE r.released_ms IS NULL) THEN
        PERFORM ledger_claim_reservations(ARRAY(SELECT f.event_id FROM unnest(fresh) AS f
                                                WHERE f.state = 'running'));
    END IF;
END
$$;

CREATE FUNCTION ledger_settle() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    fresh events[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_pending) THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
    -- With the lock held no append is in flight: every pending row is committed and is taken here.
    SELECT array_agg(ROW(e.*)::events)
    INTO fresh
    FROM ledger_pending t
    CROSS JOIN LATERAL (SELECT x.* FROM events x WHERE x.event_id = t.event_id LIMIT 1) AS e;
    IF fresh IS NULL THEN  -- another settle took them while this one waited for the lock
        RETURN 0;
    END IF;
    -- After a bulk append the table holds pages of rows deleted by the settles since, which every
    -- settle would read until a vacuum: past 1 MiB it is truncated instead (the lock keeps appends
    -- out). Not while another transaction reads it: that may be a settle waiting for this one's
    -- lock, so waiting for it would be a deadlock; then the rows are deleted, and a later settle
    -- truncates.
    IF pg_relation_size('ledger_pending') > 1048576 THEN
        BEGIN
            LOCK TABLE ledger_pending IN ACCESS EXCLUSIVE MODE NOWAIT;
            TRUNCATE ledger_pending;
        EXCEPTION WHEN lock_not_available THEN
            DELETE FROM ledger_pending;
        END;
    ELSE
        DELETE FROM ledger_pending;
    END IF;
    PERFORM ledger_derive(fresh);
    RETURN cardinality(fresh);
END
$$;

-- The append: check, store, mark pending. A backfill (source 'ingest') is checked against its
-- hosts' closed history, so it settles first, holds the settle lock exclusively to its commit and
-- derives its own events at once.
CREATE OR REPLACE FUNCTION ledger_append_events(
    event_ids text[], instance_ids text[], states text[], times timestamptz[], tenant_names text[],
    pools text[], instance_types text[], accelerator_counts integer[], caps bigint[], regions text[],
    pricing_models text[], zones text[], origin text, received timestamptz
) RETURNS TABLE (event_id text, outcome text)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    refused text;
    fresh events[];
    appended text[];
BEGIN
    IF origin NOT IN ('meter', 'ingest', 'reconciler', 'replay') THEN
        RAISE EXCEPTION 'source % is not one of meter, ingest, reconciler, replay', origin
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT format('event %s: %s', b.event_id,
                  CASE WHEN ledger_state_rank(b.state) IS NULL THEN format('state %L is not an EC2 state', b.state)
                       WHEN b.pricing_model IS DISTINCT FROM 'on-demand' AND b.pricing_model IS DISTINCT FROM 'spot'
                           THEN format('pricing model %L is not on-demand or spot', b.pricing_model)
                       ELSE format('time %s is finer than a millisecond', b.event_time) END)
    INTO refused
    FROM unnest(event_ids, states, times, pricing_models) AS b (event_id, state, event_time, pricing_model)
    WHERE ledger_state_rank(b.state) IS NULL OR date_trunc('milliseconds', b.event_time) <> b.event_time
       OR b.pricing_model IS DISTINCT FROM 'on-demand' AND b.pricing_model IS DISTINCT FROM 'spot'
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION '%', refused USING ERRCODE = 'check_violation';
    END IF;
    IF origin = 'ingest' THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
        PERFORM ledger_settle();
    ELSE
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake settle', 0));
    END IF;
    -- at_ms inline: ledger_ms reads a STABLE extract, so the planner would call it row by row.
    WITH inserted AS (
        INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type,
                            accelerators, cap_ms, region, source, received_at, at_ms, state_rank,
                            pricing_model, zone)
        SELECT b.event_id, b.instance_id, b.state, b.event_time, b.tenant, b.pool, b.instance_type,
               b.accelerators, b.cap_ms, b.region, origin, received,
               floor(extract(epoch FROM b.event_time) * 1000)::bigint, ledger_state_rank(b.state)::smallint,
               b.pricing_model, b.zone
        FROM unnest(event_ids, instance_ids, states, times, tenant_names, pools, instance_types,
                    accelerator_counts, caps, regions, pricing_models, zones)
             AS b (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                   cap_ms, region, pricing_model, zone)
        WHERE origin <> 'ingest' OR NOT EXISTS (
            SELECT 1 FROM intervals i
            WHERE i.instance_id = b.instance_id
              AND i.ended_ms >= floor(extract(epoch FROM b.event_time) * 1000)::bigint)
        ON CONFLICT (event_id) DO NOTHING
        RETURNING events.*
    )
    SELECT array_agg(ROW(n.*)::events), array_agg(n.event_id) INTO fresh, appended FROM inserted n;
    IF origin = 'ingest' THEN  -- derived at once: the lock is held exclusively and nothing is pending
        IF fresh IS NOT NULL THEN
            PERFORM ledger_derive(fresh);
        END IF;
    ELSE
        INSERT INTO ledger_pending (event_id) SELECT a FROM unnest(appended) AS a;
    END IF;
    -- Only the events not appended come back: a batch appended whole answers with no rows.
    IF cardinality(appended) = cardinality(event_ids) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.event_id,
           CASE WHEN (SELECT true FROM events e WHERE e.event_id = b.event_id) THEN 'duplicate'
                ELSE 'closed-history' END
    FROM unnest(event_ids) AS b (event_id)
    LEFT JOIN unnest(appended) AS n (event_id) ON n.event_id = b.event_id
    WHERE n.event_id IS NULL;
END
$$;

-- One event, as the meter appends it: the same append with scalar arguments, which cost a client
-- and the server a fraction of one-element arrays. A backfill, and an event the checks refuse,
-- take the batch path (its closed-history check, its messages).
CREATE FUNCTION ledger_append_event(
    new_event_id text, new_instance_id text, new_state text, new_time timestamptz, new_tenant text, new_pool text,
    new_instance_type text, new_accelerators integer, new_cap_ms bigint, new_region text, new_pricing_model text,
    new_zone text, origin text, received timestamptz
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    rank integer := ledger_state_rank(new_state);
BEGIN
    IF origin NOT IN ('meter', 'reconciler', 'replay') OR rank IS NULL
       OR new_pricing_model IS DISTINCT FROM 'on-demand' AND new_pricing_model IS DISTINCT FROM 'spot'
       OR date_trunc('milliseconds', new_time) <> new_time THEN
        RETURN coalesce((SELECT a.outcome FROM ledger_append_events(
            ARRAY[new_event_id], ARRAY[new_instance_id], ARRAY[new_state], ARRAY[new_time], ARRAY[new_tenant],
            ARRAY[new_pool], ARRAY[new_instance_type], ARRAY[new_accelerators], ARRAY[new_cap_ms],
            ARRAY[new_region], ARRAY[new_pricing_model], ARRAY[new_zone], origin, received) AS a), 'appended');
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake settle', 0));
    INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                        cap_ms, region, source, received_at, at_ms, state_rank, pricing_model, zone)
    VALUES (new_event_id, new_instance_id, new_state, new_time, new_tenant, new_pool, new_instance_type,
            new_accelerators, new_cap_ms, new_region, origin, received,
            floor(extract(epoch FROM new_time) * 1000)::bigint, rank, new_pricing_model, new_zone)
    ON CONFLICT (event_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    INSERT INTO ledger_pending (event_id) VALUES (new_event_id);
    RETURN 'appended';
END
$$;

-- A rebuild derives every event, pending ones included.
CREATE OR REPLACE FUNCTION ledger_rebuild() RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
    DELETE FROM ledger_pending;
    DELETE FROM intervals;
    INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                           started_ms, ended_ms, closed_by, region, pricing_model, zone)
    SELECT * FROM ledger_derive_intervals(ARRAY(
        SELECT ROW(host.instance_id, -4611686018427387904, 0, '')::ledger_cut
        FROM (SELECT DISTINCT instance_id FROM events) AS host));
    SELECT ledger_recount_rollups(NULL);
$$;

DO $$
DECLARE
    definer text;
BEGIN
    -- CREATE OR REPLACE resets a function's settings: 0014's again, and the same for the new ones.
    FOREACH definer IN ARRAY ARRAY[
        'ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[], integer[], bigint[], '
            'text[], text[], text[], text, timestamptz)',
        'ledger_append_event(text, text, text, timestamptz, text, text, text, integer, bigint, text, text, text, '
            'text, timestamptz)',
        'ledger_settle()'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', definer, current_schema());
        EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', definer);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', definer);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO parkbrake_app', definer);
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_derive(events[]) FROM PUBLIC;
