-- The settle: what derives every pending event and appends every queued backfill, whoever calls it
-- (every read of derived tables settles first). See docs/ledger.md (*Appends and settles*).
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- Empties a queue the caller took whole, holding the settle lock exclusively. Past 1 MiB it is
-- truncated: deleted rows would be read by every later settle until a vacuum. Not while another
-- transaction reads it: that may be a settle waiting for the caller's lock, so waiting for it
-- would be a deadlock; then the rows are deleted, and a later settle truncates.
CREATE OR REPLACE FUNCTION ledger_empty(queue regclass) RETURNS void
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
REVOKE EXECUTE ON FUNCTION ledger_empty(regclass) FROM PUBLIC;

-- Derive what is pending, then append the queued backfill (duplicates ignored) and derive it;
-- returns how many events were derived. It holds the settle
-- lock exclusively to its commit, so it waits for the appends in flight (they hold it shared) and
-- derives from a history nothing is still writing to; with nothing pending or queued it returns
-- without the lock. Each settle takes (empties) the rows it derives, so none is derived twice.
CREATE OR REPLACE FUNCTION ledger_settle() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    fresh events[];
    heads ledger_head[];
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
        IF cardinality(fresh) > 1 OR NOT ledger_derive_next(fresh[1]) THEN  -- derive.sql
            PERFORM ledger_derive(fresh);
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM ledger_backfill) THEN
        -- Where each queued host stands, read before the backfill is stored: read after, each
        -- host's last event is found past the backfill's own (ledger_derive: 0.17 s per 100k).
        heads := ledger_heads(ARRAY(SELECT DISTINCT q.instance_id FROM ledger_backfill AS q), '{}'::events[]);
        -- Every queued event, wherever it falls in its host's history (ledger_derive_from derives
        -- a host with a late one again from before it); the first queued of an id wins. Straight
        -- from the queue (an array of it first cost a third of a second per 100k events).
        WITH inserted AS (
            INSERT INTO events
            SELECT q.*
            FROM ledger_backfill AS q
            ON CONFLICT (event_id) DO NOTHING
            RETURNING events.*
        )
        SELECT array_agg(ROW(n.*)::events) INTO backfilled FROM inserted n;
        PERFORM ledger_empty('ledger_backfill');
        IF backfilled IS NOT NULL THEN
            PERFORM ledger_derive_from(backfilled, heads);  -- derive.sql
        END IF;
    END IF;
    RETURN coalesce(cardinality(fresh), 0) + coalesce(cardinality(backfilled), 0);
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_settle() SET search_path = %I, pg_temp', current_schema());
END
$$;
ALTER FUNCTION ledger_settle() SET plan_cache_mode = force_generic_plan;
REVOKE EXECUTE ON FUNCTION ledger_settle() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_settle() TO parkbrake_app;
