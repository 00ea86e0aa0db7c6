-- The relayer's nonces, shared by every process that sends with one key.
-- relayer_nonces holds the next nonce to hand out per (network, address);
-- relayer_txs each nonce handed out and not yet mined, with the last signed
-- transaction sent for it (raw) and who last acted on it, so that any
-- process can send it again or fill it when its own process died: a nonce
-- never stays a gap behind later ones. Rows below the chain's mined count
-- are deleted as they are found mined.
CREATE TABLE IF NOT EXISTS relayer_nonces (
    network    text   NOT NULL,
    address    text   NOT NULL,
    next_nonce bigint NOT NULL,
    PRIMARY KEY (network, address)
);

CREATE TABLE IF NOT EXISTS relayer_txs (
    network    text        NOT NULL,
    address    text        NOT NULL,
    nonce      bigint      NOT NULL,
    owner      text        NOT NULL,
    raw        bytea,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (network, address, nonce)
);
