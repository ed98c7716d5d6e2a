-- The unattributed events of each host, in derivation order. Every derivation asks whether a host's
-- new events join a launch with unattributed events (ledger_attribution_reach); on a host with none,
-- which is nearly every host, this partial index answers with one probe of an empty range, where the
-- question read the host's events backwards to its last stop (a twentieth of the meter's derivation
-- of one event). Only unattributed events are written to it: an attributed append costs nothing more.
CREATE INDEX events_unattributed ON events (instance_id, at_ms, state_rank, event_id COLLATE "C")
    WHERE tenant = 'unattributed';
