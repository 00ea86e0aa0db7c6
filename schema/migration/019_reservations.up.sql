-- A paid call's claim on its payer's balance while it is in flight
-- (store.Reserve): written when its call is admitted, in the same
-- transaction. It counts while its call is queued, running or settling
-- (ended_at null), or was paid after the balance it is weighed against was
-- read (ended_at), and only until its authorization can no longer be
-- settled: a reservation ends with its call, and no crash can leave one
-- counting past its validBefore. The trigger below ends it in the
-- transaction that ends its call: a call that ends unpaid deletes it, a paid
-- one stamps ended_at, and a call in flight again (a settlement sent again
-- after a reorganisation) clears the stamp. Rows that no longer count are
-- deleted by later admissions.
CREATE TABLE IF NOT EXISTS reservations (
    call_id      text        PRIMARY KEY,
    network      text        NOT NULL,
    asset        text        NOT NULL,
    payer        text        NOT NULL,
    amount       numeric     NOT NULL,
    valid_before timestamptz NOT NULL,
    ended_at     timestamptz
);
CREATE INDEX IF NOT EXISTS reservations_payer ON reservations (payer, asset, network, ended_at);
CREATE INDEX IF NOT EXISTS reservations_valid_before ON reservations (valid_before);

CREATE OR REPLACE FUNCTION reservations_follow_call() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('queued', 'running', 'settling') THEN
        IF OLD.state NOT IN ('queued', 'running', 'settling') THEN
            UPDATE reservations SET ended_at = NULL WHERE call_id = NEW.id AND ended_at IS NOT NULL;
        END IF;
    ELSIF OLD.state IN ('queued', 'running', 'settling') THEN
        IF NEW.state = 'paid' THEN
            UPDATE reservations SET ended_at = now() WHERE call_id = NEW.id;
        ELSE
            DELETE FROM reservations WHERE call_id = NEW.id;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS reservations_follow_call ON calls;
CREATE TRIGGER reservations_follow_call AFTER UPDATE OF state ON calls
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION reservations_follow_call();
