-- Deriving intervals from events: from scratch (a host read from a cut), continued from where a
-- host stood (events in order), refreshed (a late event), and the settle's derivation of what was
-- appended. The rules are docs/ledger.md's (*The rules*) and must match guardrails.ledger.
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- Intervals derived from the events of some hosts from their cuts. Must match
-- guardrails.ledger.intervals_from: a start is a running after anything but a running of the same
-- attribution; an end is the next start or stop. Ties are broken by state rank, then by event id in
-- byte order, as Python compares strings. A host's read may begin at an interval's closing event
-- itself (the cut is inclusive): that event may be the running that opened the next interval, and
-- a stop read first opens nothing. A host with no unattributed event from its cut on (nearly every
-- one: one probe of events_unattributed) has its events read in order from an index range of
-- events_by_instance (the window inside the lateral subquery keeps the planner from turning it
-- into a join, which it would plan as a scan of the whole table once the ledger is large); the
-- others are read as deriving counts them, all at once (ledger_attributed_from, attributions.sql).
CREATE OR REPLACE FUNCTION ledger_derive_intervals(cuts ledger_cut[]) RETURNS SETOF ledger_interval
LANGUAGE sql STABLE AS $$
    WITH marked AS MATERIALIZED (
        -- In the index's order with a limit: asked with EXISTS, the planner scanned the table for
        -- the first row that matched (for a host with none, the whole table).
        SELECT cut, (
            SELECT true FROM events u
            WHERE u.instance_id = cut.instance_id AND u.tenant = 'unattributed'
              AND (u.at_ms, u.state_rank, u.event_id COLLATE "C")
                  >= (cut.at_ms, cut.state_rank, cut.event_id COLLATE "C")
            ORDER BY u.at_ms, u.state_rank, u.event_id COLLATE "C"
            LIMIT 1) IS NOT NULL AS unattributed
        FROM unnest(cuts) AS cut
    ), transitions AS (
        SELECT e.*
        FROM marked m
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
            WHERE NOT m.unattributed AND x.instance_id = (m.cut).instance_id
              AND (x.at_ms, x.state_rank, x.event_id COLLATE "C")
                  >= ((m.cut).at_ms, (m.cut).state_rank, (m.cut).event_id COLLATE "C")
              AND x.state <> 'pending'
            WINDOW by_time AS (ORDER BY x.at_ms, x.state_rank, x.event_id COLLATE "C")
        ) AS e
        UNION ALL
        SELECT x.event_id, x.instance_id, x.at_ms, x.state_rank, x.tenant, x.pool, x.instance_type,
               x.accelerators, x.cap_ms, x.region, x.pricing_model, x.zone,
               x.state = 'running' AS is_running,
               lag(x.state = 'running') OVER by_time AS after_running,
               lag(ROW(x.tenant, x.pool, x.instance_type, x.accelerators, x.cap_ms, x.region,
                       x.pricing_model, x.zone)) OVER by_time
                   IS DISTINCT FROM ROW(x.tenant, x.pool, x.instance_type, x.accelerators, x.cap_ms,
                                        x.region, x.pricing_model, x.zone) AS attribution_changed
        FROM ledger_attributed_from(ARRAY(SELECT m.cut FROM marked m WHERE m.unattributed)) AS x  -- attributions.sql
        WHERE x.state <> 'pending'
        WINDOW by_time AS (PARTITION BY x.instance_id ORDER BY x.at_ms, x.state_rank, x.event_id COLLATE "C")
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
REVOKE EXECUTE ON FUNCTION ledger_derive_intervals(ledger_cut[]) FROM PUBLIC;

-- Intervals continued from the heads (where each host stood) by events that all come after them:
-- the open interval (if any) stands first as the running that opened it, with its attribution,
-- then the new events, and the rule of ledger_derive_intervals applies. Must match
-- ledger_derive_intervals on the whole history.
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
REVOKE EXECUTE ON FUNCTION ledger_continue_intervals(ledger_head[], events[]) FROM PUBLIC;

