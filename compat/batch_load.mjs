// Paid load of batch-settlement calls made with the official client
// (@x402/core's x402Client and x402HTTPClient with
// @x402/evm/batch-settlement/client, pinned in package.json), against any
// seller that offers the scheme: x402d, or compat/official_batch_seller.mjs.
//
// PAYERS payers (default 100; development accounts FIRST_PAYER.. of the
// test mnemonic, default 100..) each open a channel with one deposit of
// DEPOSIT (atomic USDC, default 10000000) on their first call, all at once,
// then pay vouchers: closed loop with C calls in flight (default PAYERS; a
// channel has one call at a time, so at most PAYERS), or with RATE set a
// steady RATE calls/s (each call's latency counted from when it was due)
// for DURATION seconds (default 10); with CALLS_PER_PAYER=K a payer stops
// once K of its calls (its deposit's among them) were answered, and the run
// ends when all have (or at DURATION, default then 300). With FUND_FROM (a development account
// index) each payer short of DEPOSIT is sent it from that account first.
// With PRESIGN=K each payer's next K payments after its deposit are made
// before the run, as x402d's loadgen -presign does for exact: the official
// client makes the first (its payload and voucher), the official
// signVoucher signs the others' vouchers into that payload, and the
// official client's channel record is advanced past them
// (updateChannelFromSettle); during the run each is sent as made and its
// answer checked here. The client, which shares the machine with the
// seller it measures, then does not spend the run's CPU on signing and
// hashing, as clients on their own machines would not. A payer whose
// presigned payments ran out or went wrong pays with the official client
// live.
//
// A call whose answer was lost (connection error, 5xx) or not ready (202:
// still running) is sent again with the same payment, as a careful client
// does, for up to RETRY_FOR seconds (default 60); a call answered
// channel_busy is sent again likewise; a
// corrective 402 goes through the official client's recovery, then the
// call is paid again.
//
//   BASE_URL=http://127.0.0.1:8080 RPC_URL=http://127.0.0.1:8545 [OP=diff BODY='{..}'] node compat/batch_load.mjs
//
// It says on stderr when the load phase starts ("load phase started"), and
// prints one line of JSON: the deposits, then the load phase's calls,
// paid calls/s (throughput: answered 200 over the phase; sustained: the
// rate answers came at once under way, fitted as x402d's loadgen does),
// latency percentiles in ms, non-200 answers by code, the CPU time this
// client spent a call during the phase, and for each channel
// the payer, its calls answered 200 and the sum of the amounts they were
// answered charged (PAYMENT-RESPONSE extra.chargedAmount), deposits
// included.
import { x402Client, x402HTTPClient } from "@x402/core/client";
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from "@x402/core/http";
import {
  BatchSettlementEvmScheme,
  InMemoryClientChannelStorage,
  computeChannelId,
  signVoucher,
  updateChannelFromSettle,
} from "@x402/evm/batch-settlement/client";
import { toClientEvmSigner } from "@x402/evm";
import { createPublicClient, createWalletClient, defineChain, erc20Abi, http, nonceManager } from "viem";
import { HDKey, hdKeyToAccount, mnemonicToAccount } from "viem/accounts";
import { mnemonicToSeedSync } from "@scure/bip39";
import http_ from "node:http";

const env = process.env;
const num = (name, def) => (env[name] === undefined || env[name] === "" ? def : Number(env[name]));
const cfg = {
  base: env.BASE_URL,
  rpc: env.RPC_URL,
  op: env.OP ?? "diff",
  body: env.BODY ?? JSON.stringify({ a: "one\ntwo\n", b: "one\n2\n" }),
  payers: num("PAYERS", 100),
  firstPayer: num("FIRST_PAYER", 100),
  deposit: BigInt(env.DEPOSIT ?? "10000000"),
  fundFrom: env.FUND_FROM === undefined || env.FUND_FROM === "" ? undefined : Number(env.FUND_FROM),
  rate: num("RATE", 0),
  callsPerPayer: num("CALLS_PER_PAYER", 0),
  duration: num("DURATION", env.CALLS_PER_PAYER ? 300 : 10),
  presign: num("PRESIGN", 0),
  retryFor: num("RETRY_FOR", 60),
};
cfg.c = Math.min(num("C", cfg.payers), cfg.payers);
if (!cfg.base || !cfg.rpc) throw new Error("BASE_URL and RPC_URL are required");

