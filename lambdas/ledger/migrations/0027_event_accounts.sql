-- One ledger for the organisation: every event carries the AWS account its host is in (the
-- 12-digit id of EventBridge's envelope field `account`), beside the region it already carries.
-- See docs/ledger.md (*Accounts*).
--
-- A host is still keyed by its instance id alone (derivation, heads, attributions): EC2 gives each
-- resource a unique id (docs/ledger.md cites AWS's text), and an instance never moves between
-- accounts, so the account is a property of the host, not an attribution that can change. An
-- interval's account is the account of the event that opened it (intervals.opened_by): readers
-- join it, and derivation is untouched, so the ledger stays a function of its events.
--
-- Events appended before this migration were the stack's own account's (one stack, one account):
-- they get '' ("the ledger's own account"), which every reader shows as the hub's own account when
-- it knows it and as "-" when it does not. No CHECK on the hot table (0006): the appends check the
-- account ('' or 12 digits).
ALTER TABLE events ADD COLUMN account text NOT NULL DEFAULT '';
-- The queue is the events' shape (0021: LIKE events): a settle moves its rows with SELECT *.
ALTER TABLE ledger_backfill ADD COLUMN account text NOT NULL DEFAULT '';

-- The appends take the account (append.sql creates them again with it): the old signatures go.
-- IF EXISTS: a new database runs every migration before any function file.
DROP FUNCTION IF EXISTS ledger_append_settled_event(text, text, text, bigint, text, text, text, integer, bigint, text,
    text, text, text, timestamptz);
DROP FUNCTION IF EXISTS ledger_append_event(text, text, text, bigint, text, text, text, integer, bigint, text, text,
    text, text, timestamptz);
DROP FUNCTION IF EXISTS ledger_store_event(text, text, text, bigint, text, text, text, integer, bigint, text, text,
    text, text, timestamptz);
DROP FUNCTION IF EXISTS ledger_append_events(text[], text[], text[], bigint[], integer[], text[], text[], text[],
    integer[], bigint[], text[], text[], text[], text, timestamptz);
DROP FUNCTION IF EXISTS ledger_batch_events(text[], text[], text[], bigint[], integer[], text[], text[], text[],
    integer[], bigint[], text[], text[], text[], text, timestamptz);

-- A closed month's lines keep the account they were billed for (an invoice line per account: a
-- tenant may span accounts); lines closed before this migration were the ledger's own ('').
ALTER TABLE closed_invoice_lines ADD COLUMN account text NOT NULL DEFAULT '';