-- Derive again the intervals of some hosts that got late events, change only the intervals that
-- differ, and move the rollups by them. ``earliest_ms`` is, per host, its earliest new event: the
-- intervals that ended before it cannot change, so each host is read from the end of the last of
-- them, and a refresh costs what is new, not a host's whole history. The caller holds the settle
-- lock exclusively. Prices are read under a shared advisory lock that recording a price takes exclusively, so
-- no rollup is ever computed with a price that is being added.
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
        -- The last millisecond an interval ended at before the earliest (one index probe: ordered
        -- by the closing event's rank too, the host's every earlier interval was read and sorted,
        -- for every slice of a backfill), then the last closed at it by its closing event's place,
        -- not its time alone: a running that closes an interval may open a zero-length one that
        -- a stop closes at the same millisecond.
        WHERE i.instance_id = host.instance_id
          AND i.ended_ms = (SELECT max(b.ended_ms) FROM intervals b
                            WHERE b.instance_id = host.instance_id AND b.ended_ms < host.earliest_ms)
        ORDER BY e.state_rank DESC, i.closed_by COLLATE "C" DESC
        LIMIT 1
    ) AS kept ON true;
    -- The open interval and those that ended from the earliest on: two index ranges (`ended_ms IS
    -- NULL OR …` read every interval of the host).
    SELECT coalesce(array_agg(ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type,
                                  i.accelerators, i.cap_ms, i.started_ms, i.ended_ms, i.closed_by,
                                  i.region, i.pricing_model, i.zone)::ledger_interval), '{}')
    INTO stored
    FROM unnest(instance_ids, earliest_ms) AS host (instance_id, earliest_ms)
    CROSS JOIN LATERAL (
        SELECT x.* FROM intervals x WHERE x.instance_id = host.instance_id AND x.ended_ms >= host.earliest_ms
        UNION ALL
        SELECT x.* FROM intervals x WHERE x.instance_id = host.instance_id AND x.ended_ms IS NULL
    ) AS i;
    SELECT coalesce(array_agg(d), '{}') INTO derived FROM ledger_derive_intervals(cuts) AS d;
    SELECT coalesce(array_agg(ROW(x.*)::ledger_interval), '{}')
    INTO gone FROM (SELECT * FROM unnest(stored) EXCEPT ALL SELECT * FROM unnest(derived)) AS x;
    SELECT coalesce(array_agg(ROW(x.*)::ledger_interval), '{}')
    INTO added FROM (SELECT * FROM unnest(derived) EXCEPT ALL SELECT * FROM unnest(stored)) AS x;
    IF cardinality(gone) = 0 AND cardinality(added) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO tenants (tenant)  -- an unattributed event's tenant is known once its interval is derived
    SELECT DISTINCT a.tenant FROM unnest(added) AS a ORDER BY a.tenant
    ON CONFLICT (tenant) DO NOTHING;
    DELETE FROM intervals WHERE opened_by IN (SELECT g.opened_by FROM unnest(gone) AS g);
    INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                           started_ms, ended_ms, closed_by, region, pricing_model, zone)
    SELECT * FROM unnest(added);
    PERFORM ledger_move_rollups(added, gone);
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_refresh_intervals(text[], bigint[]) FROM PUBLIC;

-- The meter's usual case, one event after its host's last derived one, derived by key look-ups:
-- what ledger_derive does for it (the rule of ledger_continue_intervals on one event) without its
-- set-based statements, which cost a single event a millisecond. Returns false, having changed
-- nothing, for any other case (late, unattributed, or joining a launch with unattributed events):
-- the caller derives that event with ledger_derive. The caller holds the settle lock exclusively and
-- every other event is derived (a settle's one pending event, or a settled append's own).
CREATE OR REPLACE FUNCTION ledger_derive_next(fresh events) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    last record;
    running ledger_interval;
    closed ledger_interval;
