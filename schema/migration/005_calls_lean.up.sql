-- A call's payment is kept once, in its payment.verified event: the calls
-- row reads it from there (store.callColumns) and keeps only the ledger
-- fields it is found by (payment_key, network, payer, amount).
ALTER TABLE calls DROP COLUMN IF EXISTS payment;
