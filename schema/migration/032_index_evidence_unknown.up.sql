-- The index's on-chain figures say what they do not know (issue 45: null
-- where not measured, never 0). funded_payers_30d is null while one of the
-- 30 days' payers is not looked at for a funding yet (store.fundedPayers).
-- fully_measured_since is when the chain reader began reading the last of
-- the host's payTo addresses: a window that began before it is only partly
-- read (store.EvidenceWindow.Complete). The rows kept so far take their
-- first address's start and are counted again at the next run.
ALTER TABLE index_host_evidence ALTER COLUMN funded_payers_30d DROP NOT NULL;
ALTER TABLE index_host_evidence ADD COLUMN IF NOT EXISTS fully_measured_since timestamptz;
UPDATE index_host_evidence SET fully_measured_since = measured_since, refreshed_at = '-infinity' WHERE fully_measured_since IS NULL;
ALTER TABLE index_host_evidence ALTER COLUMN fully_measured_since SET NOT NULL;
