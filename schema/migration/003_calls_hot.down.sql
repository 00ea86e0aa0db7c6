ALTER TABLE calls RESET (fillfactor);
DROP INDEX IF EXISTS calls_op;
CREATE INDEX IF NOT EXISTS calls_op_state ON calls (op, state);
