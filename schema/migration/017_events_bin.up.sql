-- An event whose data has a binary form (store.BinaryData: call.paid with
-- a packed payment) keeps it in bin, as bytes, and {} in data: call.paid's
-- data was that form's base64 inside jsonb, {"p": "..."}, about 450 bytes
-- for a value of about 330 (docs/performance.md, The ledger). data stays
-- NOT NULL, so that a reader of a release before it sees an empty object
-- (blank fields), not a NULL it cannot decode. Every reader of this release
-- reads both forms. A nullable column without a default is added to the
-- partitioned table and every partition without rewriting them.
ALTER TABLE events ADD COLUMN IF NOT EXISTS bin bytea;
