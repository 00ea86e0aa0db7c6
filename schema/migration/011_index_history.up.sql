-- The index's history: projections of the host/<name> streams that the
-- host.probed, resource.indexed and resource.retired events already carry,
-- kept in the transaction that appends them (store.Append), and filled from
-- the log written before them.

-- Probes of a host by hour: how many gave a verdict (live or dead; a 429 is
-- no verdict), how many found it live, and the latencies measured. Kept for
-- 31 days; the figures of index_hosts are computed from it at each probe.
CREATE TABLE IF NOT EXISTS index_probe_hours (
    host      text        NOT NULL,
    hour      timestamptz NOT NULL,
    probes    integer     NOT NULL DEFAULT 0,
    live      integer     NOT NULL DEFAULT 0,
    latencies integer[]   NOT NULL DEFAULT '{}',
    PRIMARY KEY (host, hour)
);

-- Changes of the market, in the order they happened: the changes feed and
-- each host's timeline. from and to are JSON: a price as decimal text (or
-- null, unpriced), networks as a list, liveness as a boolean (null: not
-- measured before).
CREATE TABLE IF NOT EXISTS index_changes (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL,
    host     text        NOT NULL,
    kind     text        NOT NULL,
    resource text,
    "from"   jsonb,
    "to"     jsonb
);
CREATE INDEX IF NOT EXISTS index_changes_host ON index_changes (host, id);
CREATE INDEX IF NOT EXISTS index_changes_at ON index_changes (at);

-- What the listing asks (network, asset, amount, payTo of each option), to
-- compare with the 402 the resource answers.
ALTER TABLE index_resources ADD COLUMN IF NOT EXISTS accepts jsonb;

ALTER TABLE index_hosts
    ADD COLUMN IF NOT EXISTS uptime_24h            float8,
    ADD COLUMN IF NOT EXISTS uptime_7d             float8,
    ADD COLUMN IF NOT EXISTS uptime_30d            float8,
    ADD COLUMN IF NOT EXISTS probes_24h            integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS probes_7d             integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS probes_30d            integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS latency_p50_ms        integer,
    ADD COLUMN IF NOT EXISTS latency_p95_ms        integer,
    ADD COLUMN IF NOT EXISTS first_seen            timestamptz,
    ADD COLUMN IF NOT EXISTS last_change           timestamptz,
    ADD COLUMN IF NOT EXISTS quote_matches_listing boolean,
    ADD COLUMN IF NOT EXISTS quote_differences     jsonb;
ALTER TABLE index_hosts ALTER COLUMN first_seen SET DEFAULT now();
CREATE INDEX IF NOT EXISTS index_hosts_uptime ON index_hosts (uptime_30d DESC NULLS LAST, host) WHERE services > 0;
CREATE INDEX IF NOT EXISTS index_hosts_latency ON index_hosts (latency_p50_ms, host) WHERE services > 0;

-- index_host_history recomputes the history figures of hosts from their
-- probes by hour, as of the time as_of: uptime (share of verdicts live) and probe
-- counts over the last 24 hours, 7 and 30 days, counted by whole hours, and
-- the median and 95th percentile of the latencies measured over 30 days.
CREATE OR REPLACE FUNCTION index_host_history(hosts text[], as_of timestamptz) RETURNS void LANGUAGE sql AS $$
UPDATE index_hosts h SET
    probes_24h = s.p24, probes_7d = s.p7, probes_30d = s.p30,
    uptime_24h = s.l24::float8 / nullif(s.p24, 0),
    uptime_7d = s.l7::float8 / nullif(s.p7, 0),
    uptime_30d = s.l30::float8 / nullif(s.p30, 0),
    latency_p50_ms = s.q[1], latency_p95_ms = s.q[2]
FROM (
    SELECT hh.host,
        coalesce(sum(x.probes) FILTER (WHERE x.hour > date_trunc('hour', as_of) - interval '24 hours'), 0) AS p24,
        coalesce(sum(x.live) FILTER (WHERE x.hour > date_trunc('hour', as_of) - interval '24 hours'), 0) AS l24,
        coalesce(sum(x.probes) FILTER (WHERE x.hour > date_trunc('hour', as_of) - interval '7 days'), 0) AS p7,
        coalesce(sum(x.live) FILTER (WHERE x.hour > date_trunc('hour', as_of) - interval '7 days'), 0) AS l7,
        coalesce(sum(x.probes), 0) AS p30,
        coalesce(sum(x.live), 0) AS l30,
        (SELECT percentile_disc(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY l)
         FROM index_probe_hours y, unnest(y.latencies) l
         WHERE y.host = hh.host AND y.hour > date_trunc('hour', as_of) - interval '30 days') AS q
    FROM unnest(hosts) AS hh(host)
    LEFT JOIN index_probe_hours x ON x.host = hh.host AND x.hour > date_trunc('hour', as_of) - interval '30 days'
    GROUP BY hh.host
) s
WHERE h.host = s.host
$$;

