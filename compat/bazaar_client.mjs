// Lists and searches a Bazaar discovery API with the official client:
// withBazaar(new HTTPFacilitatorClient({ url })) from @x402/extensions and
// @x402/core, as a buyer's agent would. Usage:
//   node bazaar_client.mjs <facilitator base URL> <query> <payTo> <other payTo>
// where <payTo> receives for what <query> finds and <other payTo> for none
// of it. Prints what it got as JSON on stdout, for the Go test to check.
import { HTTPFacilitatorClient } from "@x402/core/server";
import { withBazaar } from "@x402/extensions/bazaar";

const [url, query, payTo, otherPayTo] = process.argv.slice(2);
const client = withBazaar(new HTTPFacilitatorClient({ url }));
const bazaar = client.extensions.bazaar;

// Every resource, two a page, through offset and total.
const pages = [];
const listed = [];
for (let offset = 0; ; ) {
  const page = await bazaar.listResources({ type: "http", limit: 2, offset });
  pages.push({ x402Version: page.x402Version, pagination: page.pagination, count: page.items.length });
  listed.push(...page.items);
  offset += page.items.length;
  if (page.items.length === 0 || offset >= page.pagination.total) break;
}
const byPayTo = await bazaar.listResources({ payTo, network: "eip155:8453", scheme: "exact" });
const mcp = await bazaar.listResources({ type: "mcp" });
// Only the resources whose listing carries the bazaar extension.
const byExtension = await bazaar.listResources({ extensions: "bazaar", limit: 10 });

// The search, one a page, following the cursor.
const found = [];
const searchPages = [];
let cursor;
do {
  const page = await bazaar.search({ query, limit: 1, ...(cursor ? { cursor } : {}) });
  searchPages.push({ x402Version: page.x402Version, partialResults: page.partialResults, pagination: page.pagination });
  found.push(...page.resources);
  cursor = page.pagination?.cursor ?? undefined;
} while (cursor && searchPages.length < 20);

// The search with every filter its parameters take: each narrows what the
// query finds.
const filters = { type: "http", payTo, network: "eip155:8453", scheme: "exact" };
const filtered = {
  all: await bazaar.search({ query, ...filters }),
  byExtension: await bazaar.search({ query, ...filters, extensions: "bazaar" }),
  otherPayTo: await bazaar.search({ query, ...filters, payTo: otherPayTo }),
  otherNetwork: await bazaar.search({ query, ...filters, network: "eip155:42161" }),
  otherScheme: await bazaar.search({ query, ...filters, scheme: "upto" }),
  mcp: await bazaar.search({ query, type: "mcp" }),
};

let refused = "";
try {
  await bazaar.listResources({ limit: 1000 });
} catch (e) {
  refused = String(e.message);
}

console.log(JSON.stringify({ listed, pages, byPayTo, mcp, byExtension, found, searchPages, filtered, refused }));
