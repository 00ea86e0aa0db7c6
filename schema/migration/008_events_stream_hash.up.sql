-- A stream's events are only ever looked up by the stream's whole name
-- (store.EventListByStream, the payment read of store's callPayment), never
-- by a range of names. A hash index keeps a 4-byte hash an entry, where the
-- b-tree on (stream, id) kept the whole name (38 bytes for a call's) and the
-- id: about 70 bytes an event, 420 a paid call, against about 25 and 150.
-- The few events of a stream are sorted by id after the lookup.
DROP INDEX IF EXISTS events_stream_id;
CREATE INDEX IF NOT EXISTS events_stream ON events USING hash (stream);
