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
-- the queue is empty. Measured by benchmarks.ledger_settle: 0.05 to 0.1 s a slice on 2 cores.
CREATE OR REPLACE FUNCTION ledger_backfill_slice() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 1000 $$;

-- Append and derive one slice of the queued backfill (duplicates ignored): its first events by
-- host, then time, after ``after`` (the key where the previous slice ended; NULL: from the
-- queue's start). A host's events may be cut between slices: the next slice continues the host
-- from its last settled event. Returns how many were appended, the key of the slice's last event
-- (NULL when the slice reached the end of the queue), and whether any event is still queued (one
-- queued before ``after`` while the slices went on is taken from the queue's start again). The
-- caller holds the settle lock exclusively. Rows are found by ledger_backfill_order (0026), read by
-- their addresses; the queue is emptied (truncated when large) by the slice that takes its last.
CREATE OR REPLACE FUNCTION ledger_settle_backfill(
    after ledger_cut, OUT appended integer, OUT last ledger_cut, OUT waiting boolean
)
LANGUAGE plpgsql AS $$
DECLARE
    start ledger_cut := coalesce(after, ROW('', -4611686018427387904, -32768, '')::ledger_cut);
    sliced tid[];
    heads ledger_head[];
    backfilled events[];
    again record;
BEGIN
    appended := 0;
    sliced := ARRAY(SELECT q.ctid FROM ledger_backfill AS q
                    WHERE (q.instance_id, q.at_ms, q.state_rank, q.event_id COLLATE "C")
                          > (start.instance_id, start.at_ms, start.state_rank, start.event_id COLLATE "C")
                    ORDER BY q.instance_id, q.at_ms, q.state_rank, q.event_id COLLATE "C"
                    LIMIT ledger_backfill_slice() + 1);
    IF cardinality(sliced) = 0 AND after IS NOT NULL THEN  -- the end: from the start again
        SELECT * INTO again FROM ledger_settle_backfill(NULL);
        appended := again.appended;
        last := again.last;
        waiting := again.waiting;
        RETURN;
    END IF;
    IF cardinality(sliced) > ledger_backfill_slice() THEN
        sliced := sliced[1:ledger_backfill_slice()];
        last := (SELECT ROW(q.instance_id, q.at_ms, q.state_rank, q.event_id)::ledger_cut
                 FROM ledger_backfill AS q WHERE q.ctid = sliced[ledger_backfill_slice()]);
    END IF;
    IF cardinality(sliced) > 0 THEN
        -- Where each queued host stands, read before the slice is stored: read after, each host's
        -- last event is found past the slice's own (ledger_derive: 0.17 s per 100k).
        heads := ledger_heads(ARRAY(SELECT DISTINCT q.instance_id FROM ledger_backfill AS q
                                    WHERE q.ctid = ANY (sliced)), '{}'::events[]);
        -- Every queued event, wherever it falls in its host's history (ledger_derive_from derives
        -- a host with a late one again from before it); the first queued of an id wins.
        WITH inserted AS (
            INSERT INTO events
            SELECT q.*
            FROM ledger_backfill AS q
            WHERE q.ctid = ANY (sliced)
            ON CONFLICT (event_id) DO NOTHING
            RETURNING events.*
        )
        SELECT array_agg(ROW(n.*)::events) INTO backfilled FROM inserted n;
        DELETE FROM ledger_backfill AS q WHERE q.ctid = ANY (sliced);
        IF backfilled IS NOT NULL THEN
            PERFORM ledger_derive_from(backfilled, heads);  -- derive.sql
        END IF;
        appended := coalesce(cardinality(backfilled), 0);
    END IF;
    -- Short of the queue's end, more is waiting; at its end, the queue is read (once: its heap
    -- holds every row the slices deleted until a vacuum) for what was queued before ``after``
    -- meanwhile, and emptied when nothing was.
    waiting := last IS NOT NULL;
    IF NOT waiting THEN
        waiting := EXISTS (SELECT 1 FROM ledger_backfill);
        IF NOT waiting THEN
            PERFORM ledger_empty('ledger_backfill');
        END IF;
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_settle_backfill(ledger_cut) FROM PUBLIC;

-- One slice settled: what is pending derived, then the slice of the queued backfill after
-- ``after`` (ledger_settle_backfill); how many events were derived, where the slice ended (pass it
-- to the next call), and whether a backfill is still queued. ``LedgerStore.settle`` calls it until
-- nothing is, each call its own transaction, so the settle lock is let go between slices.
CREATE OR REPLACE FUNCTION ledger_settle_slice(after_instance text, after_ms bigint, after_rank smallint,
                                               after_event text)
RETURNS TABLE (derived integer, last_instance text, last_ms bigint, last_rank smallint, last_event text,
               waiting boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    pending integer;
    slice record;
BEGIN
    -- Asked of the first slice only: the queue's heap holds the rows each slice deleted, and
    -- reading past them for every slice cost the square of the backfill.
    IF after_instance IS NULL AND NOT EXISTS (SELECT 1 FROM ledger_pending)
       AND NOT EXISTS (SELECT 1 FROM ledger_backfill) THEN
        RETURN QUERY SELECT 0, NULL::text, NULL::bigint, NULL::smallint, NULL::text, false;
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
    pending := ledger_settle_pending();
    SELECT * INTO slice FROM ledger_settle_backfill(
        CASE WHEN after_instance IS NULL THEN NULL
             ELSE ROW(after_instance, after_ms, after_rank, after_event)::ledger_cut END);
    RETURN QUERY SELECT pending + slice.appended, (slice.last).instance_id, (slice.last).at_ms,
                        (slice.last).state_rank, (slice.last).event_id, slice.waiting;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_settle_slice(text, bigint, smallint, text) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
ALTER FUNCTION ledger_settle_slice(text, bigint, smallint, text) SET plan_cache_mode = force_generic_plan;
REVOKE EXECUTE ON FUNCTION ledger_settle_slice(text, bigint, smallint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_settle_slice(text, bigint, smallint, text) TO parkbrake_app;

-- Derive what is pending, then append one slice of the queued backfill (from its start) and derive
-- it; returns how many events were derived. It holds the settle lock exclusively to its commit, so
-- it waits for the appends in flight (they hold it shared) and derives from a history nothing is
-- still writing to; with nothing pending or queued it returns without the lock. Each settle takes
-- (empties) the rows it derives, so none is derived twice. What stays queued is left to the next
-- settle: a reader pays for one slice at most. A slice that fails is rolled back alone and
-- reported (a WARNING, in the server's log and to the client), never failing the reader: a
-- backfill that cannot settle must not stop the meter's budget check, which reads after every
-- append (`LedgerStore.settle`, which `ledger ingest` calls, fails with the error instead).
CREATE OR REPLACE FUNCTION ledger_settle() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    derived integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM ledger_pending) AND NOT EXISTS (SELECT 1 FROM ledger_backfill) THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
    -- With the lock held no append is in flight: every pending and queued row is committed and
    -- is taken here (none can commit between reading a queue and emptying it).
    derived := ledger_settle_pending();
    IF EXISTS (SELECT 1 FROM ledger_backfill) THEN
        BEGIN
            derived := derived + (ledger_settle_backfill(NULL)).appended;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'ledger settle: a slice of the queued backfill could not be settled, left queued: % (%)',
                SQLERRM, SQLSTATE;
        END;
    END IF;
    RETURN derived;
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

