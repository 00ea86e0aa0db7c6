DROP FUNCTION IF EXISTS index_host_price_bands(text[]);
ALTER TABLE index_hosts
    DROP COLUMN IF EXISTS band_free, DROP COLUMN IF EXISTS band_under_1m, DROP COLUMN IF EXISTS band_under_10m,
    DROP COLUMN IF EXISTS band_under_100m, DROP COLUMN IF EXISTS band_under_1, DROP COLUMN IF EXISTS band_over_1;
