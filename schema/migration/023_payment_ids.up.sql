-- payment_ids: the payment identifiers (x402's payment-identifier
-- extension) of the paid calls admitted with one, each bound to its call.
-- key is store.PaymentIDKey of the payer and the id: an id is its payer's
-- own, so one payer's id never finds another payer's call. A row is written
-- with its call, in the transaction that admits it, by the projection of
-- the call's payment.identified event; the primary key refuses a second
-- call under the same payer and id, so that a call is never run twice for
-- one id, whichever api process admits it. Rows are kept as long as their
-- calls.
CREATE TABLE IF NOT EXISTS payment_ids (
    key        text        PRIMARY KEY,
    call_id    text        NOT NULL,
    created_at timestamptz NOT NULL
);
