// A seller built only from the official packages, for the comparisons in
// docs/performance.md: @x402/express guarding POST /api/x402/diff at
// x402d's price of diff ($0.01), on Base or, with NETWORK=solana, on Solana
// mainnet (USDC).
//
// On Base, with RPC_URL it is paid: the official facilitator code
// (@x402/core's x402Facilitator and @x402/evm's exact scheme) runs
// in-process and settles on the chain at RPC_URL with development account
// FACILITATOR_ACCOUNT (viem's nonce manager, so that concurrent settlements
// do not reuse a nonce), paid to the devchain's receiving account. Without
// it, it only quotes (the unpaid-quote comparison; no network needed).
//
// On Solana the official facilitator code (@x402/core's x402Facilitator and
// @x402/svm's exact scheme) runs in-process, co-signing as FEE_PAYER_KEY and
// settling on the Solana node at RPC_URL, paid to PAY_TO.
//
//   RPC_URL=http://127.0.0.1:8545 FACILITATOR_ACCOUNT=7 node compat/official_seller.mjs [PORT]
//   node compat/official_seller.mjs [PORT]   (quotes only)
//   NETWORK=solana RPC_URL=http://127.0.0.1:8899 FEE_PAYER_KEY=<base58 of 64 bytes> PAY_TO=<base58> node compat/official_seller.mjs [PORT]
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { x402Facilitator } from "@x402/core/facilitator";

const rpc = process.env.RPC_URL;
const seller = process.env.NETWORK === "solana" ? await solanaSeller(rpc) : await baseSeller(rpc);

// baseSeller is the seller on Base: paid when rpc is set, else quoting only.
async function baseSeller(rpc) {
  const network = "eip155:8453";
  const { ExactEvmScheme } = await import("@x402/evm/exact/server");
  const payTo = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720";
  if (!rpc) return { network, scheme: new ExactEvmScheme(), payTo, facilitator: quotingFacilitator(network) };
  const { registerExactEvmScheme } = await import("@x402/evm/exact/facilitator");
  const { toFacilitatorEvmSigner } = await import("@x402/evm");
  const { createWalletClient, defineChain, http, nonceManager, publicActions } = await import("viem");
  const { mnemonicToAccount } = await import("viem/accounts");
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
  return { network, scheme: new ExactEvmScheme(), payTo, facilitator: inProcess(local) };
}

// solanaSeller is the seller on Solana mainnet, settling on the node at rpc.
async function solanaSeller(rpc) {
  const { ExactSvmScheme } = await import("@x402/svm/exact/server");
  const { registerExactSvmScheme } = await import("@x402/svm/exact/facilitator");
  const { toFacilitatorSvmSigner, SOLANA_MAINNET_CAIP2 } = await import("@x402/svm");
  const { createKeyPairSignerFromBytes, getBase58Encoder } = await import("@solana/kit");
  const network = SOLANA_MAINNET_CAIP2;
  const feePayer = await createKeyPairSignerFromBytes(getBase58Encoder().encode(process.env.FEE_PAYER_KEY));
  const local = new x402Facilitator();
  registerExactSvmScheme(local, { signer: toFacilitatorSvmSigner(feePayer, { defaultRpcUrl: rpc }), networks: network });
  return { network, scheme: new ExactSvmScheme(), payTo: process.env.PAY_TO, facilitator: inProcess(local) };
}

// inProcess is the facilitator client of a facilitator in this process.
function inProcess(local) {
  return {
    getSupported: async () => local.getSupported(),
    verify: (payload, requirements) => local.verify(payload, requirements),
    settle: (payload, requirements) => local.settle(payload, requirements),
  };
}

// quotingFacilitator only says which kinds it supports: enough for quotes.
function quotingFacilitator(network) {
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

const server = new x402ResourceServer(seller.facilitator).register(seller.network, seller.scheme);
const app = express();
app.use(express.json());
app.use(
  paymentMiddleware(
    {
      "POST /api/x402/diff": {
        accepts: { scheme: "exact", price: "$0.01", network: seller.network, payTo: seller.payTo },
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
