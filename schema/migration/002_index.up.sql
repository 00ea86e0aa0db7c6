-- The market index: projections of the host/<name> and crawl/<source>
-- event streams.

-- One row per discovery source: the crawl's saved cursor.
CREATE TABLE IF NOT EXISTS index_sources (
    url           text        PRIMARY KEY,
    cursor        integer     NOT NULL DEFAULT 0,
    total         integer     NOT NULL DEFAULT 0,
    pages_done    integer     NOT NULL DEFAULT 0,
    pass          integer     NOT NULL DEFAULT 1,
    full_scans    integer     NOT NULL DEFAULT 0,
    last_at       timestamptz,
    last_full_at  timestamptz,
    backoff_until timestamptz,
    failures      integer     NOT NULL DEFAULT 0,
    last_error    text
);

-- One row per indexed resource (its normalised URL).
CREATE TABLE IF NOT EXISTS index_resources (
    resource    text        PRIMARY KEY,
    host        text        NOT NULL,
    source      text        NOT NULL,
    description text        NOT NULL DEFAULT '',
    method      text        NOT NULL DEFAULT 'GET',
    networks    text[]      NOT NULL DEFAULT '{}',
    price_usdc  numeric,
    discoverable boolean    NOT NULL DEFAULT true,
    seen_pass   integer     NOT NULL,
    retired     boolean     NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS index_resources_host ON index_resources (host);
CREATE INDEX IF NOT EXISTS index_resources_source ON index_resources (source, seen_pass);

-- One row per host: aggregates of its live resources and its liveness.
CREATE TABLE IF NOT EXISTS index_hosts (
    host            text        PRIMARY KEY,
    services        integer     NOT NULL DEFAULT 0,
    priced_services integer     NOT NULL DEFAULT 0,
    price_min_usdc  numeric,
    price_max_usdc  numeric,
    networks        text[]      NOT NULL DEFAULT '{}',
    sample_resource text        NOT NULL DEFAULT '',
    sample_method   text        NOT NULL DEFAULT 'GET',
    sample          text        NOT NULL DEFAULT '',
    discoverable    boolean     NOT NULL DEFAULT true,
    search          text        NOT NULL DEFAULT '',
    live            boolean,
    status          integer,
    latency_ms      integer,
    checked_at      timestamptz,
    probe_error     text,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS index_hosts_services ON index_hosts (services DESC, host);
