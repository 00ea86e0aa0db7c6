DROP TABLE IF EXISTS settlement_losses;
DROP TABLE IF EXISTS settlement_watch;
UPDATE calls SET state = 'paid' WHERE state = 'lost';
ALTER TABLE calls DROP CONSTRAINT IF EXISTS calls_state;
ALTER TABLE calls ADD CONSTRAINT calls_state CHECK (state IN ('queued', 'running', 'settling', 'paid', 'failed', 'unpaid')) NOT VALID;
