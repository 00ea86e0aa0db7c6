-- The events written in their binary form keep their data only in bin, and
-- the log is append-only: dropping the column would lose their payments, so
-- it is dropped only while no event has one.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('events') AND attname = 'bin' AND NOT attisdropped)
       AND EXISTS (SELECT 1 FROM events WHERE bin IS NOT NULL) THEN
        RAISE EXCEPTION 'events keep data in bin (migration 017): not dropped';
    END IF;
END;
$$;
ALTER TABLE events DROP COLUMN IF EXISTS bin;
