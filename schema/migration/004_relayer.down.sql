DROP TABLE IF EXISTS relayer_txs;
DROP TABLE IF EXISTS relayer_nonces;