const mnemonic = "test test test test test test test test test test test junk";
const url = `${cfg.base}/api/x402/${cfg.op}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// post sends the call with headers over a keep-alive connection (node:http:
// fetch costs this process several times the CPU a call) and resolves to
// its status and a header getter once the body is read.
let agent = new http_.Agent({ keepAlive: true, maxSockets: cfg.payers });
const target = new URL(url);
function post(headers) {
  return new Promise((resolve, reject) => {
    const req = http_.request(
      { host: target.hostname, port: target.port, path: target.pathname, method: "POST", agent, headers: { ...headers, "Content-Length": Buffer.byteLength(cfg.body) } },
      (res) => {
        res.on("data", () => {});
        res.on("end", () => resolve({ status: res.statusCode, header: (name) => res.headers[name.toLowerCase()] ?? null }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(cfg.body);
  });
}

// The quote: the seller's 402, narrowed to its batch-settlement offer.
const quote = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: cfg.body });
if (quote.status !== 402) throw new Error(`quote: status ${quote.status}: ${await quote.text()}`);
const offered = decodePaymentRequiredHeader(quote.headers.get("PAYMENT-REQUIRED"));
const accept = offered.accepts.find((a) => a.scheme === "batch-settlement");
if (!accept) throw new Error(`the seller does not offer batch-settlement: ${JSON.stringify(offered.accepts)}`);
const paymentRequired = { ...offered, accepts: [accept] };
const price = BigInt(accept.amount);
const chain = defineChain({
  id: Number(accept.network.split(":")[1]),
  name: "load",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [cfg.rpc] } },
});
const publicClient = createPublicClient({ chain, transport: http(cfg.rpc) });

// The payers, each with its own official client and channel record.
const root = HDKey.fromMasterSeed(mnemonicToSeedSync(mnemonic));
const payers = [];
for (let i = 0; i < cfg.payers; i++) {
  const account = hdKeyToAccount(root, { addressIndex: cfg.firstPayer + i });
  const signer = toClientEvmSigner(account, publicClient);
  const storage = new InMemoryClientChannelStorage();
  const scheme = new BatchSettlementEvmScheme(signer, { storage, depositStrategy: () => cfg.deposit.toString() });
  const client = new x402Client().register(accept.network, scheme);
  const channelId = computeChannelId(scheme.buildChannelConfig(accept), accept.network);
  payers.push({ account, storage, client, http: new x402HTTPClient(client), channelId, presigned: [], calls: 0, charged: 0n });
}

if (cfg.fundFrom !== undefined) await fund();

// fund sends each payer short of the deposit the deposit, from one
// development account, and waits for the transfers.
async function fund() {
  const from = mnemonicToAccount(mnemonic, { addressIndex: cfg.fundFrom, nonceManager });
  const wallet = createWalletClient({ account: from, chain, transport: http(cfg.rpc) });
  const sent = [];
  for (const p of payers) {
    const balance = await publicClient.readContract({ address: accept.asset, abi: erc20Abi, functionName: "balanceOf", args: [p.account.address] });
    if (balance >= cfg.deposit) continue;
    sent.push(
      await wallet.writeContract({ address: accept.asset, abi: erc20Abi, functionName: "transfer", args: [p.account.address, cfg.deposit], gas: 100_000n }),
    );
  }
  for (const hash of sent) {
    const r = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 250 });
    if (r.status !== "success") throw new Error(`funding transfer ${hash} reverted`);
  }
}

const errors = {};
const count = (code) => (errors[code] = (errors[code] ?? 0) + 1);

// pay makes one paid call on p's channel and returns the outcome.
async function pay(p) {
  const until = Date.now() + cfg.retryFor * 1000;
  let presigned = p.presigned.shift();
  let payload = presigned ? presigned.payload : await p.client.createPaymentPayload(paymentRequired);
  for (;;) {
    const headers = { "Content-Type": "application/json", ...(presigned ? presigned.header : p.http.encodePaymentSignatureHeader(payload)) };
    let resp;
    try {
      resp = await post(headers);
    } catch (err) {
      if (count("network") <= 3) console.error("network error:", err?.code ?? err?.message);
      if (Date.now() > until) return { ok: false };
      await sleep(100);
      continue;
    }
    const getHeader = resp.header;
    if (resp.status === 200) {
      const settled = getHeader("PAYMENT-RESPONSE");
      const charged = settled ? decodePaymentResponseHeader(settled).extra?.chargedAmount : undefined;
      if (!presigned) await p.http.processPaymentResult(payload, getHeader, resp.status);
      else if (charged !== price.toString()) {
        // The client's record was advanced by the price: resynchronize it
        // from the chain on the next call, live.
        count("presigned_charge_differs");
        p.presigned = [];
        await p.storage.delete(p.channelId.toLowerCase());
      }
      p.calls++;
      p.charged += charged === undefined ? 0n : BigInt(charged);
      if (charged === undefined) count("200_without_charged_amount");
      return { ok: true };
    }
    let code = String(resp.status);
    if (resp.status === 402) {
      const required = getHeader("PAYMENT-REQUIRED");
      code = `402 ${(required && decodePaymentRequiredHeader(required).error) || "?"}`;
    }
    count(code);
    if (Date.now() > until) return { ok: false };
    if (resp.status >= 500 || resp.status === 202 || /channel_busy/.test(code)) {
      await sleep(100);
      continue;
    }
    if (resp.status === 402) {
      if (presigned) {
        // The presigned series went wrong: the rest of it is dropped and
        // the official client recovers as it would.
        p.presigned = [];
        presigned = undefined;
      }
      const { recovered } = await p.http.processPaymentResult(payload, getHeader, resp.status);
      if (recovered) {
        payload = await p.client.createPaymentPayload(paymentRequired);
        continue;
      }
    }
    return { ok: false };
  }
}

// The deposits: every payer's first call at once.
const depositStart = performance.now();
const deposits = await Promise.all(payers.map((p) => pay(p)));
const depositSeconds = (performance.now() - depositStart) / 1000;
const depositErrors = { ...errors };
for (const k of Object.keys(errors)) delete errors[k];
const opened = payers.filter((_, i) => deposits[i].ok);

if (cfg.presign > 0) {
  for (const p of opened) {
    const first = await p.client.createPaymentPayload(paymentRequired);
    const base = BigInt(first.payload.voucher.maxClaimableAmount) - price;
    for (let k = 1; k <= cfg.presign; k++) {
      const amount = (base + price * BigInt(k)).toString();
      const voucher = k === 1 ? first.payload.voucher : await signVoucher(p.account, p.channelId, amount, accept.network);
      const payload = { ...first, payload: { ...first.payload, voucher } };
      p.presigned.push({ payload, header: p.http.encodePaymentSignatureHeader(payload) });
      await updateChannelFromSettle(p.storage, {
        server: { chargedAmount: price.toString() },
        local: { channelId: p.channelId, requestAmount: price.toString() },
      });
    }
  }
}

// The load: calls on free channels, closed loop or at a rate.
// take resolves to a free payer, or to undefined once every payer made
// its CALLS_PER_PAYER calls.
const done = (p) => cfg.callsPerPayer > 0 && p.calls >= cfg.callsPerPayer;
// The connections left idle since the deposits are dropped: the seller may
// have timed them out while this process was busy presigning.
agent.destroy();
agent = new http_.Agent({ keepAlive: true, maxSockets: cfg.payers });
const free = opened.filter((p) => !done(p));
const waiting = [];
let active = free.length;
const take = () =>
  free.length > 0 ? Promise.resolve(free.shift()) : active === 0 ? Promise.resolve(undefined) : new Promise((r) => waiting.push(r));
const release = (p) => {
  if (done(p)) {
    if (--active === 0) waiting.splice(0).forEach((r) => r(undefined));
    return;
  }
  if (waiting.length > 0) waiting.shift()(p);
  else free.push(p);
};
const outcomes = [];
console.error(`load phase started: ${opened.length} channels`);
const cpuBefore = process.cpuUsage();
const start = performance.now();
const end = start + cfg.duration * 1000;
async function call(due) {
  const p = await take();
  if (!p) return false;
  const res = await pay(p);
  release(p);
  const now = performance.now();
  outcomes.push({ ok: res.ok, offset: due - start, latency: now - due });
  return true;
}
const running = [];
if (opened.length > 0 && cfg.rate > 0) {
  for (let k = 0; ; k++) {
    const due = start + (k * 1000) / cfg.rate;
    if (due >= end || active === 0) break;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    running.push(call(due));
  }
} else if (opened.length > 0) {
  const workers = Math.min(cfg.c, opened.length);
  for (let w = 0; w < workers; w++) {
    running.push(
      (async () => {
        while (performance.now() < end && (await call(performance.now())));
      })(),
    );
  }
}
await Promise.all(running);
const elapsed = (performance.now() - start) / 1000;
const cpu = process.cpuUsage(cpuBefore);

const lat = outcomes.filter((o) => o.ok).map((o) => o.latency).sort((a, b) => a - b);
const pct = (q) => (lat.length === 0 ? 0 : lat[Math.min(lat.length - 1, Math.floor(q * lat.length))]);
const ok = lat.length;
const round = (x) => Math.round(x * 10) / 10;
console.log(
  JSON.stringify({
    payers: cfg.payers,
    deposits: { ok: opened.length, failed: cfg.payers - opened.length, seconds: round(depositSeconds), errors: depositErrors },
    mode: cfg.rate > 0 ? `rate ${cfg.rate}/s` : `${Math.min(cfg.c, opened.length)} in flight`,
    calls: outcomes.length,
    ok,
    failed: outcomes.length - ok,
    seconds: round(elapsed),
    throughput: round(ok / elapsed),
    sustained: round(sustained(outcomes)),
    p50_ms: round(pct(0.5)),
    p95_ms: round(pct(0.95)),
    p99_ms: round(pct(0.99)),
    max_ms: round(lat[lat.length - 1] ?? 0),
    errors,
    client_cpu_ms_per_call: outcomes.length === 0 ? 0 : Math.round(((cpu.user + cpu.system) / 1000 / outcomes.length) * 1000) / 1000,
    channels: payers.map((p) => ({ channelId: p.channelId, payer: p.account.address, calls: p.calls, charged: p.charged.toString() })),
  }),
);

// sustained is the rate at which answers came once the run was under way:
// the slope of the answers counted against their times, between a quarter
// of the way to the last call's start and that start (loadgen's Sustained).
function sustained(outs) {
  const last = Math.max(0, ...outs.map((o) => o.offset));
  const from = last / 4;
  const ends = outs
    .filter((o) => o.ok)
    .map((o) => o.offset + o.latency)
    .filter((e) => e >= from && e < last)
    .sort((a, b) => a - b);
  const n = ends.length;
  if (n < 2) return 0;
  const mt = ends.reduce((s, e) => s + e, 0) / n;
  const mn = (n - 1) / 2;
  let cov = 0;
  let v = 0;
  ends.forEach((e, i) => {
    cov += (e - mt) * (i - mn);
    v += (e - mt) ** 2;
  });
  return v === 0 ? 0 : (cov / v) * 1000;
}
