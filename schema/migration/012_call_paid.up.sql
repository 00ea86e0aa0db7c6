-- A paid call admitted since this migration's release begins its stream
-- with call.paid, which holds its payment in the ledger's compact form and
-- its request's hash: its calls row keeps neither the payer nor the
-- request's hash (empty; store reads them from the event), and in
-- payment_key the replay key's digest (store.PaymentDigest: the base64 of
-- the first 16 bytes of its SHA-256, 24 characters, where the key takes
-- about 120) rather than the key. The unique index on payment_key stays
-- the replay guard: a key written whole (by an api of a release before it
-- while an upgrade replaces them) is turned into its digest as it is
-- inserted, so that a payment admitted by either release is refused by the
-- other. The trigger runs for those keys only: a key names its network
-- (CAIP-2, "eip155:8453"), and so has a colon, which base64 has not.
CREATE OR REPLACE FUNCTION calls_payment_digest() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.payment_key := encode(substring(sha256(convert_to(NEW.payment_key, 'UTF8')) FROM 1 FOR 16), 'base64');
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS calls_payment_digest ON calls;
CREATE TRIGGER calls_payment_digest
    BEFORE INSERT ON calls
    FOR EACH ROW WHEN (strpos(NEW.payment_key, ':') > 0)
    EXECUTE FUNCTION calls_payment_digest();

-- The calls of the last day may see their payment sent again (a payment
-- is valid for minutes): their keys become digests, so that the guard
-- refuses the payment whichever form its call was admitted under. Older
-- calls keep their keys, which store also looks up.
UPDATE calls SET payment_key = encode(substring(sha256(convert_to(payment_key, 'UTF8')) FROM 1 FOR 16), 'base64')
    WHERE created_at > now() - interval '1 day' AND strpos(payment_key, ':') > 0;
-- A calls row more than doubles at its first update (the result, then the
-- settlement): the 30% of each page that fillfactor 70 kept free never
-- held a page's updates, which went to other pages all the same. Pages are
-- filled whole again, smaller both as written and compacted
-- (docs/performance.md, The ledger).
ALTER TABLE calls SET (fillfactor = 100);
