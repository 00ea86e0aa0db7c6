// A seller built only from the official packages, for the Solana comparison
// in docs/performance.md: @x402/express guarding POST /api/x402/diff at
// x402d's price of diff on Solana mainnet (USDC), with the official
// facilitator code (@x402/core's x402Facilitator and @x402/svm's exact
// scheme) in-process, co-signing as FEE_PAYER_KEY and settling on the
// Solana node at RPC_URL.
//
//   RPC_URL=http://127.0.0.1:8899 FEE_PAYER_KEY=<base58 of 64 bytes> PAY_TO=<base58> node compat/official_svm_seller.mjs [PORT]
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { ExactSvmScheme } from "@x402/svm/exact/server";
import { registerExactSvmScheme } from "@x402/svm/exact/facilitator";
import { toFacilitatorSvmSigner, SOLANA_MAINNET_CAIP2 } from "@x402/svm";
import { x402Facilitator } from "@x402/core/facilitator";
import { createKeyPairSignerFromBytes, getBase58Encoder } from "@solana/kit";

const network = SOLANA_MAINNET_CAIP2;
const feePayer = await createKeyPairSignerFromBytes(getBase58Encoder().encode(process.env.FEE_PAYER_KEY));
const local = new x402Facilitator();
registerExactSvmScheme(local, { signer: toFacilitatorSvmSigner(feePayer, { defaultRpcUrl: process.env.RPC_URL }), networks: network });
const facilitator = {
  getSupported: async () => local.getSupported(),
  verify: (payload, requirements) => local.verify(payload, requirements),
  settle: (payload, requirements) => local.settle(payload, requirements),
};

const server = new x402ResourceServer(facilitator).register(network, new ExactSvmScheme());
const app = express();
app.use(express.json());
app.use(
  paymentMiddleware(
    {
      "POST /api/x402/diff": {
        accepts: { scheme: "exact", price: "$0.01", network, payTo: process.env.PAY_TO },
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

const port = Number(process.argv[2] ?? 18092);
app.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
