-- The hub's decision log read by account: `parkbrake log --account ID`, `--accounts FILE` and
-- `--org` keep the decisions whose details name one of the accounts (`details->>'account_id'`, which
-- the central sweep writes: lambdas/engines/org_sweeping.py). Without an index, the read (the newest
-- --limit matches, lambdas/ledger/decisions.py SELECT) walks the decisions newest first through
-- decisions_by_time and tests every row's details: all of them, for an account with fewer matches
-- than the limit. `python -m benchmarks.log_accounts` measures both (docs/organisation.md).
--
-- Partial: the hub's own guardrails' decisions name no account, and a stack outside an
-- organisation has none at all. The read's `details->>'account_id' = ANY(...)` is strict, so the
-- planner proves the predicate from it. Not CONCURRENTLY: the migrations run in one transaction;
-- a decision log at its retention's size (2 million rows, docs/ledger.md) builds it in seconds.
CREATE INDEX decisions_by_account ON decisions ((details->>'account_id'), at)
    WHERE details->>'account_id' IS NOT NULL;
