-- 0011's append, with every row it reads found by key whatever the tables' size when its plans were
-- made, and less work per call (docs/ledger.md, "Benchmark"). Its plans are made once per session
-- (force_generic_plan), at the session's first call: on a young ledger a join of the batch to events
-- or intervals is then planned as a scan of the table, and the plan is kept while the table grows.
-- So every look-up is a scalar subquery or a lateral one with LIMIT, which the planner never turns
-- into a join (a test counts the scans). Less work: the inserted rows come back from the INSERT
-- itself, a statement with nothing to do is not run (a `running` opens an interval and closes
-- nothing; a stop closes one and opens nothing), and a batch appended whole answers at once.
CREATE OR REPLACE FUNCTION ledger_append_events(
    event_ids text[], instance_ids text[], states text[], times timestamptz[], tenant_names text[],
    pools text[], instance_types text[], accelerator_counts integer[], caps bigint[], regions text[],
    pricing_models text[], zones text[], origin text, received timestamptz
) RETURNS TABLE (event_id text, outcome text)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    refused text;
    heads ledger_head[];
    fresh events[];
    late text[];
    late_ms bigint[];
    steady ledger_head[];
    steady_fresh events[];
    closed ledger_interval[];
    ended ledger_interval[];
    opened ledger_interval[];
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
    PERFORM pg_advisory_xact_lock(key)
    FROM (SELECT DISTINCT hashtextextended(host, 0) AS key FROM unnest(instance_ids) AS host ORDER BY key) AS keys;
    INSERT INTO tenants (tenant)
    SELECT DISTINCT t FROM unnest(tenant_names) AS t ORDER BY t
    ON CONFLICT (tenant) DO NOTHING;
    -- Where each host stands, read before the batch is inserted.
    SELECT array_agg(ROW(h.instance_id, ROW(h.instance_id, last.at_ms, last.state_rank, last.event_id)::ledger_cut,
                         open)::ledger_head)
    INTO heads
    FROM (SELECT DISTINCT host AS instance_id FROM unnest(instance_ids) AS host) AS h
    LEFT JOIN LATERAL (
        SELECT e.at_ms, e.state_rank, e.event_id
        FROM events e
        WHERE e.instance_id = h.instance_id
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
    -- at_ms inline: ledger_ms reads a STABLE extract, so the planner would call it row by row.
    -- Duplicates are skipped by a look-up rather than ON CONFLICT (which writes a confirmation
    -- record per row): an event id is one host's, and the host's lock is held.
    WITH batch AS (
        SELECT b.event_id, b.instance_id, b.state, b.event_time, b.tenant, b.pool, b.instance_type,
               b.accelerators, b.cap_ms, b.region, origin AS source, received AS received_at,
               floor(extract(epoch FROM b.event_time) * 1000)::bigint AS at_ms,
               ledger_state_rank(b.state)::smallint AS state_rank, b.pricing_model, b.zone
        FROM unnest(event_ids, instance_ids, states, times, tenant_names, pools, instance_types,
                    accelerator_counts, caps, regions, pricing_models, zones)
             AS b (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                   cap_ms, region, pricing_model, zone)
    ), inserted AS (
        INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type,
                            accelerators, cap_ms, region, source, received_at, at_ms, state_rank,
                            pricing_model, zone)
        SELECT b.*
        FROM batch b
        WHERE (SELECT true FROM events e WHERE e.event_id = b.event_id) IS NULL
          AND (origin <> 'ingest' OR NOT EXISTS (
              SELECT 1 FROM intervals i WHERE i.instance_id = b.instance_id AND i.ended_ms >= b.at_ms))
        RETURNING events.*
    )
    SELECT array_agg(ROW(x.*)::events) INTO fresh FROM inserted x;
    IF fresh IS NULL THEN
        RETURN QUERY
        SELECT b.event_id,
               CASE WHEN (SELECT true FROM events e WHERE e.event_id = b.event_id) THEN 'duplicate'
                    ELSE 'closed-history' END
        FROM unnest(event_ids) AS b (event_id);
        RETURN;
    END IF;
    -- Hosts with an event at or before their last one are derived again from before it.
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
    -- The caller passes each event id once, so a batch appended whole is all "appended".
    IF cardinality(fresh) = cardinality(event_ids) THEN
        RETURN QUERY SELECT b.event_id, 'appended' FROM unnest(event_ids) AS b (event_id);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.event_id,
           CASE WHEN n.event_id IS NOT NULL THEN 'appended'
                WHEN (SELECT true FROM events e WHERE e.event_id = b.event_id) THEN 'duplicate'
                ELSE 'closed-history' END
    FROM unnest(event_ids) AS b (event_id)
    LEFT JOIN (SELECT f.event_id FROM unnest(fresh) AS f) AS n ON n.event_id = b.event_id;
END
$$;
DO $$
BEGIN
    -- CREATE OR REPLACE resets a function's settings: 0011's again.
    EXECUTE format('ALTER FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], '
                   'text[], integer[], bigint[], text[], text[], text[], text, timestamptz) '
                   'SET search_path = %I, pg_temp',
                   current_schema());
    ALTER FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[],
                                        integer[], bigint[], text[], text[], text[], text, timestamptz)
        SET plan_cache_mode = force_generic_plan;
END
$$;
