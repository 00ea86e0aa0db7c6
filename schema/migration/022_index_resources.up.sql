-- Resources as first-class: what a listing (or the origin's 402) says of
-- each resource beyond its price, kept as given, and what the resources
-- search and the Bazaar discovery API filter and rank by.
--
-- tags, the input and output schema (the call contract an agent builds a
-- request from), the listing's extensions (echoed by the Bazaar discovery
-- API), its x402 version and MIME type. pay_tos, schemes and assets are
-- the accepts' receivers (EVM addresses lower-case), schemes and assets
-- (lower-case), and tag_keys the tags in lower case, kept by the
-- projection for the filters. Events written
-- before carry none: the next crawl pass fills them.
ALTER TABLE index_resources
    ADD COLUMN IF NOT EXISTS tags          text[]   NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS input_schema  jsonb,
    ADD COLUMN IF NOT EXISTS output_schema jsonb,
    ADD COLUMN IF NOT EXISTS extensions    jsonb,
    ADD COLUMN IF NOT EXISTS x402_version  smallint NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS mime_type     text     NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS pay_tos       text[]   NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS schemes       text[]   NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS assets        text[]   NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS tag_keys      text[]   NOT NULL DEFAULT '{}';

-- The text a search matches, weighted: tags (A), description (B), the URL's
-- words (C). Declared immutable so that a stored column can use it
-- (array_to_string is only stable, but on text[] it is not affected by any
-- setting).
CREATE OR REPLACE FUNCTION index_resource_document(resource text, description text, tags text[])
RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT setweight(to_tsvector('english'::regconfig, coalesce(array_to_string(tags, ' '), '')), 'A')
    || setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'B')
    || setweight(to_tsvector('simple'::regconfig, regexp_replace(resource, '[^[:alnum:]]+', ' ', 'g')), 'C')
$$;

ALTER TABLE index_resources
    ADD COLUMN IF NOT EXISTS document tsvector GENERATED ALWAYS AS (index_resource_document(resource, description, tags)) STORED;

CREATE INDEX IF NOT EXISTS index_resources_document ON index_resources USING gin (document) WHERE NOT retired;
CREATE INDEX IF NOT EXISTS index_resources_pay_tos ON index_resources USING gin (pay_tos) WHERE NOT retired;
CREATE INDEX IF NOT EXISTS index_resources_tag_keys ON index_resources USING gin (tag_keys) WHERE NOT retired;
-- The Bazaar list's order (by URL) and its count, read from the index
-- alone.
CREATE INDEX IF NOT EXISTS index_resources_live_url ON index_resources (resource) WHERE NOT retired;
-- The Bazaar list's order (newest first) and the resources search's
-- order without a text.
CREATE INDEX IF NOT EXISTS index_resources_updated ON index_resources (updated_at DESC, resource) WHERE NOT retired;

-- The options of the last 402 a host's sample resource answered, so that
-- a listing that changes is compared with it at once (price honesty
-- compared again whenever either side changes).
ALTER TABLE index_hosts
    ADD COLUMN IF NOT EXISTS quote_accepts jsonb;

-- Proof of ownership: the receivers (payTo) an origin proved it controls,
-- by serving ownership proofs (x402scan's form: the origin string signed by
-- the payTo key, EIP-191 for EVM, ed25519 for Solana) in its discovery
-- document. One row per origin and proved receiver; an origin read again
-- replaces its rows.
CREATE TABLE IF NOT EXISTS index_ownership (
    origin      text        NOT NULL,
    pay_to      text        NOT NULL,
    via         text        NOT NULL,
    verified_at timestamptz NOT NULL,
    PRIMARY KEY (origin, pay_to)
);
