DROP TABLE IF EXISTS payment_ids;
