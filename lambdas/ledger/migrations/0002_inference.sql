-- The inference service's tables: API keys per tenant (hashed) and stored idempotent responses.
-- See docs/inference.md. Self-contained: nothing here refers to the ledger's tables.

CREATE TABLE inference_api_keys (
    id          text PRIMARY KEY,                -- public, printed by `parkbrake keys list`
    tenant      text NOT NULL CHECK (tenant <> ''),
    key_sha256  bytea NOT NULL UNIQUE,           -- the key itself is shown once and never stored
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);

CREATE INDEX inference_api_keys_tenant ON inference_api_keys (tenant);

-- One row per (tenant, endpoint, Idempotency-Key). A row is claimed by one atomic
-- INSERT ... ON CONFLICT DO UPDATE ... WHERE, which only takes over a row whose lease lapsed (a worker
-- died mid-request) or whose retention ended; `owner` is the claim's token, so a worker whose lease was
-- taken over cannot overwrite the new owner's result.
CREATE TABLE inference_idempotency (
    tenant       text NOT NULL,
    endpoint     text NOT NULL,
    key          text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint  text NOT NULL,
    owner        uuid NOT NULL,
    state        text NOT NULL CHECK (state IN ('running', 'done')),
    claimed_at   timestamptz NOT NULL,
    lease_until  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    status       integer,
    headers      jsonb,
    body         bytea,
    compressed   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, endpoint, key),
    CHECK (state = 'running' OR (status IS NOT NULL AND body IS NOT NULL))
);

-- The retention sweeper deletes in batches, oldest expiry first.
CREATE INDEX inference_idempotency_expiry ON inference_idempotency (expires_at);