-- The log written before: probes of the last 31 days, every listing change,
-- and each host's first and last change.
INSERT INTO index_probe_hours (host, hour, probes, live, latencies)
SELECT substr(stream, 6), date_trunc('hour', (data->>'checked_at')::timestamptz, 'UTC'),
    count(*), count(*) FILTER (WHERE (data->>'live')::boolean),
    coalesce(array_agg((data->>'latency_ms')::integer ORDER BY id) FILTER (WHERE data->>'latency_ms' IS NOT NULL), '{}')
FROM events
WHERE type = 'host.probed' AND created_at >= now() - interval '31 days'
    AND (data->>'checked_at')::timestamptz >= now() - interval '31 days'
    AND data->>'live' IS NOT NULL AND coalesce((data->>'status')::integer, 0) <> 429
GROUP BY 1, 2
ON CONFLICT (host, hour) DO NOTHING;

INSERT INTO index_changes (at, host, kind, resource, "from", "to")
SELECT at, host, kind, resource, "from", "to" FROM (
    SELECT e.id, e.created_at AS at, substr(e.stream, 6) AS host, e.data->>'resource' AS resource, e.type,
        e.data, lag(e.type) OVER w AS prev_type, lag(e.data) OVER w AS prev_data
    FROM events e
    WHERE e.type IN ('resource.indexed', 'resource.retired')
    WINDOW w AS (PARTITION BY e.data->>'resource' ORDER BY e.id)
) r, LATERAL (VALUES
    ('service.added', NULL::jsonb, r.data->'price_usdc',
        r.type = 'resource.indexed' AND (r.prev_type IS NULL OR r.prev_type = 'resource.retired')),
    ('service.retired', r.prev_data->'price_usdc', NULL::jsonb,
        r.type = 'resource.retired' AND r.prev_type = 'resource.indexed'),
    ('price.changed', coalesce(r.prev_data->'price_usdc', 'null'), coalesce(r.data->'price_usdc', 'null'),
        r.type = 'resource.indexed' AND r.prev_type = 'resource.indexed'
        AND (r.prev_data->>'price_usdc')::numeric IS DISTINCT FROM (r.data->>'price_usdc')::numeric),
    ('networks.changed', r.prev_data->'networks', r.data->'networks',
        r.type = 'resource.indexed' AND r.prev_type = 'resource.indexed'
        AND coalesce(r.prev_data->'networks', '[]') <> coalesce(r.data->'networks', '[]'))
) AS c(kind, "from", "to", happened)
WHERE c.happened AND NOT EXISTS (SELECT 1 FROM index_changes)
UNION ALL
SELECT at, host, CASE WHEN live THEN 'host.live' ELSE 'host.dead' END, NULL, to_jsonb(prev), to_jsonb(live) FROM (
    SELECT e.id, (e.data->>'checked_at')::timestamptz AS at, substr(e.stream, 6) AS host, (e.data->>'live')::boolean AS live,
        lag((e.data->>'live')::boolean) OVER (PARTITION BY e.stream ORDER BY e.id) AS prev,
        row_number() OVER (PARTITION BY e.stream ORDER BY e.id) AS n
    FROM events e
    WHERE e.type = 'host.probed' AND e.data->>'live' IS NOT NULL AND coalesce((e.data->>'status')::integer, 0) <> 429
) p
WHERE (p.n = 1 OR p.live IS DISTINCT FROM p.prev) AND NOT EXISTS (SELECT 1 FROM index_changes)
ORDER BY 1;

UPDATE index_hosts h SET first_seen = f.first_seen, last_change = c.last_change
FROM (SELECT substr(stream, 6) AS host, min(created_at) AS first_seen FROM events WHERE stream LIKE 'host/%' GROUP BY 1) f
LEFT JOIN (SELECT host, max(at) AS last_change FROM index_changes GROUP BY host) c ON c.host = f.host
WHERE h.host = f.host;

SELECT index_host_history(array_agg(host), now()) FROM index_hosts;
