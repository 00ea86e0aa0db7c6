DROP INDEX IF EXISTS index_chain_payers_funded;
DROP INDEX IF EXISTS index_transfers_evidence;
CREATE INDEX IF NOT EXISTS index_transfers_pay_to ON index_transfers (pay_to, at);
