// Pays an x402 resource with the official client packages (@x402/fetch and
// @x402/evm, pinned in compat/package.json) and prints the outcome as JSON.
// Usage: COMPAT_DIR=<repo>/compat node official_client.mjs <url> <account index>
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.COMPAT_DIR, "package.json"));
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { registerExactEvmScheme } = require("@x402/evm/exact/client");
const { mnemonicToAccount } = require("viem/accounts");

const [url, index] = process.argv.slice(2);
const account = mnemonicToAccount("test test test test test test test test test test test junk", {
  addressIndex: Number(index),
});
const client = new x402Client();
registerExactEvmScheme(client, { signer: account, networks: ["eip155:8453"] });
const pay = wrapFetchWithPayment(fetch, client);

const res = await pay(url, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ text: "official" }),
});
const header = res.headers.get("PAYMENT-RESPONSE");
console.log(JSON.stringify({
  address: account.address,
  status: res.status,
  body: await res.text(),
  settlement: header ? decodePaymentResponseHeader(header) : null,
}));
