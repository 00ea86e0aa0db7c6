-- A paid call's row is updated three times (running, settling, paid), each
-- time changing its state. With state in an index, every update wrote a new
-- entry in each of the table's four indexes. Indexing op alone (which never
-- changes) leaves no updated column indexed, so Postgres updates the row in
-- place on its page (a HOT update, no index writes) when the page has room:
-- fillfactor keeps 30% of each new page free for that.
DROP INDEX IF EXISTS calls_op_state;
CREATE INDEX IF NOT EXISTS calls_op ON calls (op);
ALTER TABLE calls SET (fillfactor = 70);
