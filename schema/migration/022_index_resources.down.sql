DROP TABLE IF EXISTS index_ownership;
ALTER TABLE index_hosts DROP COLUMN IF EXISTS quote_accepts;
DROP INDEX IF EXISTS index_resources_updated;
DROP INDEX IF EXISTS index_resources_live_url;
DROP INDEX IF EXISTS index_resources_tag_keys;
DROP INDEX IF EXISTS index_resources_pay_tos;
DROP INDEX IF EXISTS index_resources_document;
ALTER TABLE index_resources DROP COLUMN IF EXISTS document;
DROP FUNCTION IF EXISTS index_resource_document(text, text, text[]);
ALTER TABLE index_resources
    DROP COLUMN IF EXISTS tag_keys,
    DROP COLUMN IF EXISTS assets,
    DROP COLUMN IF EXISTS schemes,
    DROP COLUMN IF EXISTS pay_tos,
    DROP COLUMN IF EXISTS mime_type,
    DROP COLUMN IF EXISTS x402_version,
    DROP COLUMN IF EXISTS extensions,
    DROP COLUMN IF EXISTS output_schema,
    DROP COLUMN IF EXISTS input_schema,
    DROP COLUMN IF EXISTS tags;
