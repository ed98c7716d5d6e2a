-- The decision log: appending decisions, the budget's claims as decisions, its append-only guard and
-- its retention. See docs/ledger.md (*Nothing lost*).
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- Append decisions; a key already logged is a duplicate and changes nothing. Returns each key's
-- outcome: appended or duplicate.
CREATE OR REPLACE FUNCTION ledger_append_decisions(
    keys text[], moments timestamptz[], kinds text[], actors text[], instance_ids text[], tenant_names text[],
    reasons text[], detail_documents jsonb[]
) RETURNS TABLE (decision_key text, outcome text)
LANGUAGE sql SECURITY DEFINER AS $$
    WITH inserted AS (
        INSERT INTO decisions (decision_key, at, kind, actor, instance_id, tenant, reason, details)
        SELECT * FROM unnest(keys, moments, kinds, actors, instance_ids, tenant_names, reasons, detail_documents)
        ON CONFLICT (decision_key) DO NOTHING
        RETURNING decisions.decision_key
    )
    SELECT k.key, CASE WHEN k.key IN (SELECT i.decision_key FROM inserted i) THEN 'appended' ELSE 'duplicate' END
    FROM unnest(keys) AS k (key)
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_append_decisions(text[], timestamptz[], text[], text[], text[], '
                   'text[], text[], jsonb[]) SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_append_decisions(text[], timestamptz[], text[], text[], text[], text[],
    text[], jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_append_decisions(text[], timestamptz[], text[], text[], text[], text[],
    text[], jsonb[]) TO parkbrake_app;

-- The budget's actions keep their once-per-period claims in guardrail_actions (claimed in the
-- transaction that acts); each claim is also a decision, in that same transaction, so a claim
-- that rolls back (the action failed) leaves no decision either.
CREATE OR REPLACE FUNCTION ledger_decide_budget_action() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    INSERT INTO decisions (decision_key, at, kind, actor, tenant, reason, details)
    VALUES (
        'guardrail-action:' || coalesce(NEW.once_key, NEW.id::text), NEW.at, NEW.guardrail || '-' || NEW.action,
        NEW.guardrail, NEW.tenant, NEW.reason,
        jsonb_strip_nulls(jsonb_build_object(
            'period_start', NEW.period_start, 'threshold', NEW.threshold,
            'instance_ids', to_jsonb(NEW.instance_ids), 'errors', NEW.errors, 'once_key', NEW.once_key))
    )
    ON CONFLICT (decision_key) DO NOTHING;
    RETURN NULL;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_decide_budget_action() SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_decide_budget_action() FROM PUBLIC;

-- The append-only guard of decisions, with one exception: a DELETE by the ledger's owner (which
-- ledger_prune_decisions runs as) of a row decided and recorded before the cutoff that function set
-- for its own transaction. The app role holds no DELETE on the table; if it ever did, it would still
-- be refused here, since it is not the owner. Its EXECUTE was never revoked from PUBLIC, unlike the
-- other functions': a trigger function cannot be called, only fired.
CREATE OR REPLACE FUNCTION ledger_decisions_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    cutoff timestamptz := nullif(current_setting('parkbrake.prune_decisions_before', true), '')::timestamptz;
BEGIN
    IF TG_OP = 'DELETE' AND cutoff IS NOT NULL AND OLD.at < cutoff AND OLD.recorded_at < cutoff
       AND current_user = (SELECT pg_get_userbyid(relowner) FROM pg_catalog.pg_class WHERE oid = TG_RELID) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'decisions leave the log only through ledger_prune_decisions, past the retention';
END
$$;

-- Delete at most batch_size decisions older than retention (by when they were decided and when they
-- were recorded: a backfill of old events keeps its fresh decisions), oldest first; returns how many.
-- A retention under 13 months (396 days) is refused here too, so the app role that calls this can
-- never shorten the audit trail below what billing needs.
CREATE OR REPLACE FUNCTION ledger_prune_decisions(retention interval, batch_size integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    cutoff timestamptz := now() - retention;
    removed bigint;
BEGIN
    IF retention IS NULL OR retention < interval '396 days' THEN
        RAISE EXCEPTION 'a decision retention of % is under the 13-month floor (396 days)', retention
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_size IS NULL OR batch_size NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'a batch of % decisions is outside 1 to 100000', batch_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('parkbrake.prune_decisions_before', cutoff::text, true);
    DELETE FROM decisions
    WHERE id IN (
        SELECT id FROM decisions WHERE at < cutoff AND recorded_at < cutoff ORDER BY at LIMIT batch_size
    );
    GET DIAGNOSTICS removed = ROW_COUNT;
    PERFORM set_config('parkbrake.prune_decisions_before', '', true);
    RETURN removed;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_prune_decisions(interval, integer) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_prune_decisions(interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_prune_decisions(interval, integer) TO parkbrake_app;
