-- A settled call's row keeps its settlement's response packed
-- (x402.SettleResponse.MarshalLedgerBinary: about 60 bytes for an EVM
-- settlement against 190 as the settlement column's JSON object), and its
-- result without the "call_id" and "op" its id and op columns state (the
-- reader puts them back, store.ResultObject). A refused settlement keeps
-- its JSON object in settlement, whose errorReason /ops lists. Rows written
-- before keep theirs, which every reader of this release reads; a worker
-- writes rows in ledger form 1, as before, while LEDGER_FORM=1, for the
-- apis of the releases before this migration (docs/operating.md, Upgrades).
ALTER TABLE calls ADD COLUMN IF NOT EXISTS receipt bytea;
