-- The appends: the only way events enter the ledger. They check the events, store them and mark them
-- pending (the next settle derives them), or queue a backfill. See docs/ledger.md (*Appends and
-- settles*).
-- Applied after the numbered migrations, and again whenever this file changes (see schema.py).
-- CREATE OR REPLACE resets a function's settings: each function's follow it, with its privileges.

-- Whether an event's account is one the ledger takes: an AWS account id (12 digits, as EventBridge's
-- envelope and STS's GetCallerIdentity write it), or '' (the ledger's own account: events appended
-- before migration 0027, and callers that do not know it). NULL passes nothing. Inlined.
CREATE OR REPLACE FUNCTION ledger_account_passes(account text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(account ~ '^([0-9]{12})?$', false)
$$;
REVOKE EXECUTE ON FUNCTION ledger_account_passes(text) FROM PUBLIC;

-- A batch's rows, as events (and the backfill queue) store them.
CREATE OR REPLACE FUNCTION ledger_batch_events(
    event_ids text[], instance_ids text[], states text[], times_ms bigint[], attributed integer[],
    tenant_names text[], pools text[], instance_types text[], accelerator_counts integer[], caps bigint[],
    regions text[], pricing_models text[], zones text[], accounts text[], origin text, received timestamptz
) RETURNS SETOF events
LANGUAGE sql STABLE AS $$
    SELECT b.event_id, b.instance_id, b.state, 'epoch'::timestamptz + b.at_ms * interval '1 millisecond',
           tenant_names[b.a], pools[b.a], instance_types[b.a], accelerator_counts[b.a], caps[b.a], regions[b.a],
           origin, received, b.at_ms, ledger_state_rank(b.state)::smallint, pricing_models[b.a], zones[b.a],
           coalesce(b.account, '')
    FROM unnest(event_ids, instance_ids, states, times_ms, attributed, accounts)
         AS b (event_id, instance_id, state, at_ms, a, account)
$$;
REVOKE EXECUTE ON FUNCTION ledger_batch_events(text[], text[], text[], bigint[], integer[], text[], text[],
    text[], integer[], bigint[], text[], text[], text[], text[], text, timestamptz) FROM PUBLIC;

-- Append a batch: check its events (source, state, attribution index, pricing model: a refusal names
-- the event), store them and mark them pending, under the settle lock held shared. Times are
-- milliseconds since the epoch, and each distinct attribution comes once, every event an index into
-- them. A duplicate id is skipped; only the events not appended come back, as 'duplicate' (a batch
-- appended whole answers with no rows). A backfill (source 'ingest') is queued whole instead: what
-- became of each event is known after the next settle.
CREATE OR REPLACE FUNCTION ledger_append_events(
    event_ids text[], instance_ids text[], states text[], times_ms bigint[], attributed integer[],
    tenant_names text[], pools text[], instance_types text[], accelerator_counts integer[], caps bigint[],
    regions text[], pricing_models text[], zones text[], accounts text[], origin text, received timestamptz
) RETURNS TABLE (event_id text, outcome text)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    refused text;
    appended text[];
BEGIN
    IF origin NOT IN ('meter', 'ingest', 'reconciler', 'replay') THEN
        RAISE EXCEPTION 'source % is not one of meter, ingest, reconciler, replay', origin
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT format('event %s: %s', b.event_id,
                  CASE WHEN ledger_state_rank(b.state) IS NULL THEN format('state %L is not an EC2 state', b.state)
                       WHEN NOT ledger_account_passes(b.account)
                           THEN format('account %L is not a 12-digit AWS account id', b.account)
                       WHEN b.a IS NULL OR b.a NOT BETWEEN 1 AND coalesce(cardinality(tenant_names), 0)
                           THEN format('attribution %s is not one of the batch''s %s', coalesce(b.a::text, 'NULL'),
                                       coalesce(cardinality(tenant_names), 0))
                       ELSE format('pricing model %L is not on-demand or spot', pricing_models[b.a]) END)
    INTO refused
    FROM unnest(event_ids, states, attributed, accounts) AS b (event_id, state, a, account)
    WHERE ledger_state_rank(b.state) IS NULL OR NOT ledger_account_passes(b.account)
       OR b.a IS NULL OR b.a NOT BETWEEN 1 AND coalesce(cardinality(tenant_names), 0)
       OR pricing_models[b.a] IS DISTINCT FROM 'on-demand' AND pricing_models[b.a] IS DISTINCT FROM 'spot'
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION '%', refused USING ERRCODE = 'check_violation';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake settle', 0));
    IF origin = 'ingest' THEN  -- queued whole; what became of each event is known after the next settle
        INSERT INTO ledger_backfill
        SELECT * FROM ledger_batch_events(event_ids, instance_ids, states, times_ms, attributed, tenant_names, pools,
                                          instance_types, accelerator_counts, caps, regions, pricing_models, zones,
                                          accounts, origin, received);
        RETURN;
    END IF;
    -- In event id order: two meters appending overlapping batches (EventBridge delivers at least
    -- once, to concurrent Lambdas) then wait on each other's ids in one order, never in a circle
    -- (inserted in the batch's own order, each could hold an id the other waits for: a deadlock).
    WITH inserted AS (
        INSERT INTO events
        SELECT * FROM ledger_batch_events(event_ids, instance_ids, states, times_ms, attributed, tenant_names, pools,
                                          instance_types, accelerator_counts, caps, regions, pricing_models, zones,
                                          accounts, origin, received)
        ORDER BY event_id
        ON CONFLICT (event_id) DO NOTHING
        RETURNING events.event_id
    )
    SELECT array_agg(n.event_id) INTO appended FROM inserted n;
    INSERT INTO ledger_pending (event_id) SELECT a FROM unnest(appended) AS a;
    -- Only the events not appended come back: a batch appended whole answers with no rows.
    IF cardinality(appended) = cardinality(event_ids) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT b.event_id, 'duplicate'
    FROM unnest(event_ids) AS b (event_id)
    LEFT JOIN unnest(appended) AS n (event_id) ON n.event_id = b.event_id
    WHERE n.event_id IS NULL;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_append_events(text[], text[], text[], bigint[], integer[], '
                   'text[], text[], text[], integer[], bigint[], text[], text[], text[], text[], text, '
                   'timestamptz) SET search_path = %I, pg_temp', current_schema());
END
$$;
ALTER FUNCTION ledger_append_events(text[], text[], text[], bigint[], integer[], text[], text[], text[],
    integer[], bigint[], text[], text[], text[], text[], text, timestamptz) SET plan_cache_mode = force_generic_plan;
REVOKE EXECUTE ON FUNCTION ledger_append_events(text[], text[], text[], bigint[], integer[], text[], text[],
    text[], integer[], bigint[], text[], text[], text[], text[], text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_append_events(text[], text[], text[], bigint[], integer[], text[], text[],
    text[], integer[], bigint[], text[], text[], text[], text[], text, timestamptz) TO parkbrake_app;

-- Whether one event takes the one-event appends' own path: a live source (not a backfill), an EC2
-- state and a pricing model it knows. Any other is handed to the batch function, whose checks
-- refuse it with their message (or queue a backfill). An expression the planner inlines.
CREATE OR REPLACE FUNCTION ledger_one_event_passes(origin text, state text, pricing_model text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(origin IN ('meter', 'reconciler', 'replay') AND ledger_state_rank(state) IS NOT NULL
                    AND pricing_model IN ('on-demand', 'spot'), false)  -- a NULL passes nothing
$$;
REVOKE EXECUTE ON FUNCTION ledger_one_event_passes(text, text, text) FROM PUBLIC;

-- Store one event that passed the checks (none here), or NULL for a duplicate id: the insert both
-- one-event appends share.
CREATE OR REPLACE FUNCTION ledger_store_event(
    new_event_id text, new_instance_id text, new_state text, new_ms bigint, new_tenant text, new_pool text,
    new_instance_type text, new_accelerators integer, new_cap_ms bigint, new_region text, new_pricing_model text,
    new_zone text, new_account text, origin text, received timestamptz
) RETURNS events
LANGUAGE plpgsql AS $$
DECLARE
    stored events;
BEGIN
    INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                        cap_ms, region, source, received_at, at_ms, state_rank, pricing_model, zone, account)
    VALUES (new_event_id, new_instance_id, new_state, 'epoch'::timestamptz + new_ms * interval '1 millisecond',
            new_tenant, new_pool, new_instance_type, new_accelerators, new_cap_ms, new_region, origin, received,
            new_ms, ledger_state_rank(new_state), new_pricing_model, new_zone, new_account)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING events.* INTO stored;
    RETURN stored;
END
$$;
REVOKE EXECUTE ON FUNCTION ledger_store_event(text, text, text, bigint, text, text, text, integer, bigint, text,
    text, text, text, text, timestamptz) FROM PUBLIC;

-- One event, as the meter appends it: the same append with scalar arguments, which cost a client and
-- the server a fraction of one-element arrays; its time in milliseconds. A backfill, and an event
-- the checks refuse, take the batch function (its checks, its messages; a backfill is answered
-- 'queued').
CREATE OR REPLACE FUNCTION ledger_append_event(
    new_event_id text, new_instance_id text, new_state text, new_ms bigint, new_tenant text, new_pool text,
    new_instance_type text, new_accelerators integer, new_cap_ms bigint, new_region text, new_pricing_model text,
    new_zone text, new_account text, origin text, received timestamptz
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    stored events;
BEGIN
    IF NOT ledger_one_event_passes(origin, new_state, new_pricing_model) OR NOT ledger_account_passes(new_account) THEN
        RETURN coalesce((SELECT a.outcome FROM ledger_append_events(
            ARRAY[new_event_id], ARRAY[new_instance_id], ARRAY[new_state], ARRAY[new_ms], ARRAY[1], ARRAY[new_tenant],
            ARRAY[new_pool], ARRAY[new_instance_type], ARRAY[new_accelerators], ARRAY[new_cap_ms],
            ARRAY[new_region], ARRAY[new_pricing_model], ARRAY[new_zone], ARRAY[new_account], origin,
            received) AS a),
            CASE origin WHEN 'ingest' THEN 'queued' ELSE 'appended' END);
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('parkbrake settle', 0));
    stored := ledger_store_event(new_event_id, new_instance_id, new_state, new_ms, new_tenant, new_pool,
                                 new_instance_type, new_accelerators, new_cap_ms, new_region, new_pricing_model,
                                 new_zone, new_account, origin, received);
    IF stored.event_id IS NULL THEN
        RETURN 'duplicate';
    END IF;
    INSERT INTO ledger_pending (event_id) VALUES (new_event_id);
    RETURN 'appended';
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_append_event(text, text, text, bigint, text, text, text, '
                   'integer, bigint, text, text, text, text, text, timestamptz) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
ALTER FUNCTION ledger_append_event(text, text, text, bigint, text, text, text, integer, bigint, text, text,
    text, text, text, timestamptz) SET plan_cache_mode = force_generic_plan;
REVOKE EXECUTE ON FUNCTION ledger_append_event(text, text, text, bigint, text, text, text, integer, bigint,
    text, text, text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_append_event(text, text, text, bigint, text, text, text, integer, bigint,
    text, text, text, text, text, timestamptz) TO parkbrake_app;

-- One event appended and settled, in one call and one transaction: the meter's whole path, as its
-- budget check reads the runway after every append. The settle lock is taken exclusively first
-- (two of these holding it shared while each waits to take it exclusively would deadlock), so
-- concurrent meters queue here as their settles would. What else is pending is derived first (a
-- queued backfill is not: at most one slice of it holds the lock while this waits); the event is
-- then stored and derived at once, never pending (ledger_derive_next, else ledger_derive). It
-- waits for the lock at most lock_timeout (its setting below): past that it fails with
-- lock_not_available, which the meter reports (lambdas.ledger.appends.SettleBusy) and never retries.
-- An event the checks refuse, or a backfill, takes ledger_append_event (its messages, its queue).
CREATE OR REPLACE FUNCTION ledger_append_settled_event(
    new_event_id text, new_instance_id text, new_state text, new_ms bigint, new_tenant text, new_pool text,
    new_instance_type text, new_accelerators integer, new_cap_ms bigint, new_region text, new_pricing_model text,
    new_zone text, new_account text, origin text, received timestamptz
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    outcome text;
    stored events;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0));
    -- Derive what else is pending first (what meters, the reconciler and replays appended), never
    -- a queued backfill: a reader's settle takes that, a slice at a time. Asked here because the
    -- call costs more than the question.
    IF EXISTS (SELECT 1 FROM ledger_pending) THEN
        PERFORM ledger_settle_pending();  -- settle.sql
    END IF;
    IF NOT ledger_one_event_passes(origin, new_state, new_pricing_model) OR NOT ledger_account_passes(new_account) THEN
        outcome := ledger_append_event(new_event_id, new_instance_id, new_state, new_ms, new_tenant, new_pool,
                                       new_instance_type, new_accelerators, new_cap_ms, new_region,
                                       new_pricing_model, new_zone, new_account, origin, received);
        PERFORM ledger_settle();
        RETURN outcome;
    END IF;
    stored := ledger_store_event(new_event_id, new_instance_id, new_state, new_ms, new_tenant, new_pool,
                                 new_instance_type, new_accelerators, new_cap_ms, new_region, new_pricing_model,
                                 new_zone, new_account, origin, received);
    IF stored.event_id IS NULL THEN
        RETURN 'duplicate';
    END IF;
    IF NOT ledger_derive_next(stored) THEN  -- derive.sql
        PERFORM ledger_derive(ARRAY[stored]);
    END IF;
    RETURN 'appended';
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION ledger_append_settled_event(text, text, text, bigint, text, text, text, '
                   'integer, bigint, text, text, text, text, text, timestamptz) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
ALTER FUNCTION ledger_append_settled_event(text, text, text, bigint, text, text, text, integer, bigint, text,
    text, text, text, text, timestamptz) SET plan_cache_mode = force_generic_plan;
-- Below the meter Lambda's 60 s timeout, far above a slice's settle (benchmarks.ledger_settle).
ALTER FUNCTION ledger_append_settled_event(text, text, text, bigint, text, text, text, integer, bigint, text,
    text, text, text, text, timestamptz) SET lock_timeout = '20s';
REVOKE EXECUTE ON FUNCTION ledger_append_settled_event(text, text, text, bigint, text, text, text, integer,
    bigint, text, text, text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_append_settled_event(text, text, text, bigint, text, text, text, integer,
    bigint, text, text, text, text, text, timestamptz) TO parkbrake_app;
