-- Attributions: what makes an event of tenant `unattributed` whose it was, when the ledger knows.
-- See docs/ledger.md (*Metering*). Deriving reads every event through ledger_attributed, so the
-- intervals are a function of the events and the attributions table, in any order of arrival.
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- An event as deriving counts it. One with a tenant is itself. One of tenant `unattributed` takes
-- the attribution of its launch when an event of that launch has one: the latest such event at or
-- before it, else the earliest after it. A launch is what lies between two of the host's
-- `stopped` or `terminated` events (the later one included): a host cannot be resized, nor change
-- pricing model, without stopping, so an event of the same launch says all of it. Else the
-- operator's attribution covering its time (the latest-starting one) gives the tenant and, when
-- it names one, the pool. Else it stays `unattributed`. Only events of tenant `unattributed` are
-- looked up (each look-up is one or two index ranges of the host's events), by
-- ledger_attribution_of: PL/pgSQL, which keeps its plan for the session (a SQL function with a
-- subquery is never inlined, and one not inlined costs ~0.3 ms a call however trivial its case: a
-- 100k-event settle spent 45 s here). This one is a bare expression, which the planner inlines, so
-- an attributed event costs nothing.
CREATE OR REPLACE FUNCTION ledger_attribution_of(x events) RETURNS events
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        SELECT ROW(x.event_id, x.instance_id, x.state, x.event_time,
                   coalesce(k.tenant, a.tenant, x.tenant), coalesce(k.pool, a.pool, x.pool),
                   coalesce(k.instance_type, x.instance_type), coalesce(k.accelerators, x.accelerators),
                   coalesce(k.cap_ms, x.cap_ms), coalesce(k.region, x.region), x.source, x.received_at,
                   x.at_ms, x.state_rank,
                   CASE WHEN k.tenant IS NULL THEN x.pricing_model ELSE k.pricing_model END,
                   CASE WHEN k.tenant IS NULL THEN x.zone ELSE k.zone END, x.account)::events
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (  -- the launch's bounds: the stop before it, the stop that ends it
            SELECT (SELECT ROW(b.instance_id, b.at_ms, b.state_rank, b.event_id)::ledger_cut FROM events b
                    WHERE b.instance_id = x.instance_id AND b.state IN ('stopped', 'terminated')
                      AND (b.at_ms, b.state_rank, b.event_id COLLATE "C")
                          < (x.at_ms, x.state_rank, x.event_id COLLATE "C")
                    ORDER BY b.at_ms DESC, b.state_rank DESC, b.event_id COLLATE "C" DESC LIMIT 1) AS before,
                   (SELECT ROW(b.instance_id, b.at_ms, b.state_rank, b.event_id)::ledger_cut FROM events b
                    WHERE b.instance_id = x.instance_id AND b.state IN ('stopped', 'terminated')
                      AND (b.at_ms, b.state_rank, b.event_id COLLATE "C")
                          >= (x.at_ms, x.state_rank, x.event_id COLLATE "C")
                    ORDER BY b.at_ms, b.state_rank, b.event_id COLLATE "C" LIMIT 1) AS ending
        ) AS launch ON true
        LEFT JOIN LATERAL (
            SELECT coalesce(
                (SELECT ROW(e.*)::events FROM events e
                 WHERE e.instance_id = x.instance_id AND e.tenant <> 'unattributed'
                   AND (e.at_ms, e.state_rank, e.event_id COLLATE "C")
                       <= (x.at_ms, x.state_rank, x.event_id COLLATE "C")
                   AND ((launch.before).at_ms IS NULL
                        OR (e.at_ms, e.state_rank, e.event_id COLLATE "C")
                           > ((launch.before).at_ms, (launch.before).state_rank,
                              (launch.before).event_id COLLATE "C"))
                 ORDER BY e.at_ms DESC, e.state_rank DESC, e.event_id COLLATE "C" DESC LIMIT 1),
                (SELECT ROW(e.*)::events FROM events e
                 WHERE e.instance_id = x.instance_id AND e.tenant <> 'unattributed'
                   AND (e.at_ms, e.state_rank, e.event_id COLLATE "C")
                       > (x.at_ms, x.state_rank, x.event_id COLLATE "C")
                   AND ((launch.ending).at_ms IS NULL
                        OR (e.at_ms, e.state_rank, e.event_id COLLATE "C")
                           <= ((launch.ending).at_ms, (launch.ending).state_rank,
                               (launch.ending).event_id COLLATE "C"))
                 ORDER BY e.at_ms, e.state_rank, e.event_id COLLATE "C" LIMIT 1)) AS known
        ) AS found ON true
        LEFT JOIN LATERAL (SELECT (found.known).*) AS k ON true
        LEFT JOIN LATERAL (
            SELECT o.tenant, o.pool FROM attributions o
            WHERE o.instance_id = x.instance_id AND o.since_ms <= x.at_ms AND x.at_ms < o.until_ms
            ORDER BY o.since_ms DESC LIMIT 1
        ) AS a ON true
    );
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_attribution_of(events) FROM PUBLIC;

