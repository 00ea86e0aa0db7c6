ALTER TABLE index_host_evidence DROP COLUMN IF EXISTS fully_measured_since;
DELETE FROM index_host_evidence WHERE funded_payers_30d IS NULL;
ALTER TABLE index_host_evidence ALTER COLUMN funded_payers_30d SET NOT NULL;
