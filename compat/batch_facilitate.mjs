// Runs a batch-settlement channel's life with the official packages only
// (@x402/evm's batch-settlement client and facilitator, viem) on the chain
// at RPC_URL, against whatever contracts sit at the canonical addresses:
// the client signs a deposit and vouchers as development account PAYER,
// the facilitator (development account FACILITATOR sending, AUTHORIZER
// signing as receiver authorizer) verifies them and settles the deposit,
// claims the last voucher (claimWithSignature), settles to payTo and
// refunds the rest (refundWithSignature). It prints each step's result as
// JSON. Usage:
//   RPC_URL=http://127.0.0.1:8545 PAYER=3 FACILITATOR=8 AUTHORIZER=7 node compat/batch_facilitate.mjs '<requirements JSON>'
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { BatchSettlementEvmScheme: Client, signVoucher } = require("@x402/evm/batch-settlement/client");
const { BatchSettlementEvmScheme: Facilitator } = require("@x402/evm/batch-settlement/facilitator");
const { toFacilitatorEvmSigner } = require("@x402/evm");
const { createWalletClient, defineChain, http, nonceManager, publicActions } = require("viem");
const { mnemonicToAccount } = require("viem/accounts");

const mnemonic = "test test test test test test test test test test test junk";
const rpc = process.env.RPC_URL;
const requirements = JSON.parse(process.argv[2]);
const chainId = Number(requirements.network.split(":")[1]);
const chain = defineChain({
  id: chainId,
  name: "test",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpc] } },
});
const payer = mnemonicToAccount(mnemonic, { addressIndex: Number(process.env.PAYER) });
const sender = mnemonicToAccount(mnemonic, { addressIndex: Number(process.env.FACILITATOR), nonceManager });
const authorizer = mnemonicToAccount(mnemonic, { addressIndex: Number(process.env.AUTHORIZER) });
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
const facilitator = new Facilitator(signer, authorizer);
const buyer = new Client(payer);

const out = {};
const envelope = (payload) => ({ x402Version: 2, accepted: requirements, payload });
const price = BigInt(requirements.amount);

// The first payment: a deposit, verified and settled.
const deposit = await buyer.createPaymentPayload(2, requirements);
out.depositVerify = await facilitator.verify(envelope(deposit.payload), requirements);
out.depositSettle = await facilitator.settle(envelope(deposit.payload), requirements);
const config = deposit.payload.channelConfig;
const channelId = deposit.payload.voucher.channelId;
out.channelId = channelId;

// Three calls' vouchers, each verified against the chain.
out.voucherVerify = [];
let last;
for (let i = 1n; i <= 3n; i++) {
  last = await signVoucher(payer, channelId, (i * price).toString(), requirements.network);
  out.voucherVerify.push(await facilitator.verify(envelope({ type: "voucher", channelConfig: config, voucher: last }), requirements));
}

// Claim the last voucher (the facilitator's authorizer signs the batch),
// then settle to payTo.
const claim = { type: "claim", claims: [{ voucher: { channel: config, maxClaimableAmount: last.maxClaimableAmount }, signature: last.signature, totalClaimed: last.maxClaimableAmount }] };
out.claimSettle = await facilitator.settle(envelope(claim), requirements);
out.settleSettle = await facilitator.settle(envelope({ type: "settle", receiver: requirements.payTo, token: requirements.asset }), requirements);

// A cooperative refund of the rest, with a zero-charge voucher.
const zero = await signVoucher(payer, channelId, last.maxClaimableAmount, requirements.network);
const refund = { type: "refund", channelConfig: config, voucher: zero };
out.refundVerify = await facilitator.verify(envelope(refund), requirements);
const left = BigInt(deposit.payload.deposit.amount) - BigInt(last.maxClaimableAmount);
out.refundSettle = await facilitator.settle(
  envelope({ ...refund, amount: left.toString(), refundNonce: "0", claims: [] }),
  requirements,
);
console.log(JSON.stringify(out, (_, v) => (typeof v === "bigint" ? v.toString() : v)));
