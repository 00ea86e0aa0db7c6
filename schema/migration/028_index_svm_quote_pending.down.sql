ALTER TABLE index_hosts DROP COLUMN IF EXISTS quote_pending;
DROP TABLE IF EXISTS index_svm_fundings;
DROP TABLE IF EXISTS index_svm_cursors;
DELETE FROM index_transfers WHERE network LIKE 'solana:%';
DELETE FROM index_chain_payers WHERE network LIKE 'solana:%';
DELETE FROM index_chain_watch WHERE network LIKE 'solana:%';
