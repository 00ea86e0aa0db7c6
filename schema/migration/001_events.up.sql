-- The append-only event log. Every state change of the service is an event;
-- the tables below it are projections, written by store.Append in the same
-- transaction as their events.
CREATE TABLE IF NOT EXISTS events (
    id         bigserial PRIMARY KEY,
    stream     text        NOT NULL,
    type       text        NOT NULL,
    data       jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS events_stream_id ON events (stream, id);

CREATE OR REPLACE FUNCTION events_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

DROP TRIGGER IF EXISTS events_append_only ON events;
CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();

DROP TRIGGER IF EXISTS events_no_truncate ON events;
CREATE TRIGGER events_no_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- calls: one row per paid call, the projection of the call/<id> streams.
CREATE TABLE IF NOT EXISTS calls (
    id           text        PRIMARY KEY,
    op           text        NOT NULL,
    state        text        NOT NULL,
    token        text        NOT NULL,
    request_hash bytea       NOT NULL,
    payment_key  text        NOT NULL,
    network      text        NOT NULL,
    payer        text        NOT NULL,
    amount       text        NOT NULL,
    payment      jsonb       NOT NULL,
    result       json,
    failure      jsonb,
    settlement   jsonb,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    CONSTRAINT calls_state CHECK (state IN ('queued', 'running', 'settling', 'paid', 'failed', 'unpaid'))
);

-- A payment is accepted once: the replay guard.
CREATE UNIQUE INDEX IF NOT EXISTS calls_payment_key ON calls (payment_key);
CREATE INDEX IF NOT EXISTS calls_created_at ON calls (created_at DESC);
CREATE INDEX IF NOT EXISTS calls_op_state ON calls (op, state);
