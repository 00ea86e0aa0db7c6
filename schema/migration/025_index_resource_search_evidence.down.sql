DROP TRIGGER IF EXISTS index_resource_search_evidence_write ON index_host_evidence;
DROP FUNCTION IF EXISTS index_resource_search_evidence();
-- index_resource_search_sync as migration 024 made it.
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
ALTER TABLE index_resource_search DROP COLUMN IF EXISTS host_payers_30d;
