-- The resources search's narrow side table: per live resource, only what
-- a text search matches, filters and ranks by, so that scoring every match
-- reads a row of a few hundred bytes instead of the resource's whole row
-- (accepts, schemas, extensions). Kept by triggers: a resource written
-- (index_resources) is copied here while live and removed when retired or
-- deleted; its host's liveness (index_hosts.live, uptime_30d) is copied
-- onto its host's rows when it changes. The columns ranking reads come
-- first (a row is decoded up to the last column read).
CREATE TABLE IF NOT EXISTS index_resource_search (
    resource        text        PRIMARY KEY,
    document        tsvector    NOT NULL,
    host_live       boolean,
    host_uptime_30d float8,
    updated_at      timestamptz NOT NULL,
    host            text        NOT NULL,
    price_usdc      numeric,
    networks        text[]      NOT NULL,
    assets          text[]      NOT NULL,
    schemes         text[]      NOT NULL,
    pay_tos         text[]      NOT NULL,
    tag_keys        text[]      NOT NULL,
    extension_keys  text[]      NOT NULL
);

CREATE INDEX IF NOT EXISTS index_resource_search_document ON index_resource_search USING gin (document);
CREATE INDEX IF NOT EXISTS index_resource_search_pay_tos ON index_resource_search USING gin (pay_tos);
CREATE INDEX IF NOT EXISTS index_resource_search_tag_keys ON index_resource_search USING gin (tag_keys);
CREATE INDEX IF NOT EXISTS index_resource_search_host ON index_resource_search (host);

-- The keys jsonb's ? operator finds at the top level of a listing's
-- extensions: an object's keys, an array's strings, a string itself.
CREATE OR REPLACE FUNCTION index_resource_extension_keys(extensions jsonb)
RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT coalesce(CASE jsonb_typeof(extensions)
    WHEN 'object' THEN ARRAY(SELECT jsonb_object_keys(extensions))
    WHEN 'array' THEN ARRAY(SELECT e #>> '{}' FROM jsonb_array_elements(extensions) e WHERE jsonb_typeof(e) = 'string')
    WHEN 'string' THEN ARRAY[extensions #>> '{}']
END, '{}')
$$;

CREATE OR REPLACE FUNCTION index_resource_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.resource <> NEW.resource) THEN
        DELETE FROM index_resource_search WHERE resource = OLD.resource;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN NULL;
    END IF;
    IF NEW.retired THEN
        DELETE FROM index_resource_search WHERE resource = NEW.resource;
        RETURN NULL;
    END IF;
    INSERT INTO index_resource_search AS s (resource, document, host_live, host_uptime_30d, updated_at, host, price_usdc,
        networks, assets, schemes, pay_tos, tag_keys, extension_keys)
    SELECT NEW.resource, NEW.document, h.live, h.uptime_30d, NEW.updated_at, NEW.host, NEW.price_usdc,
        NEW.networks, NEW.assets, NEW.schemes, NEW.pay_tos, NEW.tag_keys, index_resource_extension_keys(NEW.extensions)
    FROM (SELECT) one LEFT JOIN index_hosts h ON h.host = NEW.host
    ON CONFLICT (resource) DO UPDATE SET document = excluded.document, host_live = excluded.host_live,
        host_uptime_30d = excluded.host_uptime_30d, updated_at = excluded.updated_at, host = excluded.host,
        price_usdc = excluded.price_usdc, networks = excluded.networks, assets = excluded.assets, schemes = excluded.schemes,
        pay_tos = excluded.pay_tos, tag_keys = excluded.tag_keys, extension_keys = excluded.extension_keys;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS index_resource_search_write ON index_resources;
CREATE TRIGGER index_resource_search_write AFTER INSERT OR DELETE ON index_resources
    FOR EACH ROW EXECUTE FUNCTION index_resource_search_sync();
DROP TRIGGER IF EXISTS index_resource_search_change ON index_resources;
CREATE TRIGGER index_resource_search_change AFTER UPDATE ON index_resources
    FOR EACH ROW WHEN ((OLD.resource, OLD.retired, OLD.document, OLD.updated_at, OLD.host, OLD.price_usdc, OLD.networks,
        OLD.assets, OLD.schemes, OLD.pay_tos, OLD.tag_keys, OLD.extensions)
        IS DISTINCT FROM (NEW.resource, NEW.retired, NEW.document, NEW.updated_at, NEW.host, NEW.price_usdc, NEW.networks,
        NEW.assets, NEW.schemes, NEW.pay_tos, NEW.tag_keys, NEW.extensions))
    EXECUTE FUNCTION index_resource_search_sync();

CREATE OR REPLACE FUNCTION index_resource_search_host() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE index_resource_search SET host_live = NULL, host_uptime_30d = NULL
        WHERE host = OLD.host AND (host_live IS NOT NULL OR host_uptime_30d IS NOT NULL);
        RETURN NULL;
    END IF;
    UPDATE index_resource_search SET host_live = NEW.live, host_uptime_30d = NEW.uptime_30d
    WHERE host = NEW.host AND (host_live, host_uptime_30d) IS DISTINCT FROM (NEW.live, NEW.uptime_30d);
    RETURN NULL;
END
$$;

-- No WHEN clause nor column list: either would make the trigger depend on
-- the liveness columns, which migration 011's down drops; the update above
-- changes only the rows whose copy differs.
DROP TRIGGER IF EXISTS index_resource_search_host_write ON index_hosts;
CREATE TRIGGER index_resource_search_host_write AFTER INSERT OR UPDATE OR DELETE ON index_hosts
    FOR EACH ROW EXECUTE FUNCTION index_resource_search_host();

INSERT INTO index_resource_search (resource, document, host_live, host_uptime_30d, updated_at, host, price_usdc,
    networks, assets, schemes, pay_tos, tag_keys, extension_keys)
SELECT r.resource, r.document, h.live, h.uptime_30d, r.updated_at, r.host, r.price_usdc,
    r.networks, r.assets, r.schemes, r.pay_tos, r.tag_keys, index_resource_extension_keys(r.extensions)
FROM index_resources r LEFT JOIN index_hosts h ON h.host = r.host
WHERE NOT r.retired
ON CONFLICT (resource) DO NOTHING;
