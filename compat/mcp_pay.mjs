// Pays tools of a running x402d over MCP with clients we did not write, and
// prints what happened as JSON:
//   - "spec": the official MCP TypeScript SDK (@modelcontextprotocol/sdk),
//     paying as x402's MCP transport spec says: the PaymentRequired read from
//     the tool error's structuredContent (validated by @x402/core), a
//     PaymentPayload signed by @x402/evm sent as an object in
//     _meta["x402/payment"];
//   - "agents": Cloudflare's agents package (agents/x402, withX402Client),
//     which reads _meta["x402/error"] and sends the payload as a base64 JSON
//     string.
// Usage: node compat/mcp_pay.mjs <base URL> <dev account> <spec|agents> '<steps>'
// A step is {"op", "args"} and, in spec mode, optionally "tamper" ("amount"
// or "payTo": the payment answers a changed requirement), "reuse" (the index
// of an earlier step whose payment is sent again with these args), or
// "abortAfterMs" (the call is abandoned after that long, then sent again
// with the same payment).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { x402Client } from "@x402/core/client";
import { parsePaymentRequired } from "@x402/core/schemas";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { withX402Client } from "agents/x402";
import { mnemonicToAccount } from "viem/accounts";

const [base, index, mode, stepsJSON] = process.argv.slice(2);
const account = mnemonicToAccount("test test test test test test test test test test test junk", {
  addressIndex: Number(index),
});

async function connect() {
  const client = new Client({ name: "x402d-compat", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  return client;
}

// summary is what the Go test reads of a tool result.
function summary(res) {
  return {
    isError: res.isError === true,
    structured: res.structuredContent ?? null,
    text: res.content?.[0]?.text ?? null,
    paymentResponse: res._meta?.["x402/payment-response"] ?? null,
    x402Error: res._meta?.["x402/error"] ?? null,
  };
}

const client = await connect();
const { tools } = await client.listTools();
const out = {
  address: account.address,
  tools: tools.map((t) => ({ name: t.name, meta: t._meta ?? null, outputSchema: Boolean(t.outputSchema) })),
  steps: [],
};

if (mode === "agents") {
  const paying = withX402Client(client, { account, network: "eip155:8453", maxPaymentValue: 10n ** 6n });
  // agents' own listTools decorates paid tools' descriptions from _meta.
  const listed = await paying.listTools();
  out.descriptions = Object.fromEntries(listed.tools.map((t) => [t.name, t.description]));
  for (const { op, args } of JSON.parse(stepsJSON)) {
    const res = await paying.callTool(null, { name: op, arguments: args });
    out.steps.push({ op, ...summary(res) });
  }
} else {
  const payer = new x402Client();
  registerExactEvmScheme(payer, { signer: account, networks: ["eip155:8453"] });
  const payments = [];
  for (const step of JSON.parse(stepsJSON)) {
    const { op, args } = step;
    const record = { op };
    const quote = await client.callTool({ name: op, arguments: args });
    record.quote = summary(quote);
    let payment;
    if (step.reuse !== undefined) {
      payment = payments[step.reuse];
    } else if (quote.isError && quote.structuredContent?.accepts) {
      const parsed = parsePaymentRequired(quote.structuredContent);
      record.quoteValid = parsed.success === true;
      if (!record.quoteValid) record.quoteError = JSON.stringify(parsed.error);
      const required = structuredClone(quote.structuredContent);
      record.amount = required.accepts[0].amount;
      if (step.tamper === "amount") required.accepts[0].amount = "1";
      if (step.tamper === "payTo") required.accepts[0].payTo = "0x000000000000000000000000000000000000dEaD";
      payment = await payer.createPaymentPayload(required);
    }
    payments.push(payment);
    if (payment === undefined) {
      out.steps.push(record);
      continue;
    }
    const params = { name: op, arguments: args, _meta: { "x402/payment": payment } };
    if (step.abortAfterMs) {
      const abort = new AbortController();
      setTimeout(() => abort.abort(), step.abortAfterMs);
      try {
        await client.callTool(params, undefined, { signal: abort.signal });
        record.aborted = false;
      } catch {
        record.aborted = true;
      }
    }
    const res = await client.callTool(params, undefined, { timeout: 180_000 });
    Object.assign(record, summary(res));
    out.steps.push(record);
  }
}
await client.close();
console.log(JSON.stringify(out));
