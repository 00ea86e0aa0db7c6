ALTER TABLE calls ADD COLUMN IF NOT EXISTS payment jsonb;
UPDATE calls SET payment = e.data->'payment'
    FROM events e WHERE e.stream = 'call/' || calls.id AND e.type = 'payment.verified';
