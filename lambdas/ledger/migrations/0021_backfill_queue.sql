-- A backfill is queued, not derived in its append (docs/ledger.md, "Appends and settles"). 0017
-- settled and derived in every backfill append: its check against the hosts' closed history reads
-- the derived intervals, so each batch of `ledger ingest` paid for deriving the one before it. Now
-- a backfill append checks its events and queues them whole (ledger_backfill, no index: one insert
-- into a heap); the next settle derives what is pending, then checks the queued events against the
-- closed history that leaves, appends those outside it (a duplicate id is ignored, as ever) and
-- derives them. The closed history is the one before the backfill (and what the meter appended
-- until the settle): a backfill's own events never refuse each other, whatever its batches (0017
-- checked batch n against batches 1..n-1).

CREATE TABLE ledger_backfill (LIKE events INCLUDING CONSTRAINTS);  -- queued backfill; no index: read whole

-- Empties a queue the caller took whole, holding the settle lock exclusively. Past 1 MiB it is
-- truncated: deleted rows would be read by every later settle until a vacuum. Not while another
-- transaction reads it: that may be a settle waiting for the caller's lock, so waiting for it
-- would be a deadlock; then the rows are deleted, and a later settle truncates.
CREATE FUNCTION ledger_empty(queue regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_relation_size(queue) > 1048576 THEN
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', queue);
            EXECUTE format('TRUNCATE %s', queue);
        EXCEPTION WHEN lock_not_available THEN
            EXECUTE format('DELETE FROM %s', queue);
        END;
    ELSE
        EXECUTE format('DELETE FROM %s', queue);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION ledger_settle() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    fresh events[];
    queued events[];
    backfilled events[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_pending) AND NOT EXISTS (SELECT 1 FROM ledger_backfill) THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
    -- With the lock held no append is in flight: every pending and queued row is committed and
    -- is taken here (none can commit between reading a queue and emptying it).
    SELECT array_agg(ROW(e.*)::events)
    INTO fresh
    FROM ledger_pending t
    CROSS JOIN LATERAL (SELECT x.* FROM events x WHERE x.event_id = t.event_id LIMIT 1) AS e;
    IF fresh IS NOT NULL THEN
        PERFORM ledger_empty('ledger_pending');
        PERFORM ledger_derive(fresh);
    END IF;
    SELECT array_agg(ROW(b.*)::events) INTO queued FROM ledger_backfill b;
    IF queued IS NOT NULL THEN
        PERFORM ledger_empty('ledger_backfill');
        -- Outside the closed history, which is now derived; the first queued of an id wins.
        WITH inserted AS (
            INSERT INTO events
            SELECT q.*
            FROM unnest(queued) AS q
            WHERE (SELECT true FROM intervals i
                   WHERE i.instance_id = q.instance_id AND i.ended_ms >= q.at_ms LIMIT 1) IS NULL
            ON CONFLICT (event_id) DO NOTHING
            RETURNING events.*
        )
        SELECT array_agg(ROW(n.*)::events) INTO backfilled FROM inserted n;
        IF backfilled IS NOT NULL THEN
            PERFORM ledger_derive(backfilled);
        END IF;
    END IF;
    RETURN coalesce(cardinality(fresh), 0) + coalesce(cardinality(backfilled), 0);
END
$$;

-- The append functions take times in milliseconds since the epoch (the ledger's own unit: a time
-- finer than a millisecond cannot be sent) and a batch takes each distinct attribution once, its
-- events an index into them: a host's events share one, and the client sent every attribution
-- field of every event, 9.5 of its 13 ms per 1,000 events (docs/ledger.md, "Benchmark").
DROP FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[], integer[],
                                   bigint[], text[], text[], text[], text, timestamptz);
DROP FUNCTION ledger_append_event(text, text, text, timestamptz, text, text, text, integer, bigint, text, text,
                                  text, text, timestamptz);

-- A batch's rows, as events (and the backfill queue) store them.
CREATE FUNCTION ledger_batch_events(
    event_ids text[], instance_ids text[], states text[], times_ms bigint[], attributed integer[],
    tenant_names text[], pools text[], instance_types text[], accelerator_counts integer[], caps bigint[],
    regions text[], pricing_models text[], zones text[], origin text, received timestamptz
) RETURNS SETOF events
LANGUAGE sql STABLE AS $$
    SELECT b.event_id, b.instance_id, b.state, 'epoch'::timestamptz + b.at_ms * interval '1 millisecond',
           tenant_names[b.a], pools[b.a], instance_types[b.a], accelerator_counts[b.a], caps[b.a], regions[b.a],
           origin, received, b.at_ms, ledger_state_rank(b.state)::smallint, pricing_models[b.a], zones[b.a]
    FROM unnest(event_ids, instance_ids, states, times_ms, attributed) AS b (event_id, instance_id, state, at_ms, a)
$$;

-- 0017's append, with the batch's attributions apart; a backfill (source 'ingest') is queued
-- instead of checked against closed history, settled and derived.
CREATE FUNCTION ledger_append_events(
    event_ids text[], instance_ids text[], states text[], times_ms bigint[], attributed integer[],
    tenant_names text[], pools text[], instance_types text[], accelerator_counts integer[], caps bigint[],
    regions text[], pricing_models text[], zones text[], origin text, received timestamptz
) RETURNS TABLE (event_id text, outcome text)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    refused text;
    appended text[];
