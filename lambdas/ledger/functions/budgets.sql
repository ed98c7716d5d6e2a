-- Budgets: a tenant's budget, its actions and time zone, set or removed by `parkbrake ledger budget`.
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- A tenant's budget set by hand (`parkbrake ledger budget`): the actions it takes, its time zone
-- and its optional GPU-hour limit, as one change; its source becomes 'hand' (what the stack last
-- declared is kept, so a later change in the stack is seen as a conflict). A zone the server does
-- not know is refused (the CLI checks it against Python's time zone database first).
CREATE OR REPLACE FUNCTION ledger_set_budget(who text, allowed text[], every text, limit_usd numeric,
                                             thresholds numeric[], zone text, gpu_hours numeric)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM now() AT TIME ZONE zone;  -- raises invalid_parameter_value for an unknown zone
    INSERT INTO tenants (tenant, actions) VALUES (who, allowed)
    ON CONFLICT (tenant) DO UPDATE SET actions = excluded.actions;
    INSERT INTO budgets (tenant, period, limit_usd, soft_thresholds, timezone, gpu_hours, source)
    VALUES (who, every, limit_usd, thresholds, zone, gpu_hours, 'hand')
    ON CONFLICT (tenant) DO UPDATE
    SET period = excluded.period, limit_usd = excluded.limit_usd,
        soft_thresholds = excluded.soft_thresholds, timezone = excluded.timezone,
        gpu_hours = excluded.gpu_hours, source = 'hand', updated_at = now();
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], '
                   'text, numeric) SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], text, numeric)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], text, numeric)
    TO parkbrake_app;

-- The budget stack `stack` declares for `who` (Pulumi.<stack>.yaml: monthly_budget_usd, and
-- monthly_gpu_hours or NULL), applied unless a person changed it since: what became of it.
--   set           the tenant had no budget: the stack's, monthly, in UTC, notify and deny
--   updated       the stack's budget, changed in the stack: changed here
--   unchanged     the budget already is what the stack declares (its source becomes the stack)
--   kept-by-hand  set by hand since; the stack still declares what it did then: the hand's stands
--   conflict      set by hand, and the stack declares something else since (or never declared it
--                 before): nothing changes; a person decides (ledger budget --from-stack … --replace-hand)
--   replaced-hand set by hand, replaced by the stack's because replace_hand was asked for
-- Only the limits come from the stack; the period, zone, thresholds and actions stay as they are.
CREATE OR REPLACE FUNCTION ledger_apply_stack_budget(who text, stack text, declared_usd numeric,
                                                     declared_gpu_hours numeric, replace_hand boolean)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    existing budgets%ROWTYPE;
BEGIN
    INSERT INTO tenants (tenant) VALUES (who) ON CONFLICT (tenant) DO NOTHING;
    SELECT * INTO existing FROM budgets b WHERE b.tenant = who FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO budgets (tenant, limit_usd, gpu_hours, source, stack_name, stack_limit_usd, stack_gpu_hours)
        VALUES (who, declared_usd, declared_gpu_hours, 'stack', stack, declared_usd, declared_gpu_hours);
        RETURN 'set';
    END IF;
    IF existing.limit_usd = declared_usd AND existing.gpu_hours IS NOT DISTINCT FROM declared_gpu_hours THEN
        UPDATE budgets b SET source = 'stack', stack_name = stack, stack_limit_usd = declared_usd,
                             stack_gpu_hours = declared_gpu_hours
        WHERE b.tenant = who AND (b.source, b.stack_name, b.stack_limit_usd, b.stack_gpu_hours)
              IS DISTINCT FROM ('stack', stack, declared_usd, declared_gpu_hours);
        RETURN 'unchanged';
    END IF;
    IF existing.source = 'hand' AND NOT replace_hand THEN
        IF existing.stack_limit_usd IS NOT DISTINCT FROM declared_usd
           AND existing.stack_gpu_hours IS NOT DISTINCT FROM declared_gpu_hours THEN
            RETURN 'kept-by-hand';
        END IF;
        RETURN 'conflict';
    END IF;
    UPDATE budgets b SET limit_usd = declared_usd,
                         gpu_hours = declared_gpu_hours, source = 'stack',
                         stack_name = stack, stack_limit_usd = declared_usd,
                         stack_gpu_hours = declared_gpu_hours, updated_at = now()
    WHERE b.tenant = who;
    RETURN CASE WHEN existing.source = 'stack' THEN 'updated' ELSE 'replaced-hand' END;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_apply_stack_budget(text, text, numeric, numeric, boolean) '
                   'SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_apply_stack_budget(text, text, numeric, numeric, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_apply_stack_budget(text, text, numeric, numeric, boolean) TO parkbrake_app;

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
