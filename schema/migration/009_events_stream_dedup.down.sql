DROP INDEX IF EXISTS events_stream;
CREATE INDEX IF NOT EXISTS events_stream ON events USING hash (stream);
