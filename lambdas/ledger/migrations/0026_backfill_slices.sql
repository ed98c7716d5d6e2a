-- The backfill queue in settle order: a settle appends and derives one slice of it at a time, its
-- first events by host, then time, after where the previous slice ended (ledger_settle_slice).
-- Unindexed, every slice sorted the whole queue to find its own (150 slices of a 300,000-event
-- backfill read 45 million rows); by this index a slice reads its own rows, and the range after the
-- previous slice holds none of the rows the settles before it deleted. An insert into the queue
-- pays one index entry.
CREATE INDEX ledger_backfill_order ON ledger_backfill (instance_id, at_ms, state_rank, event_id COLLATE "C");
