-- The index's on-chain evidence on Solana (index.ChainReader): the USDC
-- transfers into each payTo address of a Solana network read, found among
-- the transactions naming its associated token account for the network's
-- USDC (getSignaturesForAddress at "finalized", newest first). Transfers
-- go to index_transfers with the EVM networks' (021): block is the slot,
-- block_hash is empty (a finalized slot is never replaced), log_index is
-- the instruction's place in its transaction, sender the fee payer, and
-- eip3009 whether the fee payer is not the payer (the exact scheme's: the
-- payer signs, a facilitator or the seller sends).

-- One row per payTo read: its token account, the newest signature read
-- through (until_signature; '': none yet, from the account's first), and
-- a walk down from the newest signatures cut short between runs
-- (top_signature, the newest it found; before_signature, the oldest it
-- read; both '' when none is under way).
CREATE TABLE IF NOT EXISTS index_svm_cursors (
    network          text        NOT NULL,
    pay_to           text        NOT NULL,
    account          text        NOT NULL,
    until_signature  text        NOT NULL,
    top_signature    text        NOT NULL DEFAULT '',
    before_signature text        NOT NULL DEFAULT '',
    read_at          timestamptz NOT NULL,
    PRIMARY KEY (network, pay_to)
);
CREATE INDEX IF NOT EXISTS index_svm_cursors_read ON index_svm_cursors (network, read_at);

-- The USDC a payTo's token account sent to another owner (a payer it may
-- have funded), at its slot: what marks a payer funded by the seller
-- (index_chain_payers.funded_block) once the walk that read it is done.
CREATE TABLE IF NOT EXISTS index_svm_fundings (
    network   text    NOT NULL,
    signature text    NOT NULL,
    position  integer NOT NULL,
    pay_to    text    NOT NULL,
    recipient text    NOT NULL,
    slot      bigint  NOT NULL,
    PRIMARY KEY (network, signature, position)
);
CREATE INDEX IF NOT EXISTS index_svm_fundings_recipient ON index_svm_fundings (network, pay_to, recipient);

-- Price honesty (index.Prober): a 402 that moved since the last one and
-- differs from its listing as last read is not compared until the crawl
-- reads the listing again (the listing may have moved too).
ALTER TABLE index_hosts ADD COLUMN IF NOT EXISTS quote_pending boolean NOT NULL DEFAULT false;
