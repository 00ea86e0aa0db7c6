DROP TABLE IF EXISTS index_hosts;
DROP TABLE IF EXISTS index_listings;
DROP TABLE IF EXISTS index_resources;
DROP TABLE IF EXISTS index_sources;
