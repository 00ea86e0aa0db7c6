// Pays operations of a running x402d on Solana with the official x402 client
// packages (@x402/fetch, @x402/svm, @solana/kit; pinned in package.json),
// the client reading the chain through the Solana RPC at rpcURL, and prints
// what happened as JSON. Every quote is first decoded and validated by
// @x402/core. Usage:
//   node compat/svm_pay_ops.mjs <base URL> <rpc URL> <payer key, base58 of 64 bytes> '<[{"op":..,"body":..}]>'
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { ExactSvmScheme } = require("@x402/svm/exact/client");
const { decodePaymentRequiredHeader } = require("@x402/core/http");
const { parsePaymentRequired } = require("@x402/core/schemas");
const { createKeyPairSignerFromBytes, getBase58Encoder } = require("@solana/kit");

const [base, rpcUrl, secret, callsJSON] = process.argv.slice(2);
const signer = await createKeyPairSignerFromBytes(getBase58Encoder().encode(secret));
const client = new x402Client();
client.register("solana:*", new ExactSvmScheme(signer, { rpcUrl }));
// Pay on Solana even when an EVM option is listed first.
client.registerPolicy((_version, reqs) => reqs.filter((r) => r.network.startsWith("solana:")));
const pay = wrapFetchWithPayment(fetch, client);

const out = { address: signer.address, calls: [] };
for (const { op, body } of JSON.parse(callsJSON)) {
  const url = `${base}/api/x402/${op}`;
  const init = { method: "POST", headers: { "Content-Type": "application/json" }, body };
  const call = { op };
  const started = Date.now();
  const quote = await fetch(url, init);
  call.quoteStatus = quote.status;
  const header = quote.headers.get("PAYMENT-REQUIRED");
  if (header) {
    const decoded = decodePaymentRequiredHeader(header);
    const parsed = parsePaymentRequired(decoded);
    call.quoteValid = parsed.success === true;
    if (!call.quoteValid) call.quoteError = JSON.stringify(parsed.error);
    const sol = decoded.accepts.find((r) => r.network.startsWith("solana:"));
    call.amount = sol?.amount ?? null;
    call.maxTimeoutSeconds = sol?.maxTimeoutSeconds ?? null;
    call.extra = sol?.extra ?? null;
    call.hasBazaar = Boolean(decoded.extensions?.bazaar);
  }
  try {
    const res = await pay(url, init);
    call.status = res.status;
    call.body = await res.text();
    const settled = res.headers.get("PAYMENT-RESPONSE");
    call.settlement = settled ? decodePaymentResponseHeader(settled) : null;
  } catch (e) {
    call.status = 0;
    call.body = String(e?.stack ?? e);
  }
  call.ms = Date.now() - started;
  out.calls.push(call);
}
console.log(JSON.stringify(out));
