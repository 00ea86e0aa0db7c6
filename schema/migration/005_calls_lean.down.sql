UPDATE calls SET payment = e.data->'payment'
    FROM events e WHERE calls.payment IS NULL AND e.stream = 'call/' || calls.id AND e.type = 'payment.verified';
ALTER TABLE calls ALTER COLUMN payment SET NOT NULL;
