ALTER TABLE reservations RESET (fillfactor);
DROP INDEX IF EXISTS reservations_payer;
CREATE INDEX IF NOT EXISTS reservations_payer ON reservations (payer, asset, network, ended_at);
DROP INDEX IF EXISTS river_job_call_id;
CREATE INDEX IF NOT EXISTS river_job_args_index ON river_job USING GIN (args);
CREATE INDEX IF NOT EXISTS river_job_metadata_index ON river_job USING GIN (metadata);
