-- The decision log: every decision of every guardrail (a stop, a skip and why, a clamp, an
-- exemption, an extension, a budget action, a notification), with who decided and why. The one
-- place that answers "why was this host stopped, and who extended it?". See docs/ledger.md.

CREATE TABLE decisions (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Idempotency: the invocation or event that decided, the kind and its subject. A retried
    -- invocation appends nothing new for a decision it already logged.
    decision_key text        NOT NULL UNIQUE CHECK (decision_key <> ''),
    at           timestamptz NOT NULL,
    kind         text        NOT NULL CHECK (kind ~ '^[a-z][a-z-]*$'),
    -- Who decided: a guardrail (reaper, deadline, launcher, budget) or a person's ARN.
    actor        text        NOT NULL CHECK (btrim(actor) <> ''),
    instance_id  text,
    tenant       text,
    reason       text        NOT NULL CHECK (btrim(reason) <> ''),
    details      jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(details) = 'object'),
    recorded_by  text        NOT NULL DEFAULT session_user,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX decisions_by_instance ON decisions (instance_id, at) WHERE instance_id IS NOT NULL;
CREATE INDEX decisions_by_tenant ON decisions (tenant, at) WHERE tenant IS NOT NULL;
CREATE INDEX decisions_by_time ON decisions (at);
CREATE TRIGGER decisions_append_only BEFORE UPDATE OR DELETE ON decisions
    FOR EACH ROW EXECUTE FUNCTION ledger_reject_change();
CREATE TRIGGER decisions_no_truncate BEFORE TRUNCATE ON decisions
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_reject_change();

-- Append decisions; a key already logged is a duplicate and changes nothing. Returns each key's
-- outcome: appended or duplicate.
CREATE FUNCTION ledger_append_decisions(
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

-- The budget's actions keep their once-per-period claims in guardrail_actions (claimed in the
-- transaction that acts); each claim is also a decision, in that same transaction, so a claim
-- that rolls back (the action failed) leaves no decision either.
CREATE FUNCTION ledger_decide_budget_action() RETURNS trigger
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
CREATE TRIGGER guardrail_actions_decide AFTER INSERT ON guardrail_actions
    FOR EACH ROW EXECUTE FUNCTION ledger_decide_budget_action();
CREATE TRIGGER guardrail_actions_append_only BEFORE UPDATE OR DELETE ON guardrail_actions
    FOR EACH ROW EXECUTE FUNCTION ledger_reject_change();

-- The actions recorded before this migration, as decisions.
INSERT INTO decisions (decision_key, at, kind, actor, tenant, reason, details)
SELECT 'guardrail-action:' || coalesce(once_key, id::text), at, guardrail || '-' || action, guardrail, tenant,
       reason,
       jsonb_strip_nulls(jsonb_build_object(
           'period_start', period_start, 'threshold', threshold, 'instance_ids', to_jsonb(instance_ids),
           'errors', errors, 'once_key', once_key))
FROM guardrail_actions
ORDER BY id;

DO $$
DECLARE
    schema_name text := current_schema();
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_append_decisions(text[], timestamptz[], text[], text[], text[], '
                   'text[], text[], jsonb[]) SET search_path = %I, pg_temp', schema_name);
    EXECUTE format('ALTER FUNCTION ledger_decide_budget_action() SET search_path = %I, pg_temp', schema_name);
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_append_decisions(text[], timestamptz[], text[], text[], text[], text[],
    text[], jsonb[]), ledger_decide_budget_action() FROM PUBLIC;
REVOKE ALL ON decisions FROM parkbrake_app;
GRANT SELECT ON decisions TO parkbrake_app;
GRANT EXECUTE ON FUNCTION ledger_append_decisions(text[], timestamptz[], text[], text[], text[], text[],
    text[], jsonb[]) TO parkbrake_app;
