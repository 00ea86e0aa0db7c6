DROP TABLE IF EXISTS unpaid_work;
