-- Where and how a host is bought is part of its attribution: the region, the pricing model
-- (on-demand or spot, from EC2's InstanceLifecycle) and, for spot, the availability zone are
-- recorded with each event and carried into its interval. A `running` whose attribution differs
-- from its open interval's (a retag, a resize, a change of pricing model seen by the reconciler)
-- closes that interval at its own time and opens a new one. See docs/ledger.md.

-- No CHECK on the hot table (0006): ledger_append_events checks the pricing model once per batch.
ALTER TABLE events ADD COLUMN pricing_model text NOT NULL DEFAULT 'on-demand', ADD COLUMN zone text;

ALTER TYPE ledger_interval
    ADD ATTRIBUTE region text, ADD ATTRIBUTE pricing_model text, ADD ATTRIBUTE zone text CASCADE;

ALTER TABLE intervals
    ADD COLUMN region text NOT NULL DEFAULT '',
    ADD COLUMN pricing_model text NOT NULL DEFAULT 'on-demand',
    ADD COLUMN zone text;
-- Intervals are derived: what they lacked is read from the events that opened them.
UPDATE intervals i SET region = e.region FROM events e WHERE e.event_id = i.opened_by;
ALTER TABLE intervals ALTER COLUMN region DROP DEFAULT;

-- 0006's derivation with the boundary rule extended: a start is a running after anything but a
-- running of the same attribution; an end is the next start or stop. A host's read may begin at an
-- interval's closing event itself (the cut is inclusive): that event may be the running that opened
-- the next interval, and a stop read first opens nothing.
CREATE OR REPLACE FUNCTION ledger_derive_intervals(cuts ledger_cut[]) RETURNS SETOF ledger_interval
LANGUAGE sql STABLE AS $$
    WITH transitions AS (
        SELECT e.*
        FROM unnest(cuts) AS cut
        CROSS JOIN LATERAL (
            SELECT x.event_id, x.instance_id, x.at_ms, x.state_rank, x.tenant, x.pool, x.instance_type,
                   x.accelerators, x.cap_ms, x.region, x.pricing_model, x.zone,
                   x.state = 'running' AS is_running,
                   lag(x.state = 'running') OVER by_time AS after_running,
                   lag(ROW(x.tenant, x.pool, x.instance_type, x.accelerators, x.cap_ms, x.region,
                           x.pricing_model, x.zone)) OVER by_time
                       IS DISTINCT FROM ROW(x.tenant, x.pool, x.instance_type, x.accelerators, x.cap_ms,
                                            x.region, x.pricing_model, x.zone) AS attribution_changed
            FROM events x
            WHERE x.instance_id = cut.instance_id
              AND (x.at_ms, x.state_rank, x.event_id COLLATE "C")
                  >= (cut.at_ms, cut.state_rank, cut.event_id COLLATE "C")
              AND x.state <> 'pending'
            WINDOW by_time AS (ORDER BY x.at_ms, x.state_rank, x.event_id COLLATE "C")
        ) AS e
    ), boundaries AS (
        SELECT t.*,
               lead(t.at_ms) OVER by_time AS next_ms,
               lead(t.event_id) OVER by_time AS next_event_id
        FROM transitions t
        WHERE CASE WHEN t.is_running THEN NOT coalesce(t.after_running, false) OR t.attribution_changed
                   ELSE coalesce(t.after_running, false) END
        WINDOW by_time AS (PARTITION BY t.instance_id ORDER BY t.at_ms, t.state_rank, t.event_id COLLATE "C")
    )
    SELECT event_id, instance_id, tenant, pool, instance_type, accelerators, cap_ms, at_ms, next_ms,
           next_event_id, region, pricing_model, zone
    FROM boundaries
    WHERE is_running
$$;

-- 0006's continuation with the same rule: the open interval stands first as the running that
-- opened it, with its attribution.
CREATE OR REPLACE FUNCTION ledger_continue_intervals(heads ledger_head[], fresh events[])
RETURNS SETOF ledger_interval
LANGUAGE sql STABLE AS $$
    WITH transitions AS (
        SELECT n.event_id, n.instance_id, n.at_ms, n.state_rank, n.tenant, n.pool, n.instance_type,
               n.accelerators, n.cap_ms, n.region, n.pricing_model, n.zone, n.state = 'running' AS is_running
        FROM unnest(fresh) AS n
        WHERE n.state <> 'pending'
        UNION ALL
        SELECT (h.open).opened_by, h.instance_id, (h.open).started_ms, ledger_state_rank('running'),
               (h.open).tenant, (h.open).pool, (h.open).instance_type, (h.open).accelerators,
               (h.open).cap_ms, (h.open).region, (h.open).pricing_model, (h.open).zone, true
        FROM unnest(heads) AS h
        WHERE (h.open).opened_by IS NOT NULL
    ), ordered AS (
        SELECT t.*, lag(t.is_running) OVER by_time AS after_running,
               lag(ROW(t.tenant, t.pool, t.instance_type, t.accelerators, t.cap_ms, t.region,
                       t.pricing_model, t.zone)) OVER by_time
                   IS DISTINCT FROM ROW(t.tenant, t.pool, t.instance_type, t.accelerators, t.cap_ms,
                                        t.region, t.pricing_model, t.zone) AS attribution_changed
        FROM transitions t
        WINDOW by_time AS (PARTITION BY t.instance_id ORDER BY t.at_ms, t.state_rank, t.event_id COLLATE "C")
    ), boundaries AS (
        SELECT o.*,
               lead(o.at_ms) OVER by_time AS next_ms,
               lead(o.event_id) OVER by_time AS next_event_id
        FROM ordered o
        WHERE CASE WHEN o.is_running THEN NOT coalesce(o.after_running, false) OR o.attribution_changed
                   ELSE coalesce(o.after_running, false) END
        WINDOW by_time AS (PARTITION BY o.instance_id ORDER BY o.at_ms, o.state_rank, o.event_id COLLATE "C")
    )
    SELECT event_id, instance_id, tenant, pool, instance_type, accelerators, cap_ms, at_ms, next_ms,
           next_event_id, region, pricing_model, zone
    FROM boundaries
    WHERE is_running
$$;

-- 0001's refresh, reading and writing the intervals' whole attribution.
CREATE OR REPLACE FUNCTION ledger_refresh_intervals(instance_ids text[], earliest_ms bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cuts ledger_cut[];
    stored ledger_interval[];
    derived ledger_interval[];
    gone ledger_interval[];
    added ledger_interval[];
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake prices', 0));
    SELECT array_agg(ROW(host.instance_id, coalesce(kept.ended_ms, -4611686018427387904),
                         coalesce(kept.state_rank, 0), coalesce(kept.closed_by, ''))::ledger_cut)
    INTO cuts
    FROM unnest(instance_ids, earliest_ms) AS host (instance_id, earliest_ms)
    LEFT JOIN LATERAL (
        SELECT i.ended_ms, i.closed_by, e.state_rank
        FROM intervals i
        JOIN events e ON e.event_id = i.closed_by
        WHERE i.instance_id = host.instance_id AND i.ended_ms < host.earliest_ms
        ORDER BY i.ended_ms DESC
        LIMIT 1
    ) AS kept ON true;
    SELECT coalesce(array_agg(ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type,
                                  i.accelerators, i.cap_ms, i.started_ms, i.ended_ms, i.closed_by,
                                  i.region, i.pricing_model, i.zone)::ledger_interval), '{}')
    INTO stored
    FROM unnest(instance_ids, earliest_ms) AS host (instance_id, earliest_ms)
    JOIN intervals i ON i.instance_id = host.instance_id
                    AND (i.ended_ms IS NULL OR i.ended_ms >= host.earliest_ms);
    SELECT coalesce(array_agg(d), '{}') INTO derived FROM ledger_derive_intervals(cuts) AS d;
    SELECT coalesce(array_agg(ROW(x.*)::ledger_interval), '{}')
    INTO gone FROM (SELECT * FROM unnest(stored) EXCEPT ALL SELECT * FROM unnest(derived)) AS x;
    SELECT coalesce(array_agg(ROW(x.*)::ledger_interval), '{}')
    INTO added FROM (SELECT * FROM unnest(derived) EXCEPT ALL SELECT * FROM unnest(stored)) AS x;
    IF cardinality(gone) = 0 AND cardinality(added) = 0 THEN
        RETURN;
    END IF;
    DELETE FROM intervals WHERE opened_by IN (SELECT g.opened_by FROM unnest(gone) AS g);
    INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                           started_ms, ended_ms, closed_by, region, pricing_model, zone)
    SELECT * FROM unnest(added);
    PERFORM ledger_move_rollups(added, gone);
