// Pays operations of a running x402d with the official x402 client packages
// (@x402/fetch, @x402/core, and @x402/evm with viem on Base or, with
// NETWORK=solana, @x402/svm with @solana/kit, the client reading the chain
// through the Solana RPC at rpcURL; pinned in package.json) and prints what
// happened as JSON. Every quote is first decoded and validated by
// @x402/core. Usage:
//   node compat/pay_ops.mjs <base URL> <dev account> '<[{"op":..,"body":..}]>'
//   NETWORK=solana node compat/pay_ops.mjs <base URL> <rpc URL> <payer key, base58 of 64 bytes> '<[{"op":..,"body":..}]>'
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { decodePaymentRequiredHeader } = require("@x402/core/http");
const { parsePaymentRequired } = require("@x402/core/schemas");

const solana = process.env.NETWORK === "solana";
const args = process.argv.slice(2);
const [base, callsJSON] = [args[0], args[args.length - 1]];
const client = new x402Client();
const { address, prefix } = solana ? await solanaPayer(client, args[1], args[2]) : basePayer(client, Number(args[1]));
const pay = wrapFetchWithPayment(fetch, client);

// basePayer has client pay on Base as development account index.
function basePayer(client, index) {
  const { registerExactEvmScheme } = require("@x402/evm/exact/client");
  const { mnemonicToAccount } = require("viem/accounts");
  const account = mnemonicToAccount("test test test test test test test test test test test junk", { addressIndex: index });
  registerExactEvmScheme(client, { signer: account, networks: ["eip155:8453"] });
  return { address: account.address, prefix: "eip155:" };
}

// solanaPayer has client pay on Solana with the key secret, reading the
// chain at rpcUrl, even when an EVM option is listed first.
async function solanaPayer(client, rpcUrl, secret) {
  const { ExactSvmScheme } = require("@x402/svm/exact/client");
  const { createKeyPairSignerFromBytes, getBase58Encoder } = require("@solana/kit");
  const signer = await createKeyPairSignerFromBytes(getBase58Encoder().encode(secret));
  client.register("solana:*", new ExactSvmScheme(signer, { rpcUrl }));
  client.registerPolicy((_version, reqs) => reqs.filter((r) => r.network.startsWith("solana:")));
  return { address: signer.address, prefix: "solana:" };
}

const out = { address, calls: [] };
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
    const option = decoded.accepts.find((r) => r.network.startsWith(prefix));
    call.amount = option?.amount ?? null;
    call.maxTimeoutSeconds = option?.maxTimeoutSeconds ?? null;
    call.extra = option?.extra ?? null;
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
