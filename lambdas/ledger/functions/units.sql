-- The ledger's units: integer epoch milliseconds, the order of states within one millisecond, and
-- AWS's billable time. Must match guardrails/ledger.py (tests/lambdas/ledger proves they agree).
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- Integer epoch milliseconds; ±2^62 stand for ±infinity so range arithmetic never overflows. The
-- epoch is read from the UTC wall time: extract() of a timestamptz is STABLE, and an IMMUTABLE SQL
-- function calling it is never inlined, so every price range and spot look-up would call it row by
-- row (2,500 calls, 7.5 ms, per 1,000 events settled). Both functions here are IMMUTABLE, so the
-- planner inlines it.
CREATE OR REPLACE FUNCTION ledger_ms(moment timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN moment = '-infinity' THEN -4611686018427387904
        WHEN moment = 'infinity' THEN 4611686018427387904
        ELSE floor(extract(epoch FROM moment AT TIME ZONE 'UTC') * 1000)::bigint
    END
$$;
REVOKE EXECUTE ON FUNCTION ledger_ms(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_ms(timestamptz) TO parkbrake_app;

-- Order of states that share one millisecond: a host seen running and stopped at the same instant
-- ran for zero time (and is billed AWS's minimum), it did not restart.
CREATE OR REPLACE FUNCTION ledger_state_rank(state text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_position(
        ARRAY['pending', 'running', 'stopping', 'stopped', 'shutting-down', 'terminated'], state)
$$;
REVOKE EXECUTE ON FUNCTION ledger_state_rank(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_state_rank(text) TO parkbrake_app;

-- AWS's per-second billing with its 60-second minimum per start.
CREATE OR REPLACE FUNCTION ledger_billable_ms(elapsed_ms bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT greatest(60000, (elapsed_ms + 999) / 1000 * 1000)
$$;
REVOKE EXECUTE ON FUNCTION ledger_billable_ms(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_billable_ms(bigint) TO parkbrake_app;