BEGIN
    IF fresh.tenant = 'unattributed' THEN
        RETURN false;
    END IF;
    SELECT e.at_ms, e.state_rank, e.event_id, e.tenant INTO last
    FROM events e
    WHERE e.instance_id = fresh.instance_id AND e.event_id <> fresh.event_id
    ORDER BY e.at_ms DESC, e.state_rank DESC, e.event_id COLLATE "C" DESC
    LIMIT 1;
    IF FOUND AND (fresh.at_ms, fresh.state_rank, fresh.event_id COLLATE "C")
                 <= (last.at_ms, last.state_rank, last.event_id COLLATE "C") THEN
        RETURN false;
    END IF;
    IF ledger_attribution_reach(fresh.instance_id, fresh.at_ms) IS NOT NULL THEN
        RETURN false;
    END IF;
    -- A tenant is known once an event of it is derived (tenants are never removed): the host's
    -- last event, derived already, spares the look-up when it has the same tenant.
    IF last.tenant IS DISTINCT FROM fresh.tenant
       AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.tenant = fresh.tenant) THEN
        INSERT INTO tenants (tenant) VALUES (fresh.tenant) ON CONFLICT (tenant) DO NOTHING;
    END IF;
    IF fresh.state = 'pending' THEN  -- neither opens nor closes an interval
        RETURN true;
    END IF;
    SELECT i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type, i.accelerators, i.cap_ms,
           i.started_ms, i.ended_ms, i.closed_by, i.region, i.pricing_model, i.zone  -- ledger_interval's fields
    INTO running
    FROM intervals i
    WHERE i.instance_id = fresh.instance_id AND i.ended_ms IS NULL
    LIMIT 1;
    -- A running closes the open interval only when it changes the attribution, and then opens the
    -- next; any other state closes it.
    IF running.opened_by IS NOT NULL
       AND (fresh.state <> 'running'
            OR ROW(running.tenant, running.pool, running.instance_type, running.accelerators, running.cap_ms,
                   running.region, running.pricing_model, running.zone)
               IS DISTINCT FROM ROW(fresh.tenant, fresh.pool, fresh.instance_type, fresh.accelerators,
                                    fresh.cap_ms, fresh.region, fresh.pricing_model, fresh.zone)) THEN
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake prices', 0));
        closed := running;
        closed.ended_ms := fresh.at_ms;
        closed.closed_by := fresh.event_id;
        UPDATE intervals SET ended_ms = closed.ended_ms, closed_by = closed.closed_by
        WHERE opened_by = closed.opened_by;
        PERFORM ledger_add_closed_interval(closed);  -- rollups.sql
    END IF;
    IF fresh.state = 'running' AND (running.opened_by IS NULL OR closed.opened_by IS NOT NULL) THEN
        INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                               started_ms, ended_ms, closed_by, region, pricing_model, zone)
        VALUES (fresh.event_id, fresh.instance_id, fresh.tenant, fresh.pool, fresh.instance_type,
                fresh.accelerators, fresh.cap_ms, fresh.at_ms, NULL, NULL, fresh.region, fresh.pricing_model,
                fresh.zone);
    END IF;
    IF fresh.state = 'running' AND EXISTS (SELECT 1 FROM reservations r WHERE r.released_ms IS NULL) THEN
        PERFORM ledger_claim_reservations(ARRAY[fresh.event_id]);
    END IF;
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_derive_next(events) FROM PUBLIC;

-- Where some hosts stood before some events were stored (``fresh``: events already stored that are
-- not derived yet; none when read before they are stored): each host's last other event and its
-- open interval. Read by key: a lateral look-up with LIMIT per host.
CREATE OR REPLACE FUNCTION ledger_heads(instance_ids text[], fresh events[]) RETURNS ledger_head[]
LANGUAGE plpgsql AS $$
BEGIN
    RETURN (
        SELECT array_agg(ROW(h.instance_id, ROW(h.instance_id, last.at_ms, last.state_rank, last.event_id)::ledger_cut,
                             open)::ledger_head)
        FROM unnest(instance_ids) AS h (instance_id)
        LEFT JOIN LATERAL (
            -- NOT IN an uncorrelated subquery: one hash of the new ids for every host, where `<> ALL`
            -- of each host's ids compared every event read with every new one (a second a 100k batch).
            SELECT e.at_ms, e.state_rank, e.event_id
            FROM events e
            WHERE e.instance_id = h.instance_id AND e.event_id NOT IN (SELECT f.event_id FROM unnest(fresh) AS f)
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
        ) AS running ON true
    );
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_heads(text[], events[]) FROM PUBLIC;

