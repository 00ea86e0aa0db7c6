DROP INDEX IF EXISTS events_channel_refunded;
DROP INDEX IF EXISTS channels_unclaimed;
ALTER TABLE channels DROP COLUMN IF EXISTS claim_refused_reason;
ALTER TABLE channels DROP COLUMN IF EXISTS claim_refused_charged;
DROP TABLE IF EXISTS channel_claim_cursors;
DROP TABLE IF EXISTS channel_receivers;
DROP TABLE IF EXISTS channel_claims;
