DROP FUNCTION IF EXISTS index_host_history(text[], timestamptz);
DROP INDEX IF EXISTS index_hosts_latency;
DROP INDEX IF EXISTS index_hosts_uptime;
ALTER TABLE index_hosts
    DROP COLUMN IF EXISTS uptime_24h, DROP COLUMN IF EXISTS uptime_7d, DROP COLUMN IF EXISTS uptime_30d,
    DROP COLUMN IF EXISTS probes_24h, DROP COLUMN IF EXISTS probes_7d, DROP COLUMN IF EXISTS probes_30d,
    DROP COLUMN IF EXISTS latency_p50_ms, DROP COLUMN IF EXISTS latency_p95_ms,
    DROP COLUMN IF EXISTS first_seen, DROP COLUMN IF EXISTS last_change,
    DROP COLUMN IF EXISTS quote_matches_listing, DROP COLUMN IF EXISTS quote_differences;
ALTER TABLE index_resources DROP COLUMN IF EXISTS accepts;
DROP TABLE IF EXISTS index_changes;
DROP TABLE IF EXISTS index_probe_hours;
