// Signs batch-settlement payloads with the official client
// (@x402/evm/batch-settlement/client, pinned in package.json) and hashes
// the scheme's other typed data with viem and the official packages' EIP-712
// types, for the Go tests to check that x402/evm/channel verifies and hashes
// the same. Usage:
//   node compat/batch_sign.mjs '<request JSON>'
// The request: {"requirements": {...batch-settlement PaymentRequirements},
//   "payer": <dev account index>, "voucherSigner": <index, optional>,
//   "zeroAuthorizer": <bool, optional: payerAuthorizer 0, EIP-1271 path>,
//   "vouchers": ["<cumulative amount>", ...],
//   "claims": [{"maxClaimableAmount": "..", "totalClaimed": ".."}],
//   "refund": {"nonce": "..", "amount": ".."}}
// It prints {"config", "channelId", "deposit" (the payload of the first
// payment, a deposit since the client has no channel yet), "vouchers"
// (signVoucher of each amount), "voucherDigests", "claimBatchDigest" (of
// the claims on this channel), "refundDigest", "domainSeparator"}.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { BatchSettlementEvmScheme, computeChannelId, signVoucher } = require("@x402/evm/batch-settlement/client");
const { BATCH_SETTLEMENT_ADDRESS, BATCH_SETTLEMENT_DOMAIN, voucherTypes, claimBatchTypes, refundTypes } = require("@x402/evm");
const { mnemonicToAccount } = require("viem/accounts");
const { hashTypedData, hashDomain } = require("viem");

const mnemonic = "test test test test test test test test test test test junk";
const req = JSON.parse(process.argv[2]);
const account = (i) => mnemonicToAccount(mnemonic, { addressIndex: i });
const signer = account(req.payer);
const options = {};
if (req.voucherSigner !== undefined) options.voucherSigner = account(req.voucherSigner);
if (req.zeroAuthorizer) options.payerAuthorizer = "0x0000000000000000000000000000000000000000";
const scheme = new BatchSettlementEvmScheme(signer, options);

const requirements = req.requirements;
const chainId = Number(requirements.network.split(":")[1]);
const config = scheme.buildChannelConfig(requirements);
const channelId = computeChannelId(config, requirements.network);
const deposit = await scheme.createPaymentPayload(2, requirements);
const voucherSigner = options.voucherSigner ?? signer;
const vouchers = [];
for (const amount of req.vouchers ?? []) {
  vouchers.push(await signVoucher(voucherSigner, channelId, amount, requirements.network));
}
const domain = { ...BATCH_SETTLEMENT_DOMAIN, chainId, verifyingContract: BATCH_SETTLEMENT_ADDRESS };
const voucherDigests = (req.vouchers ?? []).map((amount) =>
  hashTypedData({ domain, types: voucherTypes, primaryType: "Voucher", message: { channelId, maxClaimableAmount: BigInt(amount) } }),
);
const claimBatchDigest = hashTypedData({
  domain,
  types: claimBatchTypes,
  primaryType: "ClaimBatch",
  message: {
    claims: (req.claims ?? []).map((c) => ({
      channelId,
      maxClaimableAmount: BigInt(c.maxClaimableAmount),
      totalClaimed: BigInt(c.totalClaimed),
    })),
  },
});
const refundDigest = req.refund
  ? hashTypedData({
      domain,
      types: refundTypes,
      primaryType: "Refund",
      message: { channelId, nonce: BigInt(req.refund.nonce), amount: BigInt(req.refund.amount) },
    })
  : undefined;
const domainSeparator = hashDomain({
  domain,
  types: {
    EIP712Domain: [
      { name: "name", type: "string" },
      { name: "version", type: "string" },
      { name: "chainId", type: "uint256" },
      { name: "verifyingContract", type: "address" },
    ],
  },
});
console.log(
  JSON.stringify({ config, channelId, deposit, vouchers, voucherDigests, claimBatchDigest, refundDigest, domainSeparator }),
);
