-- Appends at the speed of the table they write (docs/ledger.md, "Benchmark"): the hot table keeps
-- its two indexes and nothing else, an event that arrives in order extends its host's intervals
-- where they end instead of deriving them again, and a derivation reads each host's events from
-- the index.

-- The events' sort key and the rules on state and time were generated columns and CHECKs calling
-- SQL functions, evaluated for every row; ledger_append_events (the only way in) computes and checks
-- them once per batch instead.
ALTER TABLE events ALTER COLUMN at_ms DROP EXPRESSION, ALTER COLUMN state_rank DROP EXPRESSION;
ALTER TABLE events ALTER COLUMN at_ms SET NOT NULL, ALTER COLUMN state_rank SET NOT NULL;
ALTER TABLE events DROP CONSTRAINT events_state_check, DROP CONSTRAINT events_event_time_check;

-- The same intervals as 0001's, each host's events read in order from an index range of
-- events_by_instance (the window inside the lateral subquery keeps the planner from turning it
-- into a join, which it would plan as a scan of the whole table once the ledger is large).
CREATE OR REPLACE FUNCTION ledger_derive_intervals(cuts ledger_cut[]) RETURNS SETOF ledger_interval
LANGUAGE sql STABLE AS $$
    WITH transitions AS (
        SELECT e.*
        FROM unnest(cuts) AS cut
        CROSS JOIN LATERAL (
            SELECT x.event_id, x.instance_id, x.at_ms, x.state_rank, x.tenant, x.pool, x.instance_type,
                   x.accelerators, x.cap_ms, x.state = 'running' AS is_running,
                   lag(x.state = 'running') OVER (ORDER BY x.at_ms, x.state_rank, x.event_id COLLATE "C")
                       AS after_running
            FROM events x
            WHERE x.instance_id = cut.instance_id
              AND (x.at_ms, x.state_rank, x.event_id COLLATE "C")
                  > (cut.at_ms, cut.state_rank, cut.event_id COLLATE "C")
              AND x.state <> 'pending'
        ) AS e
    ), boundaries AS (
        -- A start is a running after anything but running; an end is the first stop after a running.
        SELECT t.*,
               lead(t.at_ms) OVER by_time AS next_ms,
               lead(t.event_id) OVER by_time AS next_event_id
        FROM transitions t
        WHERE t.is_running <> coalesce(t.after_running, false)
        WINDOW by_time AS (PARTITION BY t.instance_id ORDER BY t.at_ms, t.state_rank, t.event_id COLLATE "C")
    )
    SELECT event_id, instance_id, tenant, pool, instance_type, accelerators, cap_ms, at_ms, next_ms,
           next_event_id
    FROM boundaries
    WHERE is_running
$$;

-- Where a host stood before a batch: its last event (in derivation order) and its open interval.
CREATE TYPE ledger_head AS (instance_id text, last ledger_cut, open ledger_interval);

-- Intervals continued from the heads by events that all come after them: the open interval (if
-- any) stands first as the running that opened it, then the new events, and the usual rule
-- (a start is a running after anything but running, an end the first stop after it) applies.
-- Must match ledger_derive_intervals on the whole history.
CREATE FUNCTION ledger_continue_intervals(heads ledger_head[], fresh events[]) RETURNS SETOF ledger_interval
LANGUAGE sql STABLE AS $$
    WITH transitions AS (
        SELECT n.event_id, n.instance_id, n.at_ms, n.state_rank, n.tenant, n.pool, n.instance_type,
               n.accelerators, n.cap_ms, n.state = 'running' AS is_running
        FROM unnest(fresh) AS n
        WHERE n.state <> 'pending'
        UNION ALL
        SELECT (h.open).opened_by, h.instance_id, (h.open).started_ms, ledger_state_rank('running'),
               (h.open).tenant, (h.open).pool, (h.open).instance_type, (h.open).accelerators,
               (h.open).cap_ms, true
        FROM unnest(heads) AS h
        WHERE (h.open).opened_by IS NOT NULL
    ), ordered AS (
        SELECT t.*, lag(t.is_running) OVER by_time AS after_running
        FROM transitions t
        WINDOW by_time AS (PARTITION BY t.instance_id ORDER BY t.at_ms, t.state_rank, t.event_id COLLATE "C")
    ), boundaries AS (
        SELECT o.*,
               lead(o.at_ms) OVER by_time AS next_ms,
               lead(o.event_id) OVER by_time AS next_event_id
        FROM ordered o
        WHERE o.is_running <> coalesce(o.after_running, false)
        WINDOW by_time AS (PARTITION BY o.instance_id ORDER BY o.at_ms, o.state_rank, o.event_id COLLATE "C")
    )
    SELECT event_id, instance_id, tenant, pool, instance_type, accelerators, cap_ms, at_ms, next_ms,
           next_event_id
    FROM boundaries
    WHERE is_running
$$;

