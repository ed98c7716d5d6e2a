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

-- Derive every pending event (appended by the meter, the reconciler or a replay: a backfill is
-- queued instead); returns how many. The caller holds the settle lock exclusively.
CREATE OR REPLACE FUNCTION ledger_settle_pending() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    fresh events[];
BEGIN
    SELECT array_agg(ROW(e.*)::events)
    INTO fresh
    FROM ledger_pending t
    CROSS JOIN LATERAL (SELECT x.* FROM events x WHERE x.event_id = t.event_id LIMIT 1) AS e;
    IF fresh IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM ledger_empty('ledger_pending');
    IF cardinality(fresh) > 1 OR NOT ledger_derive_next(fresh[1]) THEN  -- derive.sql
        PERFORM ledger_derive(fresh);
    END IF;
    RETURN cardinality(fresh);
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_settle_pending() FROM PUBLIC;

-- The most queued backfill events one settle appends and derives: the settle lock is held
-- exclusively while it does, and every append and reader waits for it, so one settle costs a
-- slice, never the whole backfill (a 100,000-event backfill settled at once held the meter off for
-- minutes). ``LedgerStore.settle`` settles slice after slice, each in its own transaction, until
-- the queue is empty. Measured by benchmarks.ledger_settle: about 0.1 s a slice on 2 cores.
CREATE OR REPLACE FUNCTION ledger_backfill_slice() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 2000 $$;

-- Append and derive one slice of the queued backfill (duplicates ignored): its first events by
-- host, then time (a host's events may be cut between slices: the next slice continues the host
-- from its last settled event). Returns how many were appended. The caller holds the settle lock
-- exclusively. The slice is picked by a top-N sort of the queue and read by row address; the
-- queue is emptied (truncated when large) by the slice that takes its last rows.
CREATE OR REPLACE FUNCTION ledger_settle_backfill() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    sliced tid[];
    whole boolean;
    heads ledger_head[];
    backfilled events[];
BEGIN
    sliced := ARRAY(SELECT q.ctid FROM ledger_backfill AS q
                    ORDER BY q.instance_id, q.at_ms, q.state_rank, q.event_id COLLATE "C"
                    LIMIT ledger_backfill_slice() + 1);
    IF cardinality(sliced) = 0 THEN
        RETURN 0;
    END IF;
    whole := cardinality(sliced) <= ledger_backfill_slice();
    sliced := sliced[1:ledger_backfill_slice()];  -- each row then found by its address (a TID scan)
    -- Where each queued host stands, read before the slice is stored: read after, each host's
    -- last event is found past the slice's own (ledger_derive: 0.17 s per 100k).
    heads := ledger_heads(ARRAY(SELECT DISTINCT q.instance_id FROM ledger_backfill AS q
                                WHERE q.ctid = ANY (sliced)), '{}'::events[]);
    -- Every queued event, wherever it falls in its host's history (ledger_derive_from derives a
    -- host with a late one again from before it); the first queued of an id wins.
    WITH inserted AS (
        INSERT INTO events
        SELECT q.*
        FROM ledger_backfill AS q
        WHERE q.ctid = ANY (sliced)
        ON CONFLICT (event_id) DO NOTHING
        RETURNING events.*
    )
    SELECT array_agg(ROW(n.*)::events) INTO backfilled FROM inserted n;
    IF whole THEN
        PERFORM ledger_empty('ledger_backfill');
    ELSE
        DELETE FROM ledger_backfill AS q WHERE q.ctid = ANY (sliced);
    END IF;
    IF backfilled IS NOT NULL THEN
        PERFORM ledger_derive_from(backfilled, heads);  -- derive.sql
    END IF;
    RETURN coalesce(cardinality(backfilled), 0);
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_settle_backfill() FROM PUBLIC;

-- Derive what is pending, then append one slice of the queued backfill and derive it; returns
-- how many events were derived. It holds the settle lock exclusively to its commit, so it waits for
-- the appends in flight (they hold it shared) and derives from a history nothing is still writing
-- to; with nothing pending or queued it returns without the lock. Each settle takes (empties) the
-- rows it derives, so none is derived twice. What stays queued is left to the next settle
-- (ledger_backfill_waiting says whether any is).
CREATE OR REPLACE FUNCTION ledger_settle() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_pending) AND NOT EXISTS (SELECT 1 FROM ledger_backfill) THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
    -- With the lock held no append is in flight: every pending and queued row is committed and
    -- is taken here (none can commit between reading a queue and emptying it).
    RETURN ledger_settle_pending() + ledger_settle_backfill();
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

-- Whether a backfill is still queued: what ``LedgerStore.settle`` asks between slices.
-- Volatile: asked in the statement that settles, it sees what that settle emptied.
CREATE OR REPLACE FUNCTION ledger_backfill_waiting() RETURNS boolean
LANGUAGE sql SECURITY DEFINER AS $$
    SELECT EXISTS (SELECT 1 FROM ledger_backfill)
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_backfill_waiting() SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_backfill_waiting() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_backfill_waiting() TO parkbrake_app;
