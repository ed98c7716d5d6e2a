-- Budgets: a tenant's budget, its actions and time zone, set or removed by `parkbrake ledger budget`.
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- A tenant's budget, the actions it takes and its time zone, set as one change. A zone the server
-- does not know is refused (the CLI checks it against Python's time zone database first).
CREATE OR REPLACE FUNCTION ledger_set_budget(who text, allowed text[], every text, limit_usd numeric,
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
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], '
                   'text) SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], text) TO parkbrake_app;

-- Remove a tenant's budget: its usage is still metered, nothing is enforced. True if it had one.
CREATE OR REPLACE FUNCTION ledger_remove_budget(who text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER AS $$
    WITH removed AS (DELETE FROM budgets WHERE tenant = who RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM removed)
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_remove_budget(text) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_remove_budget(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_remove_budget(text) TO parkbrake_app;
