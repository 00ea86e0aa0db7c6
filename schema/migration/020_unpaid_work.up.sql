-- unpaid_work: one row for each paid call whose work ended unpaid (its run
-- failed or passed its payment's validBefore, or its settlement was
-- refused), under each key it is counted by: its payer
-- (payer:<network>/<address>) and, for a run, its client address
-- (client:<address or /64>). Every api process reads the recent rows to
-- limit those keys' further paid calls (store.UnpaidWork); rows older than
-- any limit's window are deleted as new ones come.
CREATE TABLE IF NOT EXISTS unpaid_work (
    key text        NOT NULL,
    at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS unpaid_work_at ON unpaid_work (at);
