DROP TABLE IF EXISTS reservations;
