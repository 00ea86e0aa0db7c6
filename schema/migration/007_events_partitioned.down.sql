-- Back to one table, with every partition's rows.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_partitioned_table p WHERE p.partrelid = to_regclass('events')) THEN
        RETURN;
    END IF;
    ALTER TABLE events RENAME TO events_partitioned;
    ALTER INDEX events_pkey RENAME TO events_partitioned_pkey;
    ALTER INDEX events_stream_id RENAME TO events_partitioned_stream_id;
    CREATE TABLE events (
        id         bigint      PRIMARY KEY DEFAULT nextval('events_id_seq'),
        stream     text        NOT NULL,
        type       text        NOT NULL,
        data       jsonb       NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT now()
    );
    INSERT INTO events SELECT * FROM events_partitioned;
    ALTER SEQUENCE events_id_seq OWNED BY events.id;
    DROP TABLE events_partitioned;
    CREATE INDEX events_stream_id ON events (stream, id);
    CREATE TRIGGER events_append_only
        BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
    CREATE TRIGGER events_no_truncate
        BEFORE TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();
END;
$$;
