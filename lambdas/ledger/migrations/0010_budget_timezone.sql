-- Budget periods in the tenant's time zone: a budget's days, weeks and months begin at the local
-- midnights of its IANA zone (guardrails.runway.period_bounds computes them, DST included); and a
-- budget can be removed. See docs/ledger.md.

ALTER TABLE budgets ADD COLUMN timezone text NOT NULL DEFAULT 'UTC';

DROP FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[]);

-- A tenant's budget, the actions it takes and its time zone, set as one change. A zone the server
-- does not know is refused (the CLI checks it against Python's time zone database first).
CREATE FUNCTION ledger_set_budget(who text, allowed text[], every text, limit_usd numeric,
                                  thresholds numeric[], zone text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM now() AT TIME ZONE zone;  -- raises invalid_parameter_value for an unknown zone
    INSERT INTO tenants (tenant, actions) VALUES (who, allowed)
    ON CONFLICT (tenant) DO UPDATE SET actions = excluded.actions;
    INSERT INTO budgets (tenant, period, limit_usd, soft_thresholds, timezone)
    VALUES (who, every, limit_usd, thresholds, zone)
    ON CONFLICT (tenant) DO UPDATE
    SET period = excluded.period, limit_usd = excluded.limit_usd,
        soft_thresholds = excluded.soft_thresholds, timezone = excluded.timezone, updated_at = now();
END
$$;

-- Remove a tenant's budget: its usage is still metered, nothing is enforced. True if it had one.
CREATE FUNCTION ledger_remove_budget(who text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER AS $$
    WITH removed AS (DELETE FROM budgets WHERE tenant = who RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM removed)
$$;

DO $$
DECLARE
    schema_name text := current_schema();
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], text) '
                   'SET search_path = %I, pg_temp', schema_name);
    EXECUTE format('ALTER FUNCTION ledger_remove_budget(text) SET search_path = %I, pg_temp', schema_name);
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], text),
    ledger_remove_budget(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], text),
    ledger_remove_budget(text) TO parkbrake_app;
