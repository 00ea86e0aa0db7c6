-- The wallets and wallet factories whose code made a settlement fail after
-- their payment was verified (a transaction that reverted on chain, or a
-- simulation at the transaction's fees that failed), each refused until
-- refused_until (PAYER_CODE_REFUSE_FOR): verification refuses their
-- payments and the relayer sends none of theirs. Every api and worker reads
-- it; rows whose refusal ended are deleted as new ones come.
CREATE TABLE IF NOT EXISTS payer_code_refusals (
    network       text        NOT NULL,
    address       text        NOT NULL,
    refused_until timestamptz NOT NULL,
    PRIMARY KEY (network, address)
);
