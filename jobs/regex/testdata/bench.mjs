// bench.mjs times V8's RegExp over a text, as BenchmarkRegex1MB times the
// regex operation: every match of pattern with flags (matchAll), n times,
// and prints {"ns": the nanoseconds one pass took on average, "count": the
// matches of the last pass} (process start and reading the text not
// included), as internal/nodetest reads it.
//
// Usage: node bench.mjs <text file> <pattern> <flags> <n>
import { readFileSync } from "node:fs";

const [file, pattern, flags, n] = process.argv.slice(2);
const text = readFileSync(file, "utf8");
const re = new RegExp(pattern, flags);
let matches = 0;
const start = process.hrtime.bigint();
for (let i = 0; i < Number(n); i++) {
  matches = 0;
  for (const m of text.matchAll(re)) {
    matches += m.length > 0 ? 1 : 0;
  }
}
const ns = Number(process.hrtime.bigint() - start) / Number(n);
console.log(JSON.stringify({ ns, count: matches }));
