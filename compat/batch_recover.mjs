// Hands a corrective 402 to a fresh official batch-settlement client
// (@x402/evm/batch-settlement/client, no channel state, reading the chain at
// RPC_URL as development account PAYER) and, if it resynchronizes, has it
// pay once more; prints {"recovered": bool, "payload": <its next payload>}.
// Usage:
//   RPC_URL=http://127.0.0.1:8545 PAYER=3 node compat/batch_recover.mjs '<PaymentRequired JSON>'
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { BatchSettlementEvmScheme } = require("@x402/evm/batch-settlement/client");
const { toClientEvmSigner } = require("@x402/evm");
const { createPublicClient, defineChain, http } = require("viem");
const { mnemonicToAccount } = require("viem/accounts");

const rpc = process.env.RPC_URL;
const paymentRequired = JSON.parse(process.argv[2]);
const requirements = paymentRequired.accepts.find((a) => a.scheme === "batch-settlement");
const chain = defineChain({
  id: Number(requirements.network.split(":")[1]),
  name: "test",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpc] } },
});
const account = mnemonicToAccount("test test test test test test test test test test test junk", {
  addressIndex: Number(process.env.PAYER),
});
const signer = toClientEvmSigner(account, createPublicClient({ chain, transport: http(rpc) }));
const client = new BatchSettlementEvmScheme(signer);
const recovered = await client.processCorrectivePaymentRequired(paymentRequired);
// The next payment's requirements are the option without the corrective state.
const { channelState, voucherState, ...extra } = requirements.extra;
const next = recovered ? await client.createPaymentPayload(2, { ...requirements, extra }) : undefined;
console.log(JSON.stringify({ recovered, payload: next?.payload }));
