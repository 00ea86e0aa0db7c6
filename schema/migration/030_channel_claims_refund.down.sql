DELETE FROM channel_claims WHERE kind = 'refund';
ALTER TABLE channel_claims DROP CONSTRAINT IF EXISTS channel_claims_kind_check;
ALTER TABLE channel_claims ADD CONSTRAINT channel_claims_kind_check CHECK (kind IN ('claim', 'settle'));
