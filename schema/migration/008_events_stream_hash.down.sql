DROP INDEX IF EXISTS events_stream;
CREATE INDEX IF NOT EXISTS events_stream_id ON events (stream, id);
