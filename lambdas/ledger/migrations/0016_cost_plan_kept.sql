-- 0012's ledger_cost_of, as PL/pgSQL. Its callers pass ARRAY(SELECT …), which keeps PostgreSQL from
-- inlining a SQL function, and a SQL function that is not inlined is planned again on every call:
-- 0.9 ms of planning for a 0.02 ms query, on every append that closes an interval. PL/pgSQL keeps
-- the plan for the session. Same signature, same result.
CREATE OR REPLACE FUNCTION ledger_cost_of(spans ledger_billed[])
RETURNS TABLE (tenant text, pool text, instance_type text, usd_hour_ms numeric)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT s.tenant, s.pool, s.instance_type,
           sum(p.usd_per_hour * (least(s.until_ms, p.until_ms) - greatest(s.from_ms, p.from_ms)))
    FROM unnest(spans) AS s
    CROSS JOIN LATERAL ledger_prices_for(s.instance_type, s.region, s.pricing_model, s.zone) AS p
    WHERE p.from_ms < s.until_ms AND p.until_ms > s.from_ms
    GROUP BY s.tenant, s.pool, s.instance_type;
END
$$;
