-- Who may touch the inference service's tables (docs/inference.md): the service logs in as a member
-- of parkbrake_inference, which reads API keys and owns the idempotency rows but cannot make keys or
-- touch the ledger; `parkbrake keys` runs as parkbrake_app (the CLI's role), which makes and
-- revokes keys but never reads stored responses.
DO $$
BEGIN
    CREATE ROLE parkbrake_inference NOLOGIN;
EXCEPTION
    -- Roles are cluster-wide: another database of this cluster may have created it, or be doing so.
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;
DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO parkbrake_inference', current_schema());
END
$$;
GRANT SELECT ON inference_api_keys TO parkbrake_inference;
GRANT SELECT, INSERT, UPDATE, DELETE ON inference_idempotency TO parkbrake_inference;
GRANT SELECT, INSERT ON inference_api_keys TO parkbrake_app;
GRANT UPDATE (revoked_at) ON inference_api_keys TO parkbrake_app;