-- Append a batch of transitions and bring their hosts' intervals and rollups up to date: the only
-- way events enter the ledger. Duplicates are ignored; a backfill (source 'ingest') never reaches
-- into a host's closed history. A host whose new events all come after its last one (the meter's
-- usual case) has its open interval closed or extended and new ones added, and the rollups move
-- by the intervals that closed: work in proportion to the batch. A host with a late event is
-- derived again from its last interval that ended before it (ledger_refresh_intervals). Returns
-- each event's outcome: appended, duplicate or closed-history.
CREATE OR REPLACE FUNCTION ledger_append_events(
    event_ids text[], instance_ids text[], states text[], times timestamptz[], tenant_names text[],
    pools text[], instance_types text[], accelerator_counts integer[], caps bigint[], regions text[],
    origin text, received timestamptz
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
    continued ledger_interval[];
BEGIN
    IF origin NOT IN ('meter', 'ingest', 'reconciler', 'replay') THEN
        RAISE EXCEPTION 'source % is not one of meter, ingest, reconciler, replay', origin
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT format('event %s: %s', b.event_id,
                  CASE WHEN ledger_state_rank(b.state) IS NULL THEN format('state %L is not an EC2 state', b.state)
                       ELSE format('time %s is finer than a millisecond', b.event_time) END)
    INTO refused
    FROM unnest(event_ids, states, times) AS b (event_id, state, event_time)
    WHERE ledger_state_rank(b.state) IS NULL OR date_trunc('milliseconds', b.event_time) <> b.event_time
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
                   i.started_ms, i.ended_ms, i.closed_by)::ledger_interval AS open
        FROM intervals i
        WHERE i.instance_id = h.instance_id AND i.ended_ms IS NULL
    ) AS running ON true;
    -- at_ms inline: ledger_ms reads a STABLE extract, so the planner would call it row by row.
    -- Duplicates are skipped by a look-up rather than ON CONFLICT (which writes a confirmation
    -- record per row): an event id is one host's, and the host's lock is held.
    WITH batch AS (
        SELECT b.*, origin AS source, received AS received_at,
               floor(extract(epoch FROM b.event_time) * 1000)::bigint AS at_ms,
               ledger_state_rank(b.state)::smallint AS state_rank
        FROM unnest(event_ids, instance_ids, states, times, tenant_names, pools, instance_types,
                    accelerator_counts, caps, regions)
             AS b (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                   cap_ms, region)
    ), inserted AS (
        INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type,
                            accelerators, cap_ms, region, source, received_at, at_ms, state_rank)
        SELECT b.*
        FROM batch b
        WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.event_id = b.event_id)
          AND (origin <> 'ingest' OR NOT EXISTS (
              SELECT 1 FROM intervals i WHERE i.instance_id = b.instance_id AND i.ended_ms >= b.at_ms))
        RETURNING events.event_id
    )
    SELECT array_agg(ROW(b.*)::events) INTO fresh
    FROM batch b
    JOIN inserted x ON x.event_id = b.event_id;
    IF fresh IS NULL THEN
        RETURN QUERY
        SELECT b.event_id,
               CASE WHEN EXISTS (SELECT 1 FROM events e WHERE e.event_id = b.event_id) THEN 'duplicate'
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
        SELECT coalesce(array_agg(c), '{}') INTO continued
        FROM ledger_continue_intervals(steady, steady_fresh) AS c;
        -- The open intervals that closed, then the intervals that are new.
        UPDATE intervals i
        SET ended_ms = c.ended_ms, closed_by = c.closed_by
        FROM unnest(continued) AS c
        WHERE i.opened_by = c.opened_by AND i.ended_ms IS NULL AND c.ended_ms IS NOT NULL;
        INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                               started_ms, ended_ms, closed_by)
        SELECT c.*
        FROM unnest(continued) AS c
        WHERE NOT EXISTS (SELECT 1 FROM unnest(steady) AS h WHERE (h.open).opened_by = c.opened_by);
        PERFORM ledger_move_rollups(ARRAY(SELECT c FROM unnest(continued) AS c WHERE c.ended_ms IS NOT NULL),
                                    '{}');
    END IF;
    IF EXISTS (SELECT 1 FROM reservations r WHERE r.released_ms IS NULL) THEN
        PERFORM ledger_claim_reservations(ARRAY(SELECT f.event_id FROM unnest(fresh) AS f
                                                WHERE f.state = 'running'));
    END IF;
    RETURN QUERY
    SELECT b.event_id,
           CASE WHEN n.event_id IS NOT NULL THEN 'appended'
                WHEN EXISTS (SELECT 1 FROM events e WHERE e.event_id = b.event_id) THEN 'duplicate'
                ELSE 'closed-history' END
    FROM unnest(event_ids) AS b (event_id)
    LEFT JOIN (SELECT f.event_id FROM unnest(fresh) AS f) AS n ON n.event_id = b.event_id;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], '
                   'text[], integer[], bigint[], text[], text, timestamptz) SET search_path = %I, pg_temp',
                   current_schema());
    -- Plans made once per session: a custom plan per call would cost more than a one-event append.
    ALTER FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[],
                                        integer[], bigint[], text[], text, timestamptz)
        SET plan_cache_mode = force_generic_plan;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_continue_intervals(ledger_head[], events[]) FROM PUBLIC;