-- Derive the intervals, rollups and claims of newly stored events ("fresh"), everything stored
-- before them being derived already: where their hosts stood (ledger_heads), then
-- ledger_derive_from. The caller holds the settle lock exclusively.
CREATE OR REPLACE FUNCTION ledger_derive(fresh events[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ledger_derive_from(fresh,
                               ledger_heads(ARRAY(SELECT DISTINCT f.instance_id FROM unnest(fresh) AS f), fresh));
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_derive(events[]) FROM PUBLIC;

-- Derive the intervals, rollups and claims of newly stored events ("fresh") from where their hosts
-- stood before them (``heads``, from ledger_heads; a host with no fresh event may be among them, and
-- is left as it is). The caller holds the settle lock exclusively. A host whose new events all come
-- after its last derived one (the meter's usual case) is continued: its open interval closed or
-- extended, new ones added, the rollups moved by those that closed. A host with a late event is
-- refreshed. Every row it reads is found by key (scalar or lateral look-ups with LIMIT), whatever
-- the tables' size when the session's plans were made.
CREATE OR REPLACE FUNCTION ledger_derive_from(fresh events[], heads ledger_head[]) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    late text[];
    late_ms bigint[];
    steady ledger_head[];
    steady_fresh events[];
    closed ledger_interval[];
    ended ledger_interval[];
    opened ledger_interval[];
BEGIN
    -- The tenants of the attributed events; an unattributed one's host is derived again (below),
    -- which adds the tenants its intervals take (ledger_refresh_intervals).
    INSERT INTO tenants (tenant)
    SELECT DISTINCT f.tenant FROM unnest(fresh) AS f WHERE f.tenant <> 'unattributed' ORDER BY f.tenant
    ON CONFLICT (tenant) DO NOTHING;
    -- Hosts with an event at or before their last derived one are derived again from before it;
    -- so are hosts whose new events join a launch with unattributed events (from the first of
    -- those), and hosts with an unattributed new event (from it): deriving again reads each such
    -- host's events as deriving counts them all at once (ledger_attributed_from), where attributing
    -- the new events one by one read, for each, the host's events back to an attributed one.
    SELECT array_agg(n.instance_id), array_agg(n.earliest_ms)
    INTO late, late_ms
    FROM (
        SELECT g.instance_id,
               least(g.late_ms, g.unattributed_ms, ledger_attribution_reach(g.instance_id, g.first_ms)) AS earliest_ms
        FROM (
            SELECT f.instance_id, min(f.at_ms) AS first_ms,
                   min(f.at_ms) FILTER (WHERE f.tenant = 'unattributed') AS unattributed_ms,
                   min(f.at_ms) FILTER (WHERE (h.last).at_ms IS NOT NULL
                                          AND (f.at_ms, f.state_rank, f.event_id COLLATE "C")
                                              <= ((h.last).at_ms, (h.last).state_rank, (h.last).event_id COLLATE "C"))
                       AS late_ms
            FROM unnest(fresh) AS f
            JOIN unnest(heads) AS h ON h.instance_id = f.instance_id
            GROUP BY f.instance_id
        ) AS g
        ORDER BY g.instance_id
    ) AS n
    WHERE n.earliest_ms IS NOT NULL;
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
REVOKE EXECUTE ON FUNCTION ledger_derive_from(events[], ledger_head[]) FROM PUBLIC;

-- Derive every host's intervals from all its events, pending ones included, and count the rollups
-- again (after a bulk load, or to check the incremental ones). The owner's only.
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
REVOKE EXECUTE ON FUNCTION ledger_rebuild() FROM PUBLIC;
