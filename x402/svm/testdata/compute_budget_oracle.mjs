// Reads JSON lines {"limit": "<hex>", "price": "<hex>"} (the data of a
// payment's instructions 0 and 1, both of the Compute Budget program) on
// standard input and prints, for each, the reason the official facilitator
// (@x402/svm's ExactSvmScheme, installed in compat/ by `go tool task npm`)
// refuses them with, or "" when it passes them.
//
// Usage: node compute_budget_oracle.mjs COMPAT_DIR < cases
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(`${process.argv[2]}/package.json`);
const { ExactSvmScheme } = require("@x402/svm/exact/facilitator");

const COMPUTE_BUDGET = "ComputeBudget111111111111111111111111111111";
const scheme = new ExactSvmScheme({ getAddresses: () => [] });
const out = [];
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (!line.trim()) continue;
  const c = JSON.parse(line);
  const ix = (hex) => ({ programAddress: COMPUTE_BUDGET, data: Uint8Array.from(Buffer.from(hex, "hex")) });
  let reason = "";
  try {
    scheme.verifyComputeLimitInstruction(ix(c.limit));
    scheme.verifyComputePriceInstruction(ix(c.price));
  } catch (e) {
    reason = e.message;
  }
  out.push(reason);
}
console.log(JSON.stringify(out));
