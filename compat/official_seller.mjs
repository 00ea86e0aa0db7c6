// A seller built only from the official packages, for the comparisons in
// docs/performance.md: @x402/express guarding POST /api/x402/diff at
// x402d's price of diff on Base, paid to the devchain's receiving account.
//
// With RPC_URL it is paid: the official facilitator code (@x402/core's
// x402Facilitator and @x402/evm's exact scheme) runs in-process and settles
// on the chain at RPC_URL with development account FACILITATOR_ACCOUNT
// (viem's nonce manager, so that concurrent settlements do not reuse a
// nonce). Without it, it only quotes (the unpaid-quote comparison; no
// network needed).
//
//   RPC_URL=http://127.0.0.1:8545 FACILITATOR_ACCOUNT=7 node compat/official_seller.mjs [PORT]
//   node compat/official_seller.mjs [PORT]   (quotes only)
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { registerExactEvmScheme } from "@x402/evm/exact/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { x402Facilitator } from "@x402/core/facilitator";
import { createWalletClient, defineChain, http, nonceManager, publicActions } from "viem";
import { mnemonicToAccount } from "viem/accounts";

const network = "eip155:8453";
const rpc = process.env.RPC_URL;
const facilitator = rpc ? payingFacilitator(rpc) : quotingFacilitator();

// payingFacilitator verifies and settles in-process on the chain at rpc.
function payingFacilitator(rpc) {
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
  return {
    getSupported: async () => local.getSupported(),
    verify: (payload, requirements) => local.verify(payload, requirements),
    settle: (payload, requirements) => local.settle(payload, requirements),
  };
}

// quotingFacilitator only says which kinds it supports: enough for quotes.
function quotingFacilitator() {
  return {
    getSupported: async () => ({ kinds: [{ x402Version: 2, scheme: "exact", network }], extensions: [], signers: {} }),
    verify: async () => {
      throw new Error("this seller quotes only (no RPC_URL)");
    },
    settle: async () => {
      throw new Error("this seller quotes only (no RPC_URL)");
    },
  };
}

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
