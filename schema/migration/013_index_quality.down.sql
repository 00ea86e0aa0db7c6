ALTER TABLE index_hosts
    DROP COLUMN IF EXISTS quality_services,
    DROP COLUMN IF EXISTS calls_30d,
    DROP COLUMN IF EXISTS unique_payers_30d_max,
    DROP COLUMN IF EXISTS last_called_at;

ALTER TABLE index_resources
    DROP COLUMN IF EXISTS quality_calls_30d,
    DROP COLUMN IF EXISTS quality_unique_payers_30d,
    DROP COLUMN IF EXISTS quality_last_called_at;
