// A seller built only from the official packages, for the quote comparison in
// docs/performance.md: @x402/express guarding POST /api/x402/diff at x402d's
// price of diff, on Base, paid to the devchain's receiving account. Unpaid
// requests get its 402 quote; nothing here verifies or settles (the
// facilitator below only answers which kinds it supports, in-process, so that
// no network is needed).
//
//   node compat/express_quote_server.mjs [PORT]   (default 18090)
//   wrk -t1 -c32 -d10s -s scripts/post.lua http://127.0.0.1:18090/api/x402/diff
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { ExactEvmScheme } from "@x402/evm/exact/server";

const network = "eip155:8453";
const facilitator = {
  async getSupported() {
    return { kinds: [{ x402Version: 2, scheme: "exact", network }], extensions: [], signers: {} };
  },
  async verify() {
    throw new Error("this comparison server quotes only");
  },
  async settle() {
    throw new Error("this comparison server quotes only");
  },
};

const server = new x402ResourceServer(facilitator).register(network, new ExactEvmScheme());
const app = express();
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
app.post("/api/x402/diff", (req, res) => res.json({ ok: true }));

const port = Number(process.argv[2] ?? 18090);
app.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
