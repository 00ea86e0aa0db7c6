// A paying seller built only from the official packages, for the paid-call
// comparison in docs/performance.md: @x402/express guarding POST
// /api/x402/diff at x402d's price of diff on Base, paid to the devchain's
// receiving account, with the official facilitator code (@x402/core's
// x402Facilitator and @x402/evm's exact scheme) in-process, settling on the
// chain at RPC_URL with development account FACILITATOR_ACCOUNT (viem's
// nonce manager, so that concurrent settlements do not reuse a nonce).
//
//   RPC_URL=http://127.0.0.1:8545 FACILITATOR_ACCOUNT=7 node compat/official_seller.mjs [PORT]
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { registerExactEvmScheme } from "@x402/evm/exact/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { x402Facilitator } from "@x402/core/facilitator";
import { createWalletClient, defineChain, http, nonceManager, publicActions } from "viem";
import { mnemonicToAccount } from "viem/accounts";

const network = "eip155:8453";
const rpc = process.env.RPC_URL ?? "http://127.0.0.1:8545";
const account = mnemonicToAccount("test test test test test test test test test test test junk", {
  addressIndex: Number(process.env.FACILITATOR_ACCOUNT ?? 7),
  nonceManager,
});
const chain = defineChain({
  id: 8453,
  name: "devchain",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpc] } },
});
const client = createWalletClient({ account, chain, transport: http(rpc) }).extend(publicActions);
const signer = toFacilitatorEvmSigner({
  address: account.address,
  readContract: (args) => client.readContract(args),
  verifyTypedData: (args) => client.verifyTypedData(args),
  writeContract: (args) => client.writeContract(args),
  sendTransaction: (args) => client.sendTransaction(args),
  waitForTransactionReceipt: (args) => client.waitForTransactionReceipt(args),
  getCode: (args) => client.getCode(args),
});
const local = new x402Facilitator();
registerExactEvmScheme(local, { signer, networks: network });
const facilitator = {
  getSupported: async () => local.getSupported(),
  verify: (payload, requirements) => local.verify(payload, requirements),
  settle: (payload, requirements) => local.settle(payload, requirements),
};

const server = new x402ResourceServer(facilitator).register(network, new ExactEvmScheme());
const app = express();
app.use(express.json());
app.use(
  paymentMiddleware(
    {
      "POST /api/x402/diff": {
        accepts: {
          scheme: "exact",
          price: "$0.01",
          network,
          payTo: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
        },
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

const port = Number(process.argv[2] ?? 18091);
app.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
