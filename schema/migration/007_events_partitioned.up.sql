-- events is partitioned by created_at (RANGE): whole periods of the log can
-- be archived and dropped (x402d archive). Its partitions are created ahead
-- by store.EnsureEventPartitions (at every start and by a River periodic
-- job), each with the append-only rule. The replay guard stays on calls
-- (calls_payment_key): a unique index on a partitioned table must include
-- the partition key, and a payment is one call, whenever it came.
DO $$
DECLARE
    boundary timestamptz := date_trunc('day', now(), 'UTC') + interval '1 day';
BEGIN
    IF EXISTS (SELECT 1 FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
               WHERE c.oid = to_regclass('events')) THEN
        RETURN;
    END IF;
    ALTER TABLE events RENAME TO events_before_partitions;
    ALTER INDEX events_pkey RENAME TO events_before_partitions_pkey;
    ALTER INDEX events_stream_id RENAME TO events_before_partitions_stream_id;
    DROP TRIGGER IF EXISTS events_append_only ON events_before_partitions;
    DROP TRIGGER IF EXISTS events_no_truncate ON events_before_partitions;

    CREATE TABLE events (
        id         bigint      NOT NULL DEFAULT nextval('events_id_seq'),
        stream     text        NOT NULL,
        type       text        NOT NULL,
        data       jsonb       NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (id, created_at)
    ) PARTITION BY RANGE (created_at);
    ALTER SEQUENCE events_id_seq OWNED BY events.id;
    CREATE INDEX events_stream_id ON events (stream, id);
    -- Cloned onto every partition, present and future.
    CREATE TRIGGER events_append_only
        BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
    CREATE TRIGGER events_no_truncate
        BEFORE TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

    IF EXISTS (SELECT 1 FROM events_before_partitions) THEN
        -- The log written so far is the first partition, up to tomorrow.
        ALTER TABLE events_before_partitions ALTER COLUMN id DROP DEFAULT;
        -- Its key becomes the log's (id, created_at), built on attaching.
        ALTER TABLE events_before_partitions DROP CONSTRAINT events_before_partitions_pkey;
        EXECUTE format('ALTER TABLE events ATTACH PARTITION events_before_partitions FOR VALUES FROM (MINVALUE) TO (%L)', boundary);
        CREATE TRIGGER events_no_truncate
            BEFORE TRUNCATE ON events_before_partitions
            FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();
    ELSE
        DROP TABLE events_before_partitions;
    END IF;
END;
$$;
