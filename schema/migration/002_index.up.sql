-- The market index: projections of the host/<name> and crawl/<source>
-- event streams.

-- One row per discovery source: the crawl's saved cursor in its current
-- pass.
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
    resource     text        PRIMARY KEY,
    host         text        NOT NULL,
    description  text        NOT NULL DEFAULT '',
    method       text        NOT NULL DEFAULT 'GET',
    networks     text[]      NOT NULL DEFAULT '{}',
    price_usdc   numeric,
    discoverable boolean     NOT NULL DEFAULT true,
    retired      boolean     NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL,
    -- What the hosts query's q matches, lower-case.
    search       text        GENERATED ALWAYS AS (lower(resource || ' ' || description)) STORED
);
CREATE INDEX IF NOT EXISTS index_resources_host ON index_resources (host) WHERE NOT retired;

-- Which source lists which resource, and in which of the source's passes it
-- was last seen: a resource is retired when no source lists it any more.
CREATE TABLE IF NOT EXISTS index_listings (
    source    text    NOT NULL,
    resource  text    NOT NULL,
    seen_pass integer NOT NULL,
    PRIMARY KEY (source, resource)
);
CREATE INDEX IF NOT EXISTS index_listings_resource ON index_listings (resource);

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
    live            boolean,
    status          integer,
    latency_ms      integer,
    checked_at      timestamptz,
    probe_error     text,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    search          text        GENERATED ALWAYS AS (lower(host || ' ' || sample_resource || ' ' || sample)) STORED
);
CREATE INDEX IF NOT EXISTS index_hosts_services ON index_hosts (services DESC, host);
CREATE INDEX IF NOT EXISTS index_hosts_price ON index_hosts (price_min_usdc, host) WHERE services > 0;

-- Trigram indexes make q (a substring, LIKE '%q%') fast over many
-- resources. pg_trgm is a trusted extension, but a role may still be unable
-- to create it: then q scans, which is correct and only slower.
DO $$
DECLARE
    ns text;
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pg_trgm is not available (%): the index q search scans', SQLERRM;
    END;
    SELECT n.nspname INTO ns FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF ns IS NOT NULL THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS index_resources_search ON index_resources USING gin (search %I.gin_trgm_ops) WITH (fastupdate = off) WHERE NOT retired', ns);
    END IF;
END
$$;
