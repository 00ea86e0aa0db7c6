// Pays one call of a running x402d with the official x402 client packages
// (@x402/fetch, @x402/evm's exact client with viem, on Base) and the
// official payment-identifier client helper (@x402/extensions), then pays
// it again as a client does whose answer was lost: a new payment, freshly
// signed, carrying the same payment identifier. Prints what happened as
// JSON: each attempt's status (0 when the answer never came), body,
// decoded PAYMENT-RESPONSE and the signature of the payment it sent.
// Usage:
//   node compat/pay_retry_id.mjs <resource URL> <dev account> <JSON body> [attempts]
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { registerExactEvmScheme } = require("@x402/evm/exact/client");
const { appendPaymentIdentifierToExtensions, generatePaymentId, PAYMENT_IDENTIFIER } = require("@x402/extensions/payment-identifier");
const { mnemonicToAccount } = require("viem/accounts");

const [url, index, body, attempts = "2"] = process.argv.slice(2);
const account = mnemonicToAccount("test test test test test test test test test test test junk", { addressIndex: Number(index) });
const client = new x402Client();
registerExactEvmScheme(client, { signer: account, networks: ["eip155:8453"] });

// One id for the logical request, reused by every retry of it, appended to
// the seller's declaration as the official helper appends it.
const id = generatePaymentId();
const sent = [];
client.onBeforePaymentCreation(async ({ paymentRequired }) => {
  if (!paymentRequired.extensions?.[PAYMENT_IDENTIFIER]) throw new Error("the seller does not declare payment-identifier");
  appendPaymentIdentifierToExtensions(paymentRequired.extensions, id);
});
client.onAfterPaymentCreation(async ({ paymentPayload }) => {
  sent.push({ signature: paymentPayload.payload.signature, id: paymentPayload.extensions?.[PAYMENT_IDENTIFIER]?.info?.id ?? null });
});
const pay = wrapFetchWithPayment(fetch, client);

const out = { address: account.address, id, attempts: [] };
for (let i = 0; i < Number(attempts); i++) {
  const attempt = {};
  try {
    const res = await pay(url, { method: "POST", headers: { "Content-Type": "application/json" }, body });
    attempt.status = res.status;
    attempt.body = await res.text();
    const settled = res.headers.get("PAYMENT-RESPONSE");
    attempt.settlement = settled ? decodePaymentResponseHeader(settled) : null;
  } catch (e) {
    attempt.status = 0;
    attempt.error = String(e?.cause?.message ?? e?.message ?? e);
  }
  attempt.sent = sent[i] ?? null;
  out.attempts.push(attempt);
  if (attempt.status === 200) break;
}
console.log(JSON.stringify(out));
