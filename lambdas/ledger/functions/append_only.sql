-- What makes the ledger's history tables append-only.
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- Refuses every UPDATE, DELETE and TRUNCATE, even the owner's: the triggers of events, prices,
-- price_changes and guardrail_actions call it, and the decision log's TRUNCATE trigger (its
-- UPDATE and DELETE trigger is ledger_decisions_guard, decisions.sql).
CREATE OR REPLACE FUNCTION ledger_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'record a new event instead; the ledger never rewrites history';
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_reject_change() FROM PUBLIC;
