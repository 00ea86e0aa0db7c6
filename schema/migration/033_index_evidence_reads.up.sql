-- The on-chain figures counted and sorted by from indexes (issue 45: 30
-- days of 100 settlements a day for 1,000 sellers, 3,000,000 transfers).
--
-- store.EvidenceCompute reads a payTo's transfers of 30 days. By
-- (pay_to, at), each row was then read from the table, where the reader
-- appends transfers in the order of their blocks: a seller's 3,000 of a
-- month lay on 3,000 pages, read at each count of its figures (a run of
-- the chain reader, a host's page). The index holds what the count reads,
-- a seller's transfers of a month on some 80 pages of it.
DROP INDEX IF EXISTS index_transfers_pay_to;
CREATE INDEX IF NOT EXISTS index_transfers_evidence ON index_transfers (network, pay_to, at)
    INCLUDE (block, payer, amount, sender, eip3009);

-- The payers a payTo funded are few: the figures' count finds them here
-- instead of looking each payer up (and a rewind, funded_block > n).
CREATE INDEX IF NOT EXISTS index_chain_payers_funded ON index_chain_payers (network, pay_to, payer)
    WHERE funded_block IS NOT NULL;

-- The hosts list by an on-chain figure (store.HostList) reads the measured
-- hosts in the order of the figure's index, as volume_30d's
-- (index_host_evidence_volume, migration 021), instead of looking the
-- figure up for every host.
CREATE INDEX IF NOT EXISTS index_host_evidence_volume_24h ON index_host_evidence (volume_24h DESC, host);
CREATE INDEX IF NOT EXISTS index_host_evidence_volume_7d ON index_host_evidence (volume_7d DESC, host);
CREATE INDEX IF NOT EXISTS index_host_evidence_transactions_30d ON index_host_evidence (transactions_30d DESC, host);
CREATE INDEX IF NOT EXISTS index_host_evidence_payers_30d ON index_host_evidence (payers_30d DESC, host);

-- The payers not yet looked at for a funding are few: the figures' count
-- finds a key's here (store.fundedPayers: unknown while one is).
CREATE INDEX IF NOT EXISTS index_chain_payers_unchecked ON index_chain_payers (network, pay_to, payer)
    WHERE NOT checked;
