-- channel_claims: the seller's claim and settle transactions of
-- batch-settlement channels (worker/claim.go), one row a transaction: a
-- claimWithSignature of many channels (kind 'claim': channels names them,
-- amount is what it claimed in all) or a settle of one receiver and token
-- (kind 'settle': amount is what went to the receiver). Each row is written
-- with the channel.claimed or channel.settled events of its receipt, and
-- followed until its block is final; a reorganisation that undid it marks
-- it gone (its channels are read from the chain again and claimed again,
-- its receiver settled again). claimed and settled totals count the rows
-- not gone.
CREATE TABLE IF NOT EXISTS channel_claims (
    network      text          NOT NULL,
    transaction  text          NOT NULL,
    kind         text          NOT NULL CHECK (kind IN ('claim', 'settle')),
    channels     bytea[]       NOT NULL DEFAULT '{}',
    receiver     bytea,
    token        bytea,
    amount       numeric(78,0) NOT NULL,
    gas_used     bigint        NOT NULL,
    block_number bigint        NOT NULL,
    block_hash   text          NOT NULL,
    state        text          NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'final', 'gone')),
    gone_since   timestamptz,
    created_at   timestamptz   NOT NULL DEFAULT now(),
    updated_at   timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (network, transaction)
);
CREATE INDEX IF NOT EXISTS channel_claims_pending ON channel_claims (network, block_number) WHERE state = 'pending';

-- channel_receivers: each receiver's and token's claimed and settled
-- totals on chain (the settlement contract's receivers(receiver, token)),
-- as each claim round last read them or made them: what was settled to the
-- receiver, whoever sent the settle.
CREATE TABLE IF NOT EXISTS channel_receivers (
    network    text          NOT NULL,
    receiver   bytea         NOT NULL,
    token      bytea         NOT NULL,
    claimed    numeric(78,0) NOT NULL,
    settled    numeric(78,0) NOT NULL,
    updated_at timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (network, receiver, token)
);

-- channel_claim_cursors: the next block the WithdrawInitiated watcher of
-- each network reads from.
CREATE TABLE IF NOT EXISTS channel_claim_cursors (
    network    text        PRIMARY KEY,
    next_block bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A channel whose claim's simulation failed is left until its charge
-- moves: refused_charged is the charge refused, refused_reason why.
ALTER TABLE channels ADD COLUMN IF NOT EXISTS claim_refused_charged numeric(78,0);
ALTER TABLE channels ADD COLUMN IF NOT EXISTS claim_refused_reason text;
-- The claim round's pick: the channels of a network with charges
-- unclaimed.
CREATE INDEX IF NOT EXISTS channels_unclaimed ON channels (network, unclaimed_since) WHERE unclaimed_since IS NOT NULL;

-- Refunds are counted from their events (channel.refunded), which are few.
CREATE INDEX IF NOT EXISTS events_channel_refunded ON events (stream) WHERE type = 'channel.refunded';
