-- Budgets from the stack, and budgets in GPU-hours (docs/ledger.md, "Budgets from the stack" and
-- "GPU-hour budgets").
--
-- A budget's source says who set it last: 'stack' (Pulumi.<stack>.yaml, applied at deploy or by
-- `parkbrake ledger budget --from-stack`) or 'hand' (`parkbrake ledger budget TENANT --limit-usd …`).
-- stack_limit_usd and stack_gpu_hours are what the stack declared when it was last applied: a
-- budget set by hand stays as set while the stack declares the same, and a stack that declares
-- something else after the hand change is a conflict, reported, never applied silently.
--
-- gpu_hours: an optional second limit, accelerator-hours per period (kueue #28 asks for
-- resource-hours per period), enforced by admission beside the dollars.

ALTER TABLE budgets
    ADD COLUMN source          text          NOT NULL DEFAULT 'hand' CHECK (source IN ('hand', 'stack')),
    ADD COLUMN stack_name      text,
    ADD COLUMN stack_limit_usd numeric(14, 2),
    ADD COLUMN gpu_hours       numeric(14, 2) CHECK (gpu_hours > 0),
    ADD COLUMN stack_gpu_hours numeric(14, 2);

-- The signatures change: budgets.sql creates the new ones.
DROP FUNCTION ledger_set_budget(text, text[], text, numeric, numeric[], text);
