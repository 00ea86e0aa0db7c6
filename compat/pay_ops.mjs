// Pays operations of a running x402d with the official x402 client packages
// (@x402/fetch, @x402/evm, @x402/core, viem; pinned in package.json) and
// prints what happened as JSON. Every quote is first decoded and validated by
// @x402/core. Usage: node compat/pay_ops.mjs <base URL> <dev account> '<[{"op":..,"body":..}]>'
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { registerExactEvmScheme } = require("@x402/evm/exact/client");
const { decodePaymentRequiredHeader } = require("@x402/core/http");
const { parsePaymentRequired } = require("@x402/core/schemas");
const { mnemonicToAccount } = require("viem/accounts");

const [base, index, callsJSON] = process.argv.slice(2);
const account = mnemonicToAccount("test test test test test test test test test test test junk", {
  addressIndex: Number(index),
});
const client = new x402Client();
registerExactEvmScheme(client, { signer: account, networks: ["eip155:8453"] });
const pay = wrapFetchWithPayment(fetch, client);

const out = { address: account.address, calls: [] };
for (const { op, body } of JSON.parse(callsJSON)) {
  const url = `${base}/api/x402/${op}`;
  const init = { method: "POST", headers: { "Content-Type": "application/json" }, body };
  const call = { op };
  const quote = await fetch(url, init);
  call.quoteStatus = quote.status;
  const header = quote.headers.get("PAYMENT-REQUIRED");
  if (header) {
    const decoded = decodePaymentRequiredHeader(header);
    const parsed = parsePaymentRequired(decoded);
    call.quoteValid = parsed.success === true;
    if (!call.quoteValid) call.quoteError = JSON.stringify(parsed.error);
    call.amount = decoded.accepts[0]?.amount ?? null;
    call.hasBazaar = Boolean(decoded.extensions?.bazaar);
  }
  const res = await pay(url, init);
  call.status = res.status;
  call.body = await res.text();
  const settled = res.headers.get("PAYMENT-RESPONSE");
  call.settlement = settled ? decodePaymentResponseHeader(settled) : null;
  out.calls.push(call);
}
console.log(JSON.stringify(out));