END
$$;

CREATE OR REPLACE FUNCTION ledger_closed_by_tenant(kind text) RETURNS TABLE (tenant text, spans ledger_interval[])
LANGUAGE sql STABLE AS $$
    SELECT i.tenant, array_agg(ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type,
                                   i.accelerators, i.cap_ms, i.started_ms, i.ended_ms, i.closed_by,
                                   i.region, i.pricing_model, i.zone)::ledger_interval)
    FROM intervals i
    WHERE i.ended_ms IS NOT NULL AND (kind IS NULL OR i.instance_type = kind)
    GROUP BY i.tenant
$$;

CREATE OR REPLACE FUNCTION ledger_rebuild() RETURNS void
LANGUAGE sql AS $$
    DELETE FROM intervals;
    INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                           started_ms, ended_ms, closed_by, region, pricing_model, zone)
    SELECT * FROM ledger_derive_intervals(ARRAY(
        SELECT ROW(host.instance_id, -4611686018427387904, 0, '')::ledger_cut
        FROM (SELECT DISTINCT instance_id FROM events) AS host));
    SELECT ledger_recount_rollups(NULL);
$$;

-- 0006's append, taking each event's pricing model and zone too (a new signature: the old one is
-- dropped, so nothing appends without them).
DROP FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[], integer[],
                                   bigint[], text[], text, timestamptz);

-- Append a batch of transitions and bring their hosts' intervals and rollups up to date: the only
-- way events enter the ledger. Duplicates are ignored; a backfill (source 'ingest') never reaches
-- into a host's closed history. A host whose new events all come after its last one (the meter's
-- usual case) has its open interval closed or extended and new ones added, and the rollups move
-- by the intervals that closed: work in proportion to the batch. A host with a late event is
-- derived again from its last interval that ended before it (ledger_refresh_intervals). Returns
-- each event's outcome: appended, duplicate or closed-history.
CREATE FUNCTION ledger_append_events(
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
    continued ledger_interval[];
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
                               started_ms, ended_ms, closed_by, region, pricing_model, zone)
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
                   'text[], integer[], bigint[], text[], text[], text[], text, timestamptz) '
                   'SET search_path = %I, pg_temp',
                   current_schema());
    -- Plans made once per session: a custom plan per call would cost more than a one-event append.
    ALTER FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[],
                                        integer[], bigint[], text[], text[], text[], text, timestamptz)
        SET plan_cache_mode = force_generic_plan;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[],
    integer[], bigint[], text[], text[], text[], text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_append_events(text[], text[], text[], timestamptz[], text[], text[], text[],
    integer[], bigint[], text[], text[], text[], text, timestamptz) TO parkbrake_app;
