DROP TABLE IF EXISTS index_host_evidence;
DROP TABLE IF EXISTS index_chain_payers;
DROP TABLE IF EXISTS index_transfers;
DROP TABLE IF EXISTS index_chain_watch;
DROP TABLE IF EXISTS index_chain_cursors;
