// bench_csvparse.mjs times the npm package csv-parse over a CSV file, as
// BenchmarkParseCSV times internal/table: the whole text parsed into
// records, n times; it prints {"ns": the nanoseconds one parse took on
// average, "count": the records} (process start and reading the file not
// included), as internal/nodetest reads it.
//
// Usage: node bench_csvparse.mjs <repo root> <csv file> <n>
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const [root, file, n] = process.argv.slice(2);
const require = createRequire(path.join(root, "compat", "package.json"));
const { parse } = require("csv-parse/sync");
const text = readFileSync(file, "utf8");
let records = 0;
const start = process.hrtime.bigint();
for (let i = 0; i < Number(n); i++) {
  records = parse(text, { bom: true, relax_column_count: true }).length;
}
const ns = Number(process.hrtime.bigint() - start) / Number(n);
console.log(JSON.stringify({ ns, count: records }));
