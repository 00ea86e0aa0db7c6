DROP TABLE IF EXISTS payer_code_refusals;
