-- channel_claims also follows the seller's cooperative refunds until final
-- (kind 'refund': channels names the one channel, amount is what it paid
-- back), each row written with the refund's channel.refunded event; one a
-- reorganisation undid and that was not mined again is marked gone and the
-- refund sent again (channel.refund_undone, worker/claim.go).
ALTER TABLE channel_claims DROP CONSTRAINT IF EXISTS channel_claims_kind_check;
ALTER TABLE channel_claims ADD CONSTRAINT channel_claims_kind_check CHECK (kind IN ('claim', 'settle', 'refund'));
