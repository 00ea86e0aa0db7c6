-- Fewer index writes a paid call (issue 43).
--
-- River's job table had two GIN indexes, on args and on metadata. Every
-- job inserted, and every change of its state (not a HOT update: state is
-- in River's btree indexes), added an entry for each key and value of both
-- documents: the most costly index writes of a paid call's three job
-- writes. River looks neither up; the only reader was CallListExhausted,
-- finding a call's other settlement jobs by their call_id, which one btree
-- entry a job serves.
DROP INDEX IF EXISTS river_job_args_index;
DROP INDEX IF EXISTS river_job_metadata_index;
CREATE INDEX IF NOT EXISTS river_job_call_id ON river_job ((args->>'call_id'));

-- A reservation's ended_at, stamped when its call is paid, was in the
-- payer's index, so that the stamp wrote a new index entry (no HOT update).
-- Reserve reads every row of a payer whatever its ended_at: the index by
-- payer alone serves it, and with room left on each page the stamp is
-- written in place.
DROP INDEX IF EXISTS reservations_payer;
CREATE INDEX IF NOT EXISTS reservations_payer ON reservations (payer, asset, network);
ALTER TABLE reservations SET (fillfactor = 60);
