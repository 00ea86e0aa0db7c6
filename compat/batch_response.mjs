// Applies PAYMENT-RESPONSE headers of batch-settlement calls to the
// official client's channel record (@x402/evm/batch-settlement/client's
// processPaymentResponse, on its in-memory storage) and prints the record
// after each. Usage:
//   node compat/batch_response.mjs '[{"header": "<base64>", "channelId": "0x..", "requestAmount": "..", "depositAmount": ".."?}, ...]'
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { InMemoryClientChannelStorage, processPaymentResponse, getChannel } = require("@x402/evm/batch-settlement/client");

const storage = new InMemoryClientChannelStorage();
const out = [];
for (const { header, channelId, requestAmount, depositAmount } of JSON.parse(process.argv[2])) {
  await processPaymentResponse(storage, (name) => (name === "PAYMENT-RESPONSE" ? header : undefined), {
    channelId,
    requestAmount,
    ...(depositAmount !== undefined ? { depositAmount } : {}),
  });
  out.push((await getChannel(storage, channelId)) ?? null);
}
console.log(JSON.stringify(out));
