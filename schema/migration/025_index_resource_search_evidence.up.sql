-- The resources search ranks by its host's distinct payers over 30 days
-- (store.resourceEvidenceBoost): copied onto the narrow side table
-- index_resource_search (migration 024) so that scoring every match reads
-- only its row. Null where the host's evidence is not measured (no row in
-- index_host_evidence). Kept by a trigger on index_host_evidence; a
-- resource written is copied with its host's figure by
-- index_resource_search_sync.
ALTER TABLE index_resource_search ADD COLUMN IF NOT EXISTS host_payers_30d bigint;

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
    INSERT INTO index_resource_search AS s (resource, document, host_live, host_uptime_30d, host_payers_30d, updated_at, host,
        price_usdc, networks, assets, schemes, pay_tos, tag_keys, extension_keys)
    SELECT NEW.resource, NEW.document, h.live, h.uptime_30d, e.payers_30d, NEW.updated_at, NEW.host, NEW.price_usdc,
        NEW.networks, NEW.assets, NEW.schemes, NEW.pay_tos, NEW.tag_keys, index_resource_extension_keys(NEW.extensions)
    FROM (SELECT) one LEFT JOIN index_hosts h ON h.host = NEW.host LEFT JOIN index_host_evidence e ON e.host = NEW.host
    ON CONFLICT (resource) DO UPDATE SET document = excluded.document, host_live = excluded.host_live,
        host_uptime_30d = excluded.host_uptime_30d, host_payers_30d = excluded.host_payers_30d,
        updated_at = excluded.updated_at, host = excluded.host,
        price_usdc = excluded.price_usdc, networks = excluded.networks, assets = excluded.assets, schemes = excluded.schemes,
        pay_tos = excluded.pay_tos, tag_keys = excluded.tag_keys, extension_keys = excluded.extension_keys;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION index_resource_search_evidence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.host <> NEW.host) THEN
        UPDATE index_resource_search SET host_payers_30d = NULL
        WHERE host = OLD.host AND host_payers_30d IS NOT NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN NULL;
    END IF;
    UPDATE index_resource_search SET host_payers_30d = NEW.payers_30d
    WHERE host = NEW.host AND host_payers_30d IS DISTINCT FROM NEW.payers_30d;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS index_resource_search_evidence_write ON index_host_evidence;
CREATE TRIGGER index_resource_search_evidence_write AFTER INSERT OR UPDATE OR DELETE ON index_host_evidence
    FOR EACH ROW EXECUTE FUNCTION index_resource_search_evidence();

UPDATE index_resource_search s SET host_payers_30d = e.payers_30d
FROM index_host_evidence e
WHERE e.host = s.host AND s.host_payers_30d IS DISTINCT FROM e.payers_30d;
