-- The summary's price bands, counted per host from its live priced
-- resources and kept with the host's other aggregates in the transaction
-- that changes its resources (store: refreshHosts), so that the summary
-- sums the hosts rather than counting every resource.
ALTER TABLE index_hosts
    ADD COLUMN IF NOT EXISTS band_free       integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS band_under_1m   integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS band_under_10m  integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS band_under_100m integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS band_under_1    integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS band_over_1     integer NOT NULL DEFAULT 0;

-- index_host_price_bands recounts the price bands of hosts from their live
-- resources (prices in USDC; an unpriced resource is in no band): free, under
-- 0.001, 0.01, 0.1 and 1, and 1 or more. A host without a live resource has
-- every band at 0.
CREATE OR REPLACE FUNCTION index_host_price_bands(hosts text[]) RETURNS void LANGUAGE sql AS $$
UPDATE index_hosts h SET
    band_free = s.b0, band_under_1m = s.b1, band_under_10m = s.b2,
    band_under_100m = s.b3, band_under_1 = s.b4, band_over_1 = s.b5
FROM (
    SELECT hh.host,
        count(*) FILTER (WHERE r.price_usdc = 0) AS b0,
        count(*) FILTER (WHERE r.price_usdc > 0 AND r.price_usdc < 0.001) AS b1,
        count(*) FILTER (WHERE r.price_usdc >= 0.001 AND r.price_usdc < 0.01) AS b2,
        count(*) FILTER (WHERE r.price_usdc >= 0.01 AND r.price_usdc < 0.1) AS b3,
        count(*) FILTER (WHERE r.price_usdc >= 0.1 AND r.price_usdc < 1) AS b4,
        count(*) FILTER (WHERE r.price_usdc >= 1) AS b5
    FROM unnest(hosts) AS hh(host)
    LEFT JOIN index_resources r ON r.host = hh.host AND NOT r.retired
    GROUP BY hh.host
) s
WHERE h.host = s.host
    AND (h.band_free, h.band_under_1m, h.band_under_10m, h.band_under_100m, h.band_under_1, h.band_over_1)
        IS DISTINCT FROM (s.b0, s.b1, s.b2, s.b3, s.b4, s.b5)
$$;

SELECT index_host_price_bands(array_agg(host)) FROM index_hosts;
