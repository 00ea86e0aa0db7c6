// A batch-settlement seller built only from the official packages, for the
// comparison in docs/performance.md: @x402/express guarding
// POST /api/x402/diff at x402d's price of diff ($0.01) on Base (USDC), with
// the official batch-settlement server scheme (@x402/evm/batch-settlement/
// server, its in-memory channel storage) and the official facilitator code
// (@x402/core's x402Facilitator with @x402/evm/batch-settlement/facilitator)
// in-process, on the chain at RPC_URL, which must hold the channel and
// deposit-collector contracts at the canonical addresses (anvil as
// internal/anviltest starts it).
//
// The facilitator sends deposits, claims and settlements as development
// account FACILITATOR_ACCOUNT (viem's nonce manager, so that concurrent
// deposits do not reuse a nonce) and signs claims as receiver authorizer
// with development account AUTHORIZER_ACCOUNT, which it advertises; the
// channels pay the devchain's receiving account. The official channel
// manager claims every CLAIM_INTERVAL seconds (default 30; 0: never) and
// settles after each claim, as its auto-settlement does.
//
//   RPC_URL=http://127.0.0.1:8545 node compat/official_batch_seller.mjs [PORT]
//
// It prints "listening on ..." once it serves, and a line of JSON for each
// claim and settlement the manager made.
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { x402Facilitator } from "@x402/core/facilitator";
import { BatchSettlementEvmScheme as ServerScheme } from "@x402/evm/batch-settlement/server";
import { BatchSettlementEvmScheme as FacilitatorScheme } from "@x402/evm/batch-settlement/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { createWalletClient, defineChain, http, nonceManager, publicActions } from "viem";
import { mnemonicToAccount } from "viem/accounts";

const rpc = process.env.RPC_URL;
if (!rpc) throw new Error("RPC_URL is required");
const network = "eip155:8453";
const usdc = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const payTo = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720";
const mnemonic = "test test test test test test test test test test test junk";
const claimInterval = Number(process.env.CLAIM_INTERVAL ?? 30);

const sender = mnemonicToAccount(mnemonic, { addressIndex: Number(process.env.FACILITATOR_ACCOUNT ?? 7), nonceManager });
const authorizer = mnemonicToAccount(mnemonic, { addressIndex: Number(process.env.AUTHORIZER_ACCOUNT ?? 6) });
const chain = defineChain({
  id: 8453,
  name: "anvil",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpc] } },
});
const client = createWalletClient({ account: sender, chain, transport: http(rpc) }).extend(publicActions);
const signer = toFacilitatorEvmSigner({
  address: sender.address,
  readContract: (args) => client.readContract(args),
  verifyTypedData: (args) => client.verifyTypedData(args),
  writeContract: (args) => client.writeContract(args),
  sendTransaction: (args) => client.sendTransaction(args),
  waitForTransactionReceipt: (args) => client.waitForTransactionReceipt(args),
  getCode: (args) => client.getCode(args),
});
const local = new x402Facilitator();
local.register(network, new FacilitatorScheme(signer, authorizer));
const facilitator = {
  getSupported: async () => local.getSupported(),
  verify: (payload, requirements) => local.verify(payload, requirements),
  settle: (payload, requirements) => local.settle(payload, requirements),
};

const scheme = new ServerScheme(payTo);
const server = new x402ResourceServer(facilitator).register(network, scheme);
const app = express();
app.use(express.json());
app.use(
  paymentMiddleware(
    {
      "POST /api/x402/diff": {
        accepts: { scheme: "batch-settlement", price: "$0.01", network, payTo },
        description: "Unified diff of two texts",
      },
    },
    server,
  ),
);
app.post("/api/x402/diff", (req, res) => {
  const a = String(req.body?.a ?? "").split("\n");
  const b = String(req.body?.b ?? "").split("\n");
  res.json({ op: "diff", identical: a.join("\n") === b.join("\n"), lines: { a: a.length, b: b.length } });
});

if (claimInterval > 0) {
  const manager = scheme.createChannelManager(facilitator, network, usdc);
  manager.start({
    claimIntervalSecs: claimInterval,
    settleIntervalSecs: claimInterval,
    onClaim: (r) => console.log(JSON.stringify({ claim: r })),
    onSettle: (r) => console.log(JSON.stringify({ settle: r })),
    onError: (e) => console.error("channel manager:", e instanceof Error ? e.message : e),
  });
}

const port = Number(process.argv[2] ?? 18092);
app.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
