DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'events_pkey' AND conrelid = to_regclass('events')) THEN
        ALTER TABLE events ADD PRIMARY KEY (id, created_at);
    END IF;
END;
$$;
