// Differential oracle for internal/table: parses each case with the npm
// package csv-parse and prints the raw records (or the error code).
//
// Usage: node csvparse.mjs <repo root>  (cases as JSON on stdin:
// [{"input": "...", "delimiter": ","}], results as JSON on stdout:
// [{"records": [["..."]]} | {"error": "CODE"}]).
//
// Options are chosen to be RFC 4180 as internal/table reads it: the given
// delimiter, '"' both quote and escape, a leading BOM dropped, CRLF, LF and
// lone CR all ending records, empty lines skipped, nothing trimmed, field
// counts not checked here (the Go side compares them itself).
//
// internal/table treats a '"' inside an unquoted field as an ordinary
// character but refuses text after a closing quote. csv-parse has one switch
// for both (relax_quotes), so each case is parsed strictly first, and only
// when the strict parse fails on a quote inside an unquoted field
// (INVALID_OPENING_QUOTE) is it parsed again with relax_quotes.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const root = process.argv[2];
if (!root) {
  console.error("usage: node csvparse.mjs <repo root>");
  process.exit(2);
}
const require = createRequire(path.join(root, "compat", "package.json"));
const { parse } = require("csv-parse/sync");

const cases = JSON.parse(readFileSync(0, "utf8"));
const results = cases.map(({ input, delimiter }) => {
  const options = {
    delimiter,
    quote: '"',
    escape: '"',
    bom: true,
    record_delimiter: ["\r\n", "\n", "\r"],
    skip_empty_lines: true,
    relax_column_count: true,
    relax_quotes: false,
    trim: false,
  };
  try {
    return { records: parse(input, options) };
  } catch (err) {
    if (err.code !== "INVALID_OPENING_QUOTE") {
      return { error: err.code || String(err) };
    }
  }
  try {
    return { records: parse(input, { ...options, relax_quotes: true }) };
  } catch (err) {
    return { error: err.code || String(err) };
  }
});
process.stdout.write(JSON.stringify(results));
