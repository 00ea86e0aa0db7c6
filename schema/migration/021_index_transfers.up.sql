-- The index's on-chain evidence (index.ChainReader): the USDC transfers
-- into the payTo addresses the index's listings name, read from each EVM
-- network with RPC endpoints, and what is counted from them per host.
-- Addresses are lower-case hex; amounts are USDC atomic units (6 decimals).

-- One row per network read: the last block read (its hash, to see a
-- reorganisation that replaced it), and where and when reading began.
CREATE TABLE IF NOT EXISTS index_chain_cursors (
    network       text        PRIMARY KEY,
    block         bigint      NOT NULL,
    block_hash    text        NOT NULL,
    read_at       timestamptz NOT NULL,
    started_block bigint      NOT NULL,
    started_at    timestamptz NOT NULL
);

-- The payTo addresses read, each from the block after since_block (the
-- network's cursor when it was first read): nothing before is counted.
CREATE TABLE IF NOT EXISTS index_chain_watch (
    network     text        NOT NULL,
    pay_to      text        NOT NULL,
    since_block bigint      NOT NULL,
    since_at    timestamptz NOT NULL,
    PRIMARY KEY (network, pay_to)
);

-- One row per Transfer log into a watched payTo: payer is the token's
-- from, sender the transaction's from (the facilitator or relayer that
-- sent a settlement), eip3009 whether the same transaction used the
-- payer's EIP-3009 authorization (AuthorizationUsed), at the block's time.
CREATE TABLE IF NOT EXISTS index_transfers (
    network    text        NOT NULL,
    tx_hash    text        NOT NULL,
    log_index  integer     NOT NULL,
    block      bigint      NOT NULL,
    block_hash text        NOT NULL,
    at         timestamptz NOT NULL,
    payer      text        NOT NULL,
    pay_to     text        NOT NULL,
    amount     numeric     NOT NULL,
    sender     text        NOT NULL,
    eip3009    boolean     NOT NULL,
    PRIMARY KEY (network, tx_hash, log_index)
);
CREATE INDEX IF NOT EXISTS index_transfers_pay_to ON index_transfers (pay_to, at);
CREATE INDEX IF NOT EXISTS index_transfers_block ON index_transfers (network, block);

-- One row per payer of a payTo: its first payment's block, and, once
-- looked for, whether the payTo had sent it USDC before (funded_block:
-- the block of the latest such transfer; null: none found).
CREATE TABLE IF NOT EXISTS index_chain_payers (
    network      text    NOT NULL,
    pay_to       text    NOT NULL,
    payer        text    NOT NULL,
    first_block  bigint  NOT NULL,
    checked      boolean NOT NULL DEFAULT false,
    funded_block bigint,
    PRIMARY KEY (network, pay_to, payer)
);
CREATE INDEX IF NOT EXISTS index_chain_payers_unchecked ON index_chain_payers (network) WHERE NOT checked;

-- The figures of each host over its watched payTos (store.EvidenceRefresh),
-- kept for the hosts list's sorts and filters. Volumes are atomic units.
CREATE TABLE IF NOT EXISTS index_host_evidence (
    host                  text        PRIMARY KEY,
    measured_since        timestamptz NOT NULL,
    networks              text[]      NOT NULL,
    transactions_24h      bigint      NOT NULL,
    transactions_7d       bigint      NOT NULL,
    transactions_30d      bigint      NOT NULL,
    settlements_30d       bigint      NOT NULL,
    volume_24h            numeric     NOT NULL,
    volume_7d             numeric     NOT NULL,
    volume_30d            numeric     NOT NULL,
    payers_24h            bigint      NOT NULL,
    payers_7d             bigint      NOT NULL,
    payers_30d            bigint      NOT NULL,
    top_payer             text,
    top_payer_share_30d   float8,
    funded_payers_30d     bigint      NOT NULL,
    self_payments_30d     bigint      NOT NULL,
    senders_30d           jsonb       NOT NULL,
    last_transfer_at      timestamptz,
    refreshed_at          timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS index_host_evidence_volume ON index_host_evidence (volume_30d DESC, host);
CREATE INDEX IF NOT EXISTS index_host_evidence_refreshed ON index_host_evidence (refreshed_at);
