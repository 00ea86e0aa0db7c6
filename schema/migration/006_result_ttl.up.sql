-- A call's result is kept RESULT_TTL: the retention sweep clears it and
-- stamps when; the call's ledger fields stay.
ALTER TABLE calls ADD COLUMN IF NOT EXISTS result_expired_at timestamptz;

-- How far each retention sweep has gone, so that the next one starts there
-- rather than at the oldest call.
CREATE TABLE IF NOT EXISTS retention_marks (
    name    text        PRIMARY KEY,
    done_to timestamptz NOT NULL
);

-- calls is updated two or three times a call, in place (HOT, fillfactor
-- 70): each update leaves a dead version that only VACUUM makes room of.
-- Postgres's defaults wait for 20% of the table to be dead, two million
-- rows at ten million calls, before vacuuming; these wait for 2%.
ALTER TABLE calls SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);
