-- The usage ledger: state transitions of accelerator hosts, prices in effect, tenants and their
-- budgets, and the guardrails' actions. See docs/ledger.md for the rules these tables encode.
--
-- Times are timestamptz at millisecond precision; derived usage is integer milliseconds; money is
-- NUMERIC. The rules that turn transitions into intervals and intervals into cost live twice, here
-- and in guardrails/ledger.py, and tests/lambdas/ledger proves they agree.

-- Integer epoch milliseconds; ±2^62 stand for ±infinity so range arithmetic never overflows.
CREATE FUNCTION ledger_ms(moment timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN moment = '-infinity' THEN -4611686018427387904
        WHEN moment = 'infinity' THEN 4611686018427387904
        ELSE floor(extract(epoch FROM moment) * 1000)::bigint
    END
$$;

-- Order of states that share one millisecond: a host seen running and stopped at the same instant
-- ran for zero time (and is billed AWS's minimum), it did not restart.
CREATE FUNCTION ledger_state_rank(state text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_position(
        ARRAY['pending', 'running', 'stopping', 'stopped', 'shutting-down', 'terminated'], state)
$$;

-- AWS's per-second billing with its 60-second minimum per start.
CREATE FUNCTION ledger_billable_ms(elapsed_ms bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT greatest(60000, (elapsed_ms + 999) / 1000 * 1000)
$$;

-- Every state change of every metered host, keyed by the EventBridge event id. Append-only.
CREATE TABLE events (
    event_id      text        PRIMARY KEY,
    instance_id   text        NOT NULL,
    state         text        NOT NULL CHECK (ledger_state_rank(state) IS NOT NULL),
    event_time    timestamptz NOT NULL CHECK (date_trunc('milliseconds', event_time) = event_time),
    -- Attribution as the host's tags and type said when the event was metered.
    tenant        text        NOT NULL,
    pool          text        NOT NULL,
    instance_type text        NOT NULL,
    accelerators  integer     NOT NULL CHECK (accelerators >= 0),
    cap_ms        bigint      CHECK (cap_ms > 0),  -- parkbrake:max-runtime; NULL: the default cap
    region        text        NOT NULL,
    source        text        NOT NULL,            -- meter (EventBridge) or ingest (backfill)
    received_at   timestamptz NOT NULL DEFAULT now(),
    -- The derivation's sort key, stored so that it is read in order from an index, never sorted.
    at_ms         bigint      GENERATED ALWAYS AS (ledger_ms(event_time)) STORED,
    state_rank    smallint    GENERATED ALWAYS AS (ledger_state_rank(state)) STORED
);
-- Deriving an instance's intervals reads its events in exactly this order.
CREATE INDEX events_by_instance ON events (instance_id, at_ms, state_rank, event_id COLLATE "C");

CREATE FUNCTION ledger_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'record a new event instead; the ledger never rewrites history';
END
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION ledger_reject_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_reject_change();

-- An interval: one start of one host, open (ended_ms NULL) while it runs.
CREATE TYPE ledger_interval AS (
    opened_by text, instance_id text, tenant text, pool text, instance_type text, accelerators integer,
    cap_ms bigint, started_ms bigint, ended_ms bigint, closed_by text
);
-- Where a host's history is read from: after this event (in derivation order). A cut is always at
-- an interval's closing event (or before all events), where nothing is open.
CREATE TYPE ledger_cut AS (instance_id text, at_ms bigint, state_rank smallint, event_id text);

-- Intervals derived from the events of some hosts after their cuts. Must match
-- guardrails.ledger.intervals_from. Ties are broken by state rank, then by event id in byte order,
-- as Python compares strings.
CREATE FUNCTION ledger_derive_intervals(cuts ledger_cut[]) RETURNS SETOF ledger_interval
LANGUAGE sql STABLE AS $$
    WITH transitions AS (
        SELECT e.event_id, e.instance_id, e.at_ms, e.state_rank, e.tenant, e.pool, e.instance_type,
               e.accelerators, e.cap_ms,
               e.state = 'running' AS is_running,
               lag(e.state = 'running') OVER by_time AS after_running
        FROM unnest(cuts) AS cut
        JOIN events e ON e.instance_id = cut.instance_id
                     AND (e.at_ms, e.state_rank, e.event_id COLLATE "C")
                         > (cut.at_ms, cut.state_rank, cut.event_id COLLATE "C")
        WHERE e.state <> 'pending'
        WINDOW by_time AS (PARTITION BY e.instance_id ORDER BY e.at_ms, e.state_rank, e.event_id COLLATE "C")
    ), boundaries AS (
        -- A start is a running after anything but running; an end is the first stop after a running.
        SELECT t.*,
               lead(t.at_ms) OVER by_time AS next_ms,
               lead(t.event_id) OVER by_time AS next_event_id
        FROM transitions t
        WHERE t.is_running <> coalesce(t.after_running, false)
        WINDOW by_time AS (PARTITION BY t.instance_id ORDER BY t.at_ms, t.state_rank, t.event_id COLLATE "C")
    )
    SELECT event_id, instance_id, tenant, pool, instance_type, accelerators, cap_ms, at_ms, next_ms,
           next_event_id
    FROM boundaries
    WHERE is_running
$$;

-- The derived intervals, materialised host by host whenever a host gets a new event
-- (ledger_refresh_intervals). Reports read it; the rollups further down are kept from it.
CREATE TABLE intervals (
    opened_by       text    PRIMARY KEY,
    instance_id     text    NOT NULL,
    tenant          text    NOT NULL,
    pool            text    NOT NULL,
    instance_type   text    NOT NULL,
    accelerators    integer NOT NULL,
    cap_ms          bigint,
    started_ms      bigint  NOT NULL,
    ended_ms        bigint,
    closed_by       text,
    -- Where AWS's bill for this start ends; NULL while the host runs.
    billed_until_ms bigint GENERATED ALWAYS AS (
        CASE WHEN ended_ms IS NOT NULL THEN started_ms + ledger_billable_ms(ended_ms - started_ms) END
    ) STORED
);
-- A refresh finds a host's last interval that ended before its new events, and the ones after it.
CREATE INDEX intervals_by_instance ON intervals (instance_id, ended_ms);
-- A tenant's report for a window: its closed intervals billed past the window's start (a range of
-- this index) and its open ones (billed_until_ms IS NULL, also in this index).
CREATE INDEX intervals_by_tenant ON intervals (tenant, billed_until_ms);
-- What runs now, per tenant: runway's burn and commitment, the exporter's running GPUs.
CREATE INDEX intervals_running ON intervals (tenant) WHERE billed_until_ms IS NULL;

-- Hourly on-demand prices. A row is in effect from valid_from until the next row of the same type,
-- so ranges never overlap and a price change starts a new range instead of editing an old one.
CREATE TABLE prices (
    instance_type text          NOT NULL,
    valid_from    timestamptz   NOT NULL
        CHECK (NOT isfinite(valid_from) OR date_trunc('milliseconds', valid_from) = valid_from),
    usd_per_hour  numeric(14, 6) NOT NULL CHECK (usd_per_hour >= 0),
    source        text          NOT NULL,
    recorded_at   timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (instance_type, valid_from)
);
CREATE TRIGGER prices_append_only BEFORE UPDATE OR DELETE ON prices
    FOR EACH ROW EXECUTE FUNCTION ledger_reject_change();

CREATE VIEW price_ranges AS
SELECT instance_type, usd_per_hour, valid_from,
       ledger_ms(valid_from) AS from_ms,
       coalesce(ledger_ms(lead(valid_from) OVER by_type), 4611686018427387904) AS until_ms
FROM prices
WINDOW by_type AS (PARTITION BY instance_type ORDER BY valid_from);

-- Usage of closed intervals per tenant, pool and instance type, kept up to date by
-- ledger_refresh_intervals: all-time totals (the exporter's counters) cost one row per key plus the
-- hosts running now, never a scan of history. Exact: accelerator-ms and Σ price × billed ms.
CREATE TABLE usage_totals (
    tenant         text    NOT NULL,
    pool           text    NOT NULL,
    instance_type  text    NOT NULL,
    accelerator_ms numeric NOT NULL,
    usd_hour_ms    numeric NOT NULL,
    PRIMARY KEY (tenant, pool, instance_type)
);

-- Cost of closed intervals per tenant, UTC day and instance type. Every budget period starts at a
-- UTC midnight, so a tenant's spend in its period is at most 31 days of rows (per instance type)
-- plus its running hosts: runway for every tenant stays cheap however long the history.
CREATE TABLE spend_daily (
    tenant        text    NOT NULL,
    day_ms        bigint  NOT NULL,  -- the day's UTC midnight
    instance_type text    NOT NULL,
    usd_hour_ms   numeric NOT NULL,
    PRIMARY KEY (tenant, day_ms, instance_type)
);
-- Every tenant's spend at once (the exporter): one index-only range over the recent days.
CREATE INDEX spend_daily_by_day ON spend_daily (day_ms, tenant) INCLUDE (usd_hour_ms);

-- The rollups' rows.
CREATE TYPE ledger_usage AS (
    tenant text, pool text, instance_type text, accelerator_ms numeric, usd_hour_ms numeric
);
CREATE TYPE ledger_day_spend AS (tenant text, day_ms bigint, instance_type text, usd_hour_ms numeric);

-- What some closed intervals add to usage_totals.
CREATE FUNCTION ledger_usage_of(spans ledger_interval[]) RETURNS SETOF ledger_usage
LANGUAGE sql STABLE AS $$
    WITH closed AS (
        SELECT s.*, s.started_ms + ledger_billable_ms(s.ended_ms - s.started_ms) AS billed_until_ms
        FROM unnest(spans) AS s
        WHERE s.ended_ms IS NOT NULL
    ), used AS (
        SELECT tenant, pool, instance_type,
               sum(accelerators::bigint * (ended_ms - started_ms))::numeric AS accelerator_ms
        FROM closed
        GROUP BY tenant, pool, instance_type
    ), cost AS (
        SELECT c.tenant, c.pool, c.instance_type,
               sum(p.usd_per_hour * (least(c.billed_until_ms, p.until_ms) - greatest(c.started_ms, p.from_ms)))
                   AS usd_hour_ms
        FROM closed c
        JOIN price_ranges p ON p.instance_type = c.instance_type
                           AND p.from_ms < c.billed_until_ms AND p.until_ms > c.started_ms
        GROUP BY c.tenant, c.pool, c.instance_type
    )
    SELECT u.tenant, u.pool, u.instance_type, u.accelerator_ms, coalesce(c.usd_hour_ms, 0)
    FROM used u
    LEFT JOIN cost c USING (tenant, pool, instance_type)
$$;

-- What some closed intervals add to spend_daily: their billed time cut at each UTC midnight.
CREATE FUNCTION ledger_daily_spend_of(spans ledger_interval[]) RETURNS SETOF ledger_day_spend
LANGUAGE sql STABLE AS $$
    WITH closed AS (
        SELECT s.tenant, s.instance_type, s.started_ms,
               s.started_ms + ledger_billable_ms(s.ended_ms - s.started_ms) AS billed_until_ms
        FROM unnest(spans) AS s
        WHERE s.ended_ms IS NOT NULL
    ), parts AS (
        SELECT c.*, day.ms AS day_ms
        FROM closed c
        CROSS JOIN LATERAL generate_series(c.started_ms / 86400000 * 86400000, c.billed_until_ms - 1,
                                           86400000::bigint) AS day (ms)
    )
    SELECT x.tenant, x.day_ms, x.instance_type,
           sum(p.usd_per_hour * (least(x.billed_until_ms, x.day_ms + 86400000, p.until_ms)
                                 - greatest(x.started_ms, x.day_ms, p.from_ms)))
    FROM parts x
    JOIN price_ranges p ON p.instance_type = x.instance_type
                       AND p.from_ms < least(x.billed_until_ms, x.day_ms + 86400000)
                       AND p.until_ms > greatest(x.started_ms, x.day_ms)
    GROUP BY x.tenant, x.day_ms, x.instance_type
$$;

-- Move the rollups by what ``added`` intervals bring and ``gone`` ones took. Each upsert runs in key
-- order, so concurrent refreshes lock rollup rows in one order and never deadlock.
-- (PL/pgSQL, unlike a SQL function, keeps its statements' plans for the session: refreshes are hot.)
CREATE FUNCTION ledger_move_rollups(added ledger_interval[], gone ledger_interval[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_totals AS total (tenant, pool, instance_type, accelerator_ms, usd_hour_ms)
    SELECT tenant, pool, instance_type, sum(accelerator_ms), sum(usd_hour_ms)
    FROM (
        SELECT * FROM ledger_usage_of(added)
        UNION ALL
        SELECT tenant, pool, instance_type, -accelerator_ms, -usd_hour_ms FROM ledger_usage_of(gone)
    ) AS delta
    GROUP BY tenant, pool, instance_type
    HAVING sum(accelerator_ms) <> 0 OR sum(usd_hour_ms) <> 0
    ORDER BY tenant, pool, instance_type
    ON CONFLICT (tenant, pool, instance_type) DO UPDATE
    SET accelerator_ms = total.accelerator_ms + excluded.accelerator_ms,
        usd_hour_ms = total.usd_hour_ms + excluded.usd_hour_ms;
    INSERT INTO spend_daily AS spend (tenant, day_ms, instance_type, usd_hour_ms)
    SELECT tenant, day_ms, instance_type, sum(usd_hour_ms)
    FROM (
        SELECT * FROM ledger_daily_spend_of(added)
        UNION ALL
        SELECT tenant, day_ms, instance_type, -usd_hour_ms FROM ledger_daily_spend_of(gone)
    ) AS delta
    GROUP BY tenant, day_ms, instance_type
    HAVING sum(usd_hour_ms) <> 0
    ORDER BY tenant, day_ms, instance_type
    ON CONFLICT (tenant, day_ms, instance_type) DO UPDATE
    SET usd_hour_ms = spend.usd_hour_ms + excluded.usd_hour_ms;
END
$$;

-- Derive again the intervals of some hosts that got new events, change only the intervals that
-- differ, and move the rollups by them. ``earliest_ms`` is, per host, its earliest new event: the
-- intervals that ended before it cannot change, so each host is read from the end of the last of
-- them, and a refresh costs what is new, not a host's whole history. The caller holds the hosts'
-- advisory locks. Prices are read under a shared advisory lock that ledger_add_price takes
-- exclusively, so no rollup is ever computed with a price that is being added.
CREATE FUNCTION ledger_refresh_intervals(instance_ids text[], earliest_ms bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cuts ledger_cut[];
    stored ledger_interval[];
    derived ledger_interval[];
    gone ledger_interval[];
    added ledger_interval[];
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake prices', 0));
    SELECT array_agg(ROW(host.instance_id, coalesce(kept.ended_ms, -4611686018427387904),
                         coalesce(kept.state_rank, 0), coalesce(kept.closed_by, ''))::ledger_cut)
    INTO cuts
    FROM unnest(instance_ids, earliest_ms) AS host (instance_id, earliest_ms)
    LEFT JOIN LATERAL (
        SELECT i.ended_ms, i.closed_by, e.state_rank
        FROM intervals i
        JOIN events e ON e.event_id = i.closed_by
        WHERE i.instance_id = host.instance_id AND i.ended_ms < host.earliest_ms
        ORDER BY i.ended_ms DESC
        LIMIT 1
    ) AS kept ON true;
    SELECT coalesce(array_agg(ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type,
                                  i.accelerators, i.cap_ms, i.started_ms, i.ended_ms,
                                  i.closed_by)::ledger_interval), '{}')
    INTO stored
    FROM unnest(instance_ids, earliest_ms) AS host (instance_id, earliest_ms)
    JOIN intervals i ON i.instance_id = host.instance_id
                    AND (i.ended_ms IS NULL OR i.ended_ms >= host.earliest_ms);
    SELECT coalesce(array_agg(d), '{}') INTO derived FROM ledger_derive_intervals(cuts) AS d;
    SELECT coalesce(array_agg(ROW(x.*)::ledger_interval), '{}')
    INTO gone FROM (SELECT * FROM unnest(stored) EXCEPT ALL SELECT * FROM unnest(derived)) AS x;
    SELECT coalesce(array_agg(ROW(x.*)::ledger_interval), '{}')
    INTO added FROM (SELECT * FROM unnest(derived) EXCEPT ALL SELECT * FROM unnest(stored)) AS x;
    IF cardinality(gone) = 0 AND cardinality(added) = 0 THEN
        RETURN;
    END IF;
    DELETE FROM intervals WHERE opened_by IN (SELECT g.opened_by FROM unnest(gone) AS g);
    INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                           started_ms, ended_ms, closed_by)
    SELECT * FROM unnest(added);
    PERFORM ledger_move_rollups(added, gone);
END
$$;

-- Closed intervals of one instance type (or of all, NULL), a tenant at a time: for recounting.
CREATE FUNCTION ledger_closed_by_tenant(kind text) RETURNS TABLE (tenant text, spans ledger_interval[])
LANGUAGE sql STABLE AS $$
    SELECT i.tenant, array_agg(ROW(i.opened_by, i.instance_id, i.tenant, i.pool, i.instance_type,
                                   i.accelerators, i.cap_ms, i.started_ms, i.ended_ms,
                                   i.closed_by)::ledger_interval)
    FROM intervals i
    WHERE i.ended_ms IS NOT NULL AND (kind IS NULL OR i.instance_type = kind)
    GROUP BY i.tenant
$$;

-- Count the rollups again from the intervals (of one instance type, or of all).
CREATE FUNCTION ledger_recount_rollups(kind text) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM usage_totals WHERE kind IS NULL OR instance_type = kind;
    DELETE FROM spend_daily WHERE kind IS NULL OR instance_type = kind;
    INSERT INTO usage_totals (tenant, pool, instance_type, accelerator_ms, usd_hour_ms)
    SELECT u.* FROM ledger_closed_by_tenant(kind) AS t CROSS JOIN LATERAL ledger_usage_of(t.spans) AS u;
    INSERT INTO spend_daily (tenant, day_ms, instance_type, usd_hour_ms)
    SELECT d.* FROM ledger_closed_by_tenant(kind) AS t CROSS JOIN LATERAL ledger_daily_spend_of(t.spans) AS d;
$$;

-- Derive every host's intervals from all its events and count the rollups again (after a bulk
-- load, or to check the incremental ones).
CREATE FUNCTION ledger_rebuild() RETURNS void
LANGUAGE sql AS $$
    DELETE FROM intervals;
    INSERT INTO intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                           started_ms, ended_ms, closed_by)
    SELECT * FROM ledger_derive_intervals(ARRAY(
        SELECT ROW(host.instance_id, -4611686018427387904, 0, '')::ledger_cut
        FROM (SELECT DISTINCT instance_id FROM events) AS host));
    SELECT ledger_recount_rollups(NULL);
$$;

-- A new price from ``effective`` on. If it reaches back over closed intervals their cost changes
-- by the rules, so that instance type's rollups are counted again.
CREATE FUNCTION ledger_add_price(kind text, effective timestamptz, price numeric, origin text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake prices', 0));
    INSERT INTO prices (instance_type, valid_from, usd_per_hour, source)
    VALUES (kind, effective, price, origin);
    PERFORM ledger_recount_rollups(kind);
END
$$;

-- Every tenant the meter has seen, and which actions its budget may take.
CREATE TABLE tenants (
    tenant     text        PRIMARY KEY,
    actions    text[]      NOT NULL DEFAULT '{notify,deny}'
        CHECK (actions <@ '{notify,deny,stop}'::text[]),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One budget per tenant and recurring period (UTC calendar day, ISO week or month).
CREATE TABLE budgets (
    tenant          text          PRIMARY KEY REFERENCES tenants ON DELETE CASCADE,
    period          text          NOT NULL DEFAULT 'month' CHECK (period IN ('day', 'week', 'month')),
    limit_usd       numeric(14, 2) NOT NULL CHECK (limit_usd > 0),
    -- Fractions of the limit at which to notify, e.g. {0.5,0.8,0.9}; reaching the limit always notifies.
    soft_thresholds numeric(4, 3)[] NOT NULL DEFAULT '{0.5,0.8,0.9}'
        CHECK (0 < ALL (soft_thresholds) AND 1 > ALL (soft_thresholds)),
    updated_at      timestamptz   NOT NULL DEFAULT now()
);

-- What the guardrails did, and why. once_key makes an action happen once per budget period:
-- it is claimed in the same transaction that performs the action.
CREATE TABLE guardrail_actions (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL,
    guardrail    text        NOT NULL,
    action       text        NOT NULL,
    tenant       text,
    reason       text        NOT NULL,
    period_start timestamptz,
    threshold    numeric(4, 3),
    instance_ids text[]      NOT NULL DEFAULT '{}',
    errors       jsonb       NOT NULL DEFAULT '[]',
    once_key     text        UNIQUE
);
CREATE INDEX guardrail_actions_by_tenant ON guardrail_actions (tenant, at);

-- The role the Lambdas and the CLI log in with (grant it to their login roles): it appends and
-- reads the ledger, never rewrites it.
DO $$
BEGIN
    CREATE ROLE parkbrake_app NOLOGIN;
EXCEPTION
    -- Roles are cluster-wide: another database of this cluster may have created it, or be doing so.
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;
DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO parkbrake_app', current_schema());
END
$$;
GRANT SELECT, INSERT ON events, prices, guardrail_actions TO parkbrake_app;
GRANT SELECT, INSERT, DELETE ON intervals TO parkbrake_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON usage_totals, spend_daily TO parkbrake_app;
GRANT SELECT, INSERT, UPDATE ON tenants, budgets TO parkbrake_app;
GRANT SELECT ON price_ranges TO parkbrake_app;
