-- A paid call's claim on its payer's balance while it is in flight
-- (store.Reserve): written when its call is admitted, in the same
-- transaction. It counts only while its call is queued, running or
-- settling (or paid after the balance it is weighed against was read) and
-- its authorization can still be settled: a reservation ends with its
-- call, and no crash can leave one for longer than its validBefore. Rows
-- that no longer count are deleted by later admissions.
CREATE TABLE IF NOT EXISTS reservations (
    call_id      text        PRIMARY KEY,
    network      text        NOT NULL,
    asset        text        NOT NULL,
    payer        text        NOT NULL,
    amount       numeric     NOT NULL,
    valid_before timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_payer ON reservations (payer, asset, network);
CREATE INDEX IF NOT EXISTS reservations_valid_before ON reservations (valid_before);
