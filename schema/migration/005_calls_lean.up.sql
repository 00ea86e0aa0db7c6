-- A call's payment is kept once, in its payment.verified event: the calls
-- row reads it from there (store.callPayment) and keeps only the ledger
-- fields it is found by (payment_key, network, payer, amount). The column
-- stays for the rows written before, and for api processes of the releases
-- before it while an upgrade replaces them (after the workers, which read
-- either); nothing writes it any more.
ALTER TABLE calls ALTER COLUMN payment DROP NOT NULL;
