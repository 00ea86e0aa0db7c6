-- The event log is never looked up by its key: a stream's events are found
-- by the stream's index (events_stream), the figures by type and time in
-- one partition, an archive reads its partition whole. Its ids come from
-- one sequence and no row is ever changed (events_append_only), so the
-- primary key on (id, created_at) only kept an entry of 16 bytes and its
-- overhead for each event, about 90 bytes a paid call
-- (docs/performance.md, The ledger), and a write of every insert.
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_pkey;
