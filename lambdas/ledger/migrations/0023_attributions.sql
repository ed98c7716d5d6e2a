-- What an operator says of a host's usage the ledger holds as `unattributed` (`parkbrake ledger
-- attribute`): from since_ms to until_ms (2^62: on), its events of tenant `unattributed` are
-- metered for this tenant (and this pool; NULL keeps the events' own). An event that says whose
-- its launch was (docs/ledger.md, *Metering*) takes precedence. The ledger is a function of its
-- events and these rows: deriving reads them, so an attribution given before or after the events
-- it covers gives the same intervals. One row per host and start: an attribution from the same
-- instant replaces the earlier one (each is also logged as a decision, kind `attribute`).
CREATE TABLE attributions (
    instance_id text        NOT NULL,
    since_ms    bigint      NOT NULL,
    until_ms    bigint      NOT NULL,
    tenant      text        NOT NULL CHECK (tenant <> 'unattributed'),
    pool        text,
    actor       text        NOT NULL,
    reason      text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (instance_id, since_ms),
    CHECK (since_ms < until_ms)
);
REVOKE ALL ON attributions FROM PUBLIC;
GRANT SELECT ON attributions TO parkbrake_app;