CREATE OR REPLACE FUNCTION ledger_attributed(x events) RETURNS events
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN x.tenant <> 'unattributed' THEN x ELSE ledger_attribution_of(x) END
$$;
REVOKE EXECUTE ON FUNCTION ledger_attributed(events) FROM PUBLIC;

-- The events of some hosts from their cuts on (inclusive), each as deriving counts it: the rule of
-- ledger_attributed, for a whole run of a host's events at once. Per event, ledger_attribution_of
-- reads the host's events outwards from it until it finds an attributed one (or its launch's end),
-- so a run of n unattributed events cost n² reads (3 hosts × 4,000 backfilled events: 337 s).
-- Here each host is read once, in order, from the start of the launch that holds its cut (an
-- earlier event of that launch may attribute one after the cut) to its last event, and numbered;
-- each event's launch is the count of stops before it, and the nearest attributed events before
-- and after it are found by a running max and min of their numbers: two sorts, then one hash join
-- of the numbers per unattributed event. What the operator attributed is looked up (by its key)
-- only for an unattributed event its launch leaves unattributed.
CREATE OR REPLACE FUNCTION ledger_attributed_from(cuts ledger_cut[]) RETURNS SETOF events
LANGUAGE sql STABLE AS $$
    WITH numbered AS MATERIALIZED (
        SELECT x.*, cut.at_ms AS cut_ms, cut.state_rank AS cut_rank, cut.event_id AS cut_id,
               row_number() OVER by_time AS n,
               count(*) FILTER (WHERE x.state IN ('stopped', 'terminated'))
                   OVER (by_time ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS launch
        FROM unnest(cuts) AS cut
        LEFT JOIN LATERAL (  -- the stop before the cut, which ends the launch before the cut's
            SELECT b.at_ms, b.state_rank, b.event_id FROM events b
            WHERE b.instance_id = cut.instance_id AND b.state IN ('stopped', 'terminated')
              AND (b.at_ms, b.state_rank, b.event_id COLLATE "C") < (cut.at_ms, cut.state_rank, cut.event_id COLLATE "C")
            ORDER BY b.at_ms DESC, b.state_rank DESC, b.event_id COLLATE "C" DESC LIMIT 1
        ) AS stop ON true
        CROSS JOIN LATERAL (  -- an index range per host, in its order: as a join of events the
            SELECT e.*          -- planner read the whole table (its estimate of the range is a third of it)
            FROM events e
            WHERE e.instance_id = cut.instance_id
              AND (e.at_ms, e.state_rank, e.event_id COLLATE "C")
                  > (coalesce(stop.at_ms, -4611686018427387904), coalesce(stop.state_rank, 0),
                     coalesce(stop.event_id, '') COLLATE "C")
            ORDER BY e.at_ms, e.state_rank, e.event_id COLLATE "C"
            OFFSET 0
        ) AS x
        WINDOW by_time AS (PARTITION BY x.instance_id ORDER BY x.at_ms, x.state_rank, x.event_id COLLATE "C")
    ), nearest AS (
        SELECT r.*,
               max(r.n) FILTER (WHERE r.tenant <> 'unattributed')
                   OVER (PARTITION BY r.instance_id ORDER BY r.n ROWS UNBOUNDED PRECEDING) AS known_before,
               min(r.n) FILTER (WHERE r.tenant <> 'unattributed')
                   OVER (PARTITION BY r.instance_id ORDER BY r.n DESC ROWS UNBOUNDED PRECEDING) AS known_after
        FROM numbered r
    )
    SELECT x.event_id, x.instance_id, x.state, x.event_time,
           coalesce(k.tenant, a.tenant, x.tenant), coalesce(k.pool, a.pool, x.pool),
           coalesce(k.instance_type, x.instance_type), coalesce(k.accelerators, x.accelerators),
           coalesce(k.cap_ms, x.cap_ms), coalesce(k.region, x.region), x.source, x.received_at,
           x.at_ms, x.state_rank,
           CASE WHEN k.tenant IS NULL THEN x.pricing_model ELSE k.pricing_model END,
           CASE WHEN k.tenant IS NULL THEN x.zone ELSE k.zone END, x.account
    FROM nearest x
    LEFT JOIN numbered p ON x.tenant = 'unattributed' AND p.instance_id = x.instance_id
                        AND p.n = x.known_before AND p.launch = x.launch
    LEFT JOIN numbered f ON x.tenant = 'unattributed' AND f.instance_id = x.instance_id
                        AND f.n = x.known_after AND f.launch = x.launch
    LEFT JOIN LATERAL (SELECT CASE WHEN p.n IS NOT NULL THEN p.tenant ELSE f.tenant END AS tenant,
                              CASE WHEN p.n IS NOT NULL THEN p.pool ELSE f.pool END AS pool,
                              CASE WHEN p.n IS NOT NULL THEN p.instance_type ELSE f.instance_type END AS instance_type,
                              CASE WHEN p.n IS NOT NULL THEN p.accelerators ELSE f.accelerators END AS accelerators,
                              CASE WHEN p.n IS NOT NULL THEN p.cap_ms ELSE f.cap_ms END AS cap_ms,
                              CASE WHEN p.n IS NOT NULL THEN p.region ELSE f.region END AS region,
                              CASE WHEN p.n IS NOT NULL THEN p.pricing_model ELSE f.pricing_model END AS pricing_model,
                              CASE WHEN p.n IS NOT NULL THEN p.zone ELSE f.zone END AS zone) AS k ON true
    LEFT JOIN LATERAL (
        SELECT o.tenant, o.pool FROM attributions o
        WHERE x.tenant = 'unattributed' AND p.n IS NULL AND f.n IS NULL
          AND o.instance_id = x.instance_id AND o.since_ms <= x.at_ms AND x.at_ms < o.until_ms
        ORDER BY o.since_ms DESC LIMIT 1
    ) AS a ON true
    WHERE (x.at_ms, x.state_rank, x.event_id COLLATE "C") >= (x.cut_ms, x.cut_rank, x.cut_id COLLATE "C")
$$;
REVOKE EXECUTE ON FUNCTION ledger_attributed_from(ledger_cut[]) FROM PUBLIC;

-- Where a host's intervals may take another attribution because of new events from ``first_ms`` on:
-- its first event of tenant `unattributed` in the launch those events join (after the host's last
-- `stopped` or `terminated` before them: one at their first millisecond may be one of them, and
-- reaching further back only derives more), when there is one at or before them; else NULL. A new
-- event may say whose an earlier event of its launch was, or (a stop) end that launch before an
-- event that did. The new events are stored already: one of them may be the one found.
-- PL/pgSQL for its kept plan: as a SQL function (never inlined, for its subqueries) it was planned
-- on every call, 0.6 ms of the meter's 1.3 ms derivation of one event.
CREATE OR REPLACE FUNCTION ledger_attribution_reach(host text, first_ms bigint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- A host with no unattributed event, nearly every one: one probe of events_unattributed.
    -- (In the index's order with a limit: asked with EXISTS, the planner may scan the table.)
    IF (SELECT true FROM events u WHERE u.instance_id = host AND u.tenant = 'unattributed'
        ORDER BY u.at_ms, u.state_rank, u.event_id COLLATE "C" LIMIT 1) IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT (
        SELECT e.at_ms FROM events e
        WHERE e.instance_id = host AND e.tenant = 'unattributed'
          -- One row comparison (no stop: the least key), which bounds the index range; `stop IS NULL
          -- OR …` is a filter, and read every unattributed event of the host from its first.
          AND (e.at_ms, e.state_rank, e.event_id COLLATE "C")
              > (coalesce(stop.at_ms, -4611686018427387904), coalesce(stop.state_rank, 0),
                 coalesce(stop.event_id, '') COLLATE "C")
        ORDER BY e.at_ms, e.state_rank, e.event_id COLLATE "C" LIMIT 1)
    FROM (SELECT b.tenant = 'unattributed' AS unattributed FROM events b
          WHERE b.instance_id = host AND b.at_ms <= first_ms
            AND (b.state IN ('stopped', 'terminated') AND b.at_ms < first_ms OR b.tenant = 'unattributed')
          ORDER BY b.at_ms DESC, b.state_rank DESC, b.event_id COLLATE "C" DESC LIMIT 1) AS latest
    LEFT JOIN LATERAL (
        SELECT b.at_ms, b.state_rank, b.event_id FROM events b
        WHERE b.instance_id = host AND b.at_ms < first_ms AND b.state IN ('stopped', 'terminated')
        ORDER BY b.at_ms DESC, b.state_rank DESC, b.event_id COLLATE "C" DESC LIMIT 1
    ) AS stop ON true
    WHERE latest.unattributed);
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_attribution_reach(text, bigint) FROM PUBLIC;

-- An operator's attribution (`parkbrake ledger attribute`): record it (replacing one of the same
-- host and start), then derive the host again from ``since`` on, and move the rollups. Returns the
-- intervals whose attribution changed, before and after (an interval is attributed by the event
-- that opened it, so one opened before ``since`` keeps its own). Settles first, holding the settle
-- lock to the commit, so no event is pending while the host is derived. The owner's only.
CREATE OR REPLACE FUNCTION ledger_attribute(
    host text, since bigint, until bigint, new_tenant text, new_pool text, who text, why text
) RETURNS TABLE (opened_by text, started_ms bigint, ended_ms bigint, accelerator_ms bigint,
                 tenant_before text, pool_before text, tenant_after text, pool_after text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    before ledger_interval[];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
    PERFORM ledger_settle();
    SELECT coalesce(array_agg(ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type, i.accelerators,
                                  i.cap_ms, i.started_ms, i.ended_ms, i.closed_by, i.region, i.pricing_model,
                                  i.zone)::ledger_interval), '{}')
    INTO before
    FROM intervals i
    WHERE i.instance_id = host AND (i.ended_ms IS NULL OR i.ended_ms >= since);
    INSERT INTO attributions (instance_id, since_ms, until_ms, tenant, pool, actor, reason)
    VALUES (host, since, until, new_tenant, new_pool, who, why)
    ON CONFLICT (instance_id, since_ms) DO UPDATE
    SET until_ms = excluded.until_ms, tenant = excluded.tenant, pool = excluded.pool, actor = excluded.actor,
        reason = excluded.reason, recorded_at = excluded.recorded_at;
    INSERT INTO tenants (tenant) VALUES (new_tenant) ON CONFLICT (tenant) DO NOTHING;  -- a known tenant now
    PERFORM ledger_refresh_intervals(ARRAY[host], ARRAY[since]);
    RETURN QUERY
    SELECT b.opened_by, b.started_ms, b.ended_ms,
           (b.accelerators::bigint * (coalesce(b.ended_ms, b.started_ms) - b.started_ms)),
           b.tenant, b.pool, i.tenant, i.pool
    FROM unnest(before) AS b
    JOIN intervals i ON i.opened_by = b.opened_by
    WHERE (i.tenant, i.pool) IS DISTINCT FROM (b.tenant, b.pool)
    ORDER BY b.started_ms;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_attribute(text, bigint, bigint, text, text, text, text) FROM PUBLIC;
