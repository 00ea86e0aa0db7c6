DROP TRIGGER IF EXISTS reservations_follow_call ON calls;
DROP FUNCTION IF EXISTS reservations_follow_call();
DROP TABLE IF EXISTS reservations;
