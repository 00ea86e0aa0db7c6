DROP INDEX IF EXISTS index_chain_payers_unchecked;
DROP INDEX IF EXISTS index_host_evidence_payers_30d;
DROP INDEX IF EXISTS index_host_evidence_transactions_30d;
DROP INDEX IF EXISTS index_host_evidence_volume_7d;
DROP INDEX IF EXISTS index_host_evidence_volume_24h;
DROP INDEX IF EXISTS index_chain_payers_funded;
DROP INDEX IF EXISTS index_transfers_evidence;
CREATE INDEX IF NOT EXISTS index_transfers_pay_to ON index_transfers (pay_to, at);
