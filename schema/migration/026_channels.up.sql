-- channels: the seller's record of each batch-settlement payment channel
-- (x402's batch-settlement scheme, x402/evm/channel): what it charged in
-- all, the last voucher the payer signed, and the channel's state on chain
-- as last known. The event log is the record: every change of a row is
-- the projection of an event of the channel's stream
-- (channel/<network>/<0x channel id>, store.ChannelStream), appended in the
-- same transaction. busy_call alone is not an event's: it is the call
-- running on the channel (the scheme's channel_busy), set in the
-- transaction that admits the call and cleared by the event that ends it.
CREATE TABLE IF NOT EXISTS channels (
    network               text          NOT NULL,
    channel_id            bytea         NOT NULL,
    config                jsonb         NOT NULL,
    payer                 bytea         NOT NULL,
    receiver              bytea         NOT NULL,
    token                 bytea         NOT NULL,
    charged               numeric(78,0) NOT NULL,
    signed                numeric(78,0),
    signature             bytea,
    balance               numeric(78,0) NOT NULL,
    total_claimed         numeric(78,0) NOT NULL,
    withdraw_requested_at bigint        NOT NULL DEFAULT 0,
    refund_nonce          numeric(78,0) NOT NULL DEFAULT 0,
    unclaimed_since       timestamptz,
    busy_call             text,
    created_at            timestamptz   NOT NULL DEFAULT now(),
    updated_at            timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (network, channel_id)
);

-- A call's end clears its channel's busy_call by the call's id.
CREATE INDEX IF NOT EXISTS channels_busy_call ON channels (busy_call) WHERE busy_call IS NOT NULL;
