// Uses the devchain over HTTP as a wallet would, with viem (pinned in
// compat/package.json): reads the chain and the token, sends a USDC transfer
// and waits for its receipt. Prints the outcome as JSON.
// Usage: COMPAT_DIR=<repo>/compat node viem_wallet.mjs <rpc url> <to>
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.COMPAT_DIR, "package.json"));
const { createPublicClient, createWalletClient, http, erc20Abi, defineChain } = require("viem");
const { mnemonicToAccount } = require("viem/accounts");

const [url, to] = process.argv.slice(2);
const usdc = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const chain = defineChain({
  id: 8453, name: "devchain", nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [url] } },
});
const account = mnemonicToAccount("test test test test test test test test test test test junk", { addressIndex: 5 });
const pub = createPublicClient({ chain, transport: http(url) });
const wallet = createWalletClient({ account, chain, transport: http(url) });

const chainId = await pub.getChainId();
const name = await pub.readContract({ address: usdc, abi: erc20Abi, functionName: "name" });
const hash = await wallet.writeContract({ address: usdc, abi: erc20Abi, functionName: "transfer", args: [to, 4242n] });
const receipt = await pub.waitForTransactionReceipt({ hash, pollingInterval: 10 });
const balance = await pub.readContract({ address: usdc, abi: erc20Abi, functionName: "balanceOf", args: [to] });
console.log(JSON.stringify({ chainId, name, status: receipt.status, balance: balance.toString() }));
