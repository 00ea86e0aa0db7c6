DROP TRIGGER IF EXISTS index_resource_search_host_write ON index_hosts;
DROP FUNCTION IF EXISTS index_resource_search_host();
DROP TRIGGER IF EXISTS index_resource_search_change ON index_resources;
DROP TRIGGER IF EXISTS index_resource_search_write ON index_resources;
DROP FUNCTION IF EXISTS index_resource_search_sync();
DROP FUNCTION IF EXISTS index_resource_extension_keys(jsonb);
DROP TABLE IF EXISTS index_resource_search;
