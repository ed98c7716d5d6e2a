-- Closed periods (docs/ledger.md, "Closed periods"): `parkbrake ledger close` (or the reconciler,
-- after `ledger.close_grace`) keeps a tenant's invoice for a month exactly as it was when closed.
-- A close is one row of period_closes and its lines in closed_invoice_lines, both append-only: a
-- closed month never changes, and usage that arrives for it later is billed in the first open
-- month after it, as lines marked late for the difference (lambdas/ledger/closes.py).

CREATE TABLE period_closes (
    tenant      text        NOT NULL,
    period      text        NOT NULL CHECK (period ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    zone        text        NOT NULL,  -- the tenant's budget time zone when it was closed
    since       timestamptz NOT NULL,
    until       timestamptz NOT NULL CHECK (until > since),
    closed_at   timestamptz NOT NULL DEFAULT statement_timestamp() CHECK (closed_at >= until),
    actor       text        NOT NULL CHECK (actor <> ''),
    PRIMARY KEY (tenant, period)
);

-- The lines of each closed invoice: the period's own (late false, service_period = period) and the
-- late lines it billed for earlier closed months (late true, service_period earlier).
CREATE TABLE closed_invoice_lines (
    tenant           text        NOT NULL,
    period           text        NOT NULL,
    line_no          integer     NOT NULL,
    service_period   text        NOT NULL,
    late             boolean     NOT NULL,
    pool             text        NOT NULL,
    instance_type    text        NOT NULL,
    region           text        NOT NULL,
    pricing_model    text        NOT NULL,
    usd_per_hour     numeric,
    price_source     text,
    price_valid_from timestamptz,
    price_basis      text,
    billed_ms        bigint      NOT NULL,
    accelerator_ms   bigint      NOT NULL,
    usd_hour_ms      numeric     NOT NULL,
    PRIMARY KEY (tenant, period, line_no),
    FOREIGN KEY (tenant, period) REFERENCES period_closes (tenant, period),
    CHECK (late = (service_period < period))
);
CREATE INDEX closed_invoice_lines_service ON closed_invoice_lines (tenant, service_period);

CREATE TRIGGER period_closes_append_only BEFORE UPDATE OR DELETE ON period_closes
    FOR EACH ROW EXECUTE FUNCTION ledger_reject_change();
CREATE TRIGGER period_closes_no_truncate BEFORE TRUNCATE ON period_closes
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_reject_change();
CREATE TRIGGER closed_invoice_lines_append_only BEFORE UPDATE OR DELETE ON closed_invoice_lines
    FOR EACH ROW EXECUTE FUNCTION ledger_reject_change();
CREATE TRIGGER closed_invoice_lines_no_truncate BEFORE TRUNCATE ON closed_invoice_lines
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_reject_change();

-- The CLI and the reconciler close as the app role: they may add a close, never change one.
GRANT SELECT, INSERT ON period_closes, closed_invoice_lines TO parkbrake_app;