BEGIN
    IF origin NOT IN ('meter', 'ingest', 'reconciler', 'replay') THEN
        RAISE EXCEPTION 'source % is not one of meter, ingest, reconciler, replay', origin
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT format('event %s: %s', b.event_id,
                  CASE WHEN ledger_state_rank(b.state) IS NULL THEN format('state %L is not an EC2 state', b.state)
                       WHEN b.a IS NULL OR b.a NOT BETWEEN 1 AND coalesce(cardinality(tenant_names), 0)
                           THEN format('attribution %s is not one of the batch''s %s', coalesce(b.a::text, 'NULL'),
                                       coalesce(cardinality(tenant_names), 0))
                       ELSE format('pricing model %L is not on-demand or spot', pricing_models[b.a]) END)
    INTO refused
    FROM unnest(event_ids, states, attributed) AS b (event_id, state, a)
    WHERE ledger_state_rank(b.state) IS NULL OR b.a IS NULL OR b.a NOT BETWEEN 1 AND coalesce(cardinality(tenant_names), 0)
       OR pricing_models[b.a] IS DISTINCT FROM 'on-demand' AND pricing_models[b.a] IS DISTINCT FROM 'spot'
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION '%', refused USING ERRCODE = 'check_violation';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake settle', 0));
    IF origin = 'ingest' THEN  -- queued whole; what became of each event is known after the next settle
        INSERT INTO ledger_backfill
        SELECT * FROM ledger_batch_events(event_ids, instance_ids, states, times_ms, attributed, tenant_names, pools,
                                          instance_types, accelerator_counts, caps, regions, pricing_models, zones,
                                          origin, received);
        RETURN;
    END IF;
    WITH inserted AS (
        INSERT INTO events
        SELECT * FROM ledger_batch_events(event_ids, instance_ids, states, times_ms, attributed, tenant_names, pools,
                                          instance_types, accelerator_counts, caps, regions, pricing_models, zones,
                                          origin, received)
        ON CONFLICT (event_id) DO NOTHING
        RETURNING events.event_id
    )
    SELECT array_agg(n.event_id) INTO appended FROM inserted n;
    INSERT INTO ledger_pending (event_id) SELECT a FROM unnest(appended) AS a;
    -- Only the events not appended come back: a batch appended whole answers with no rows.
    IF cardinality(appended) = cardinality(event_ids) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.event_id, 'duplicate'
    FROM unnest(event_ids) AS b (event_id)
    LEFT JOIN unnest(appended) AS n (event_id) ON n.event_id = b.event_id
    WHERE n.event_id IS NULL;
END
$$;

-- 0017's one event, its time in milliseconds. A backfill, and an event the checks refuse, take
-- the batch function (a backfill is answered 'queued').
CREATE FUNCTION ledger_append_event(
    new_event_id text, new_instance_id text, new_state text, new_ms bigint, new_tenant text, new_pool text,
    new_instance_type text, new_accelerators integer, new_cap_ms bigint, new_region text, new_pricing_model text,
    new_zone text, origin text, received timestamptz
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    rank integer := ledger_state_rank(new_state);
BEGIN
    IF origin NOT IN ('meter', 'reconciler', 'replay') OR rank IS NULL
       OR new_pricing_model IS DISTINCT FROM 'on-demand' AND new_pricing_model IS DISTINCT FROM 'spot' THEN
        RETURN coalesce((SELECT a.outcome FROM ledger_append_events(
            ARRAY[new_event_id], ARRAY[new_instance_id], ARRAY[new_state], ARRAY[new_ms], ARRAY[1], ARRAY[new_tenant],
            ARRAY[new_pool], ARRAY[new_instance_type], ARRAY[new_accelerators], ARRAY[new_cap_ms],
            ARRAY[new_region], ARRAY[new_pricing_model], ARRAY[new_zone], origin, received) AS a),
            CASE origin WHEN 'ingest' THEN 'queued' ELSE 'appended' END);
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake settle', 0));
    INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                        cap_ms, region, source, received_at, at_ms, state_rank, pricing_model, zone)
    VALUES (new_event_id, new_instance_id, new_state, 'epoch'::timestamptz + new_ms * interval '1 millisecond',
            new_tenant, new_pool, new_instance_type, new_accelerators, new_cap_ms, new_region, origin, received,
            new_ms, rank, new_pricing_model, new_zone)
    ON CONFLICT (event_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'duplicate';
    END IF;
    INSERT INTO ledger_pending (event_id) VALUES (new_event_id);
    RETURN 'appended';
END
$$;

DO $$
DECLARE
    definer text;
BEGIN
    FOREACH definer IN ARRAY ARRAY[
        'ledger_append_events(text[], text[], text[], bigint[], integer[], text[], text[], text[], integer[], '
            'bigint[], text[], text[], text[], text, timestamptz)',
        'ledger_append_event(text, text, text, bigint, text, text, text, integer, bigint, text, text, text, '
            'text, timestamptz)',
        'ledger_settle()'  -- CREATE OR REPLACE resets a function's settings: 0017's again
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', definer, current_schema());
        EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', definer);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', definer);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO parkbrake_app', definer);
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_empty(regclass) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION ledger_batch_events(text[], text[], text[], bigint[], integer[], text[], text[], text[],
                                               integer[], bigint[], text[], text[], text[], text, timestamptz)
    FROM PUBLIC;
