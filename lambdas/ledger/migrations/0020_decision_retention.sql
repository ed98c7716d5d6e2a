-- Retention of the decision log (about 290,000 rows a day at 1,000 hosts): decisions older than the
-- configured retention are deleted in bounded batches by ledger_prune_decisions, the one way any row
-- of it is ever removed. Every other UPDATE, DELETE or TRUNCATE is still refused. See docs/ledger.md.

-- The append-only guard of decisions, with one exception: a DELETE by the ledger's owner (which
-- ledger_prune_decisions runs as) of a row decided and recorded before the cutoff that function set
-- for its own transaction. The app role holds no DELETE on the table; if it ever did, it would still
-- be refused here, since it is not the owner.
CREATE FUNCTION ledger_decisions_guard() RETURNS trigger
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
DROP TRIGGER decisions_append_only ON decisions;
CREATE TRIGGER decisions_append_only BEFORE UPDATE OR DELETE ON decisions
    FOR EACH ROW EXECUTE FUNCTION ledger_decisions_guard();

-- Delete at most batch_size decisions older than retention (by when they were decided and when they
-- were recorded: a backfill of old events keeps its fresh decisions), oldest first; returns how many.
-- A retention under 13 months (396 days) is refused here too, so the app role that calls this can
-- never shorten the audit trail below what billing needs.
CREATE FUNCTION ledger_prune_decisions(retention interval, batch_size integer) RETURNS bigint
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
DECLARE
    schema_name text := current_schema();
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_prune_decisions(interval, integer) SET search_path = %I, pg_temp',
                   schema_name);
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_prune_decisions(interval, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_prune_decisions(interval, integer) TO parkbrake_app;
