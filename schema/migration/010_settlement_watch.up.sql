-- Settlement transactions followed after their receipt until final by
-- their network's policy (FINALITY_<CHAIN>): one row a transaction, for
-- every paid call it settled (a batch carries dozens), deleted when the
-- transaction is final. It is the projection of the settlement events: a
-- settlement.confirmed with a block adds its call to its transaction's row,
-- settlement.final (on the stream chain/<network>) deletes the rows it names,
-- settlement.resent and settlement.lost take their call out of its row.
-- amount is the sum of the calls' prices: revenue pending finality.
-- gone_since is when the transaction was first found in no block of the
-- chain (a reorganisation undid it).
CREATE TABLE IF NOT EXISTS settlement_watch (
    network    text        NOT NULL,
    tx_hash    text        NOT NULL,
    block      bigint      NOT NULL,
    block_hash text        NOT NULL,
    calls      text[]      NOT NULL,
    amount     numeric     NOT NULL,
    gone_since timestamptz,
    PRIMARY KEY (network, tx_hash)
);

-- relayer_txs keeps a nonce's transaction until the block that mined it is
-- final, no longer only until it is mined: after a reorganisation the
-- keeper gives the node the undone transactions again from these records.

-- A paid call whose settlement a reorganisation undid for good is 'lost'.
ALTER TABLE calls DROP CONSTRAINT IF EXISTS calls_state;
ALTER TABLE calls ADD CONSTRAINT calls_state CHECK (state IN ('queued', 'running', 'settling', 'paid', 'failed', 'unpaid', 'lost')) NOT VALID;

-- The revenue lost to reorganisations, per network: the sum of the
-- settlement.lost events, updated with each (a partial index on the lost
-- calls would cost every paid call's in-place updates, whose state it reads).
CREATE TABLE IF NOT EXISTS settlement_losses (
    network text    PRIMARY KEY,
    calls   bigint  NOT NULL,
    amount  numeric NOT NULL
);
