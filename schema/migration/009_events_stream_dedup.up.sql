-- A stream's events are only ever looked up by the stream's whole name
-- (store.EventListByStream, the payment read of store's callPayment) and
-- sorted by id after the lookup. A b-tree on the name alone deduplicates:
-- the six events of a paid call share one entry, the name kept once with
-- six row pointers, about 115 bytes a call against 290 for the hash index
-- (a hash index's buckets split half empty) and 420 for the b-tree on
-- (stream, id), whose unique ids left nothing to deduplicate.
DROP INDEX IF EXISTS events_stream;
CREATE INDEX IF NOT EXISTS events_stream ON events (stream);
