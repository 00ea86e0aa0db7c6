-- Bazaar's quality figures, when a listing carries them: per resource the
-- paid calls and distinct payers over 30 days and the last call, as the
-- listing reports them (null: not reported). Per host, over its live
-- resources that carry any: how many do (quality_services), their calls
-- summed, the most distinct payers of any one of them (payers are not
-- summed: one payer may call many), and the latest call. Events written
-- before carry none, so nothing is filled from the log.
ALTER TABLE index_resources
    ADD COLUMN IF NOT EXISTS quality_calls_30d         bigint,
    ADD COLUMN IF NOT EXISTS quality_unique_payers_30d bigint,
    ADD COLUMN IF NOT EXISTS quality_last_called_at    timestamptz;

ALTER TABLE index_hosts
    ADD COLUMN IF NOT EXISTS quality_services      integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS calls_30d             bigint,
    ADD COLUMN IF NOT EXISTS unique_payers_30d_max bigint,
    ADD COLUMN IF NOT EXISTS last_called_at        timestamptz;
