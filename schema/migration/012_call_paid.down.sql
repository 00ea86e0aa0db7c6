DROP TRIGGER IF EXISTS calls_payment_digest ON calls;
DROP FUNCTION IF EXISTS calls_payment_digest();
ALTER TABLE calls SET (fillfactor = 70);
