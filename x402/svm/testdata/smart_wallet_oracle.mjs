// Reads JSON lines {"payload": <PaymentPayload>, "requirements":
// <PaymentRequirements>, "enabled": bool, "programs": [<address>] | null}
// on standard input
// and prints, for each, what the official facilitator (@x402/svm's
// ExactSvmScheme with enableSmartWalletVerification, installed in compat/
// by `go tool task npm`) answers: {"isValid", "invalidReason", "payer"}.
// enabled turns enableSmartWalletVerification on, programs are its
// smartWalletAllowedPrograms (null: its default list). It
// verifies on the Solana node at RPC_URL with the fee payer FEE_PAYER_KEY
// (base58 of the 64-byte key).
//
// Usage: node smart_wallet_oracle.mjs COMPAT_DIR RPC_URL FEE_PAYER_KEY < cases
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const [compat, rpcUrl, feePayerKey] = process.argv.slice(2);
const require = createRequire(`${compat}/package.json`);
const { ExactSvmScheme } = require("@x402/svm/exact/facilitator");
const { toFacilitatorSvmSigner } = require("@x402/svm");
const { createKeyPairSignerFromBytes, getBase58Encoder } = require("@solana/kit");

const signer = toFacilitatorSvmSigner(await createKeyPairSignerFromBytes(getBase58Encoder().encode(feePayerKey)), { defaultRpcUrl: rpcUrl });
const out = [];
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (!line.trim()) continue;
  const c = JSON.parse(line);
  const options = { enableSmartWalletVerification: c.enabled };
  if (c.programs) options.smartWalletAllowedPrograms = c.programs;
  const scheme = new ExactSvmScheme(signer, undefined, options);
  const r = await scheme.verify(c.payload, c.requirements);
  out.push({ isValid: r.isValid, invalidReason: r.invalidReason ?? "", payer: r.payer ?? "" });
}
console.log(JSON.stringify(out));
