// Pays operations of a running x402d with the official batch-settlement
// client (@x402/evm/batch-settlement/client through @x402/fetch, pinned in
// package.json; viem reading the chain at RPC_URL) as development account
// PAYER, preferring the batch-settlement option, and prints what happened as
// JSON. DEPOSIT, when set, is what each deposit (and top-up) puts in the
// channel, in atomic units (the client's depositStrategy); unset, the
// client's own sizing (the quote's extra.minDeposit).
// Steps, in order:
//   {"op": "<op>", "body": "<JSON body>"}        one paid call (deposit or voucher)
//   {"op": .., "body": .., "paymentId": true}     the same with a payment identifier
//                                                 (@x402/extensions), kept for the next
//                                                 step with "paymentId": "same"
//   {"forget": true}                              a new client with no channel state
//   {"refund": "<op>", "amount": "<atomic>"}      the client's cooperative refund
//                                                 (refundChannel: GET probe, then the
//                                                 refund payload)
// Each result: {status, body, settlement (decoded PAYMENT-RESPONSE),
// type (the payload type sent last), sent (its voucher's maxClaimableAmount)}.
// With MODE=mcp the calls are MCP tool calls (the official MCP TypeScript
// SDK, x402's MCP transport: the PaymentRequired from the tool error's
// structuredContent, the payload in _meta["x402/payment"], the response in
// _meta["x402/payment-response"], handed to the client's payment-response
// hooks, which recover from a corrective PaymentRequired as over HTTP); the
// body is the tool's arguments; status is 200 for a result, 402 for a tool
// error carrying a PaymentRequired.
// Usage:
//   RPC_URL=http://127.0.0.1:8545 PAYER=3 [DEPOSIT=20000] [MODE=mcp] node compat/batch_pay.mjs <base URL> '<steps JSON>'
import { createRequire } from "node:module";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const require = createRequire(import.meta.url);
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { BatchSettlementEvmScheme } = require("@x402/evm/batch-settlement/client");
const { toClientEvmSigner } = require("@x402/evm");
const { appendPaymentIdentifierToExtensions, generatePaymentId, PAYMENT_IDENTIFIER } = require("@x402/extensions/payment-identifier");
const { createPublicClient, defineChain, http } = require("viem");
const { mnemonicToAccount } = require("viem/accounts");

const [base, stepsJSON] = process.argv.slice(2);
const rpc = process.env.RPC_URL;
const account = mnemonicToAccount("test test test test test test test test test test test junk", {
  addressIndex: Number(process.env.PAYER),
});
const chainOf = (network) =>
  defineChain({
    id: Number(network.split(":")[1]),
    name: "test",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [rpc] } },
  });

let paymentId = null; // the id of the step asking for one
let last = null; // the last payload sent
// newClient returns a client with no channel state: its scheme, and the
// fetch paying with it.
function newClient() {
  const chain = chainOf("eip155:8453");
  const signer = toClientEvmSigner(account, createPublicClient({ chain, transport: http(rpc) }));
  const options = {};
  if (process.env.DEPOSIT) options.depositStrategy = () => process.env.DEPOSIT;
  const scheme = new BatchSettlementEvmScheme(signer, options);
  const client = new x402Client();
  client.register("eip155:*", scheme);
  client.registerPolicy((_version, reqs) => reqs.filter((r) => r.scheme === "batch-settlement"));
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    if (paymentId) appendPaymentIdentifierToExtensions(paymentRequired.extensions, paymentId);
  });
  client.onAfterPaymentCreation(async ({ paymentPayload }) => {
    last = paymentPayload;
  });
  return { scheme, client, pay: wrapFetchWithPayment(fetch, client) };
}

// payMCP pays one call of tool op with args over MCP with client, as
// wrapFetchWithPayment pays over HTTP: one retry after a recovery.
async function payMCP(mcp, client, op, args) {
  const quote = await mcp.callTool({ name: op, arguments: args });
  const required = quote.structuredContent;
  if (!quote.isError || !required?.accepts) return { status: 500, body: JSON.stringify(quote) };
  let payload = await client.createPaymentPayload(required);
  for (let attempt = 0; ; attempt++) {
    const res = await mcp.callTool({ name: op, arguments: args, _meta: { "x402/payment": payload } }, undefined, { timeout: 180_000 });
    const settlement = res._meta?.["x402/payment-response"] ?? null;
    const body = res.content?.[0]?.text ?? null;
    if (!res.isError) {
      await client.handlePaymentResponse({ paymentPayload: payload, requirements: payload.accepted, settleResponse: settlement });
      return { status: 200, body, settlement };
    }
    const refused = res.structuredContent;
    if (!refused?.accepts) return { status: 500, body, settlement };
    const r = await client.handlePaymentResponse({ paymentPayload: payload, requirements: payload.accepted, paymentRequired: refused });
    if (!r?.recovered || attempt > 0) return { status: 402, body: JSON.stringify(refused), settlement };
    payload = await client.createPaymentPayload(required);
  }
}

const mcp = process.env.MODE === "mcp" ? new Client({ name: "x402d-batch", version: "1.0.0" }) : null;
if (mcp) await mcp.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
let { scheme, client, pay } = newClient();
const out = { address: account.address, steps: [] };
for (const step of JSON.parse(stepsJSON)) {
  const result = {};
  last = null;
  try {
    if (step.forget) {
      ({ scheme, client, pay } = newClient());
      result.status = 0;
    } else if (step.refund) {
      const settled = await scheme.refund(`${base}/api/x402/${step.refund}`, step.amount ? { amount: step.amount } : undefined);
      result.status = 200;
      result.settlement = settled;
    } else {
      if (step.paymentId === true) paymentId = generatePaymentId();
      else if (step.paymentId !== "same") paymentId = null;
      if (mcp) {
        Object.assign(result, await payMCP(mcp, client, step.op, JSON.parse(step.body)));
        out.steps.push(Object.assign(result, { type: last?.payload?.type ?? null, sent: last?.payload?.voucher?.maxClaimableAmount ?? null }));
        continue;
      }
      const res = await pay(`${base}/api/x402/${step.op}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: step.body,
      });
      result.status = res.status;
      result.body = await res.text();
      const settled = res.headers.get("PAYMENT-RESPONSE");
      result.settlement = settled ? decodePaymentResponseHeader(settled) : null;
    }
  } catch (e) {
    result.status = -1;
    result.error = String(e?.stack ?? e);
  }
  result.type = last?.payload?.type ?? null;
  result.sent = last?.payload?.voucher?.maxClaimableAmount ?? null;
  result.paymentId = paymentId;
  out.steps.push(result);
}
if (mcp) await mcp.close();
console.log(JSON.stringify(out));
