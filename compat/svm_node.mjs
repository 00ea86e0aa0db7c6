// A Solana JSON-RPC node for the tests, built on LiteSVM (npm litesvm, pinned
// in package.json): the real SVM runtime with the SPL Token, Token-2022, Memo
// and Associated Token Account programs, signatures verified. LiteSVM has no
// blocks and no RPC of its own; this server gives it both, in mainnet's
// shape: a slot (and a block) every SLOT_MS (400 ms), a new blockhash each
// block, valid for 150 blocks; USDC's mint at its mainnet address with 6
// decimals; development payers funded with SOL and USDC.
//
// Usage: node compat/svm_node.mjs [--port P] [--slot-ms 400] [--payers 10]
//   [--usdc 1000000000000] [--state FILE]
// It prints one JSON line {"url": ...} once it listens, and with --state it
// saves its whole state there on SIGTERM and starts from it when the file
// exists (a node operator's restart).
//
// Methods: getLatestBlockhash, getAccountInfo, getMultipleAccounts,
// simulateTransaction (sigVerify, replaceRecentBlockhash, innerInstructions:
// SPL Token's TransferChecked parsed, the others partially decoded, as a
// node answers them), sendTransaction
// (preflight unless skipPreflight), getSignatureStatuses (processed, then
// confirmed one slot later, finalized 32 slots later), getTransaction
// (encoding base64 or base58: the whole transaction, at its slot and
// block time, with a meta of err, status, fee, innerInstructions in their
// compiled form and the pre and post token balances of its writable token
// accounts; the lamport balances, logs and rewards are answered empty; any
// other encoding: its meta's err and innerInstructions only, SPL Token's
// TransferChecked parsed), getSignaturesForAddress (newest first, with
// before, until, limit and commitment as a node takes them; memo is
// answered null), isBlockhashValid,
// getBlockHeight, getSlot, getBalance, getTokenAccountBalance,
// getMinimumBalanceForRentExemption, getHealth, getVersion, getGenesisHash;
// for the tests: litesvm_fund {address, lamports, amount, mint} (SOL and an
// associated token account of mint, USDC by default), litesvm_mint {address,
// tokenProgram, decimals} (another mint, of SPL Token or Token-2022),
// litesvm_payer {index} (a development payer's 64-byte key, base58),
// litesvm_drop {method, count} (the next count answers of method are lost
// after the work is done), litesvm_ignore {count} (the next count
// sendTransaction calls answer the signature and land nothing, as a
// transaction a leader dropped), litesvm_pause {ms} (no new slot for ms),
// litesvm_hold {count, ms} (the next count sendTransaction calls are held
// ms before they are handled), litesvm_held (the signatures of the sends
// held now) and litesvm_stats {reset} (the calls and time per method, the
// slots made and their time as "(slot)", HTTP requests, JSON time and event
// loop use since the last reset).
import { createServer } from "node:http";
import { createHash, createPrivateKey, createPublicKey } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { LiteSVM } = require("litesvm");
const internal = require("litesvm/dist/internal.js");
const {
  getAddressEncoder, getAddressDecoder, getBase58Encoder, getBase58Decoder, getBase64Encoder,
  getBase64Decoder,
} = require("@solana/kit");
const { getMintEncoder, getTokenEncoder, findAssociatedTokenPda, TOKEN_PROGRAM_ADDRESS, AccountState } = require("@solana-program/token");

// Mainnet's shape.
const USDC_MINT = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
const USDC_DECIMALS = 6;
const MAX_PROCESSING_AGE = 150; // blocks a blockhash is valid for
const FINALITY = 32; // slots until finalized
const TOKEN_PROGRAMS = [TOKEN_PROGRAM_ADDRESS, "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb"];
const GENESIS_HASH = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : def;
}
const port = Number(arg("port", "0"));
const slotMs = Number(arg("slot-ms", "400"));
const payers = Number(arg("payers", "10"));
const payerUSDC = BigInt(arg("usdc", "1000000000000")); // 1,000,000 USDC
const statePath = arg("state", "");

const addrEnc = getAddressEncoder();
const addrDec = getAddressDecoder();
const b58enc = getBase58Encoder();
const b58dec = getBase58Decoder();
const b64enc = getBase64Encoder();
const b64dec = getBase64Decoder();

// The development payer i: an ed25519 key whose seed is
// SHA-256("x402d svm development payer <i>"); internal/svmtest derives the
// same keys.
function devSeed(i) {
  return createHash("sha256").update(`x402d svm development payer ${i}`).digest();
}
function devKey(i) {
  const seed = devSeed(i);
  const der = Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]);
  const pub = createPublicKey(createPrivateKey({ key: der, format: "der", type: "pkcs8" }))
    .export({ format: "der", type: "spki" }).subarray(12);
  return { secret: Buffer.concat([seed, pub]), address: b58dec.decode(pub) };
}

// Chain state kept beside LiteSVM's accounts: the blocks made so far, the
// blockhash of each, and what became of each transaction sent.
let chain = {
  slot: 0, // current slot; one block per slot (no slot is skipped)
  time: Math.floor(Date.now() / 1000), // the current slot's block time
  blocks: [], // [{slot, height, hash}], newest last, kept while valid
  statuses: {}, // signature -> {slot, err, time, tx (base64), fee, pre, post, inner, cinner}
  byAddress: {}, // account key (hex) -> the signatures of the transactions naming it, oldest first
};
let svm;

function newSvm() {
  const s = new LiteSVM().withBlockhashCheck(false).withSigverify(true).withTransactionHistory(100000n);
  return s;
}

// fund adds lamports to address and, when amount is not null, gives it an
// associated token account of mint (USDC by default) holding amount.
function fund(address, lamports, amount, mint = USDC_MINT) {
  if (lamports > 0n) {
    const cur = svm.getBalance(address) ?? 0n;
    svm.setAccount({ address, lamports: cur + lamports, data: new Uint8Array(), programAddress: "11111111111111111111111111111111", executable: false });
  }
  if (amount === null) return Promise.resolve(null);
  const tokenProgram = svm.getAccount(mint).programAddress;
  return findAssociatedTokenPda({ owner: address, mint, tokenProgram }).then(([ata]) => {
    const data = getTokenEncoder().encode({
      mint, owner: address, amount, delegate: null, state: AccountState.Initialized,
      isNative: null, delegatedAmount: 0n, closeAuthority: null,
    });
    svm.setAccount({ address: ata, lamports: svm.minimumBalanceForRentExemption(BigInt(data.length)), data, programAddress: tokenProgram, executable: false });
    return ata;
  });
}

// makeMint places a mint of decimals at address, owned by tokenProgram.
function makeMint(address, tokenProgram, decimals, supply) {
  const data = getMintEncoder().encode({ mintAuthority: null, supply, decimals, isInitialized: true, freezeAuthority: null });
  svm.setAccount({ address, lamports: svm.minimumBalanceForRentExemption(BigInt(data.length)), data, programAddress: tokenProgram, executable: false });
}

async function genesis() {
  svm = newSvm();
  makeMint(USDC_MINT, TOKEN_PROGRAM_ADDRESS, USDC_DECIMALS, payerUSDC * BigInt(payers));
  for (let i = 0; i < payers; i++) {
    await fund(devKey(i).address, 10_000_000_000n, payerUSDC);
  }
  chain.blocks.push({ slot: 0, height: 0, hash: svm.latestBlockhash() });
}

async function restore() {
  const saved = JSON.parse(readFileSync(statePath, "utf8"));
  svm = LiteSVM.fromBytes(b64enc.encode(saved.svm));
  svm.inner.setBlockhashCheck(false);
  svm.inner.setSigverify(true);
  chain = saved.chain;
  chain.byAddress ??= {}; // a state saved before it was kept
}

function save() {
  writeFileSync(statePath, JSON.stringify({ svm: b64dec.decode(svm.toBytes()), chain }));
}

const height = () => chain.blocks[chain.blocks.length - 1].height;

// tick makes the next slot's block: a new blockhash.
function tick() {
  chain.slot++;
  svm.expireBlockhash();
  chain.blocks.push({ slot: chain.slot, height: height() + 1, hash: svm.latestBlockhash() });
  // Keep the blocks whose blockhash may still be used, and the finality lag.
  const keep = MAX_PROCESSING_AGE + FINALITY + 2;
  if (chain.blocks.length > keep) chain.blocks.splice(0, chain.blocks.length - keep);
  const c = svm.getClock();
  c.slot = BigInt(chain.slot);
  chain.time = Math.floor(Date.now() / 1000);
  c.unixTimestamp = BigInt(chain.time);
  svm.setClock(c);
}

// blockAt returns the newest block at commitment.
function blockAt(commitment) {
  const lag = commitment === "processed" ? 0 : commitment === "confirmed" ? 1 : FINALITY;
  const i = Math.max(0, chain.blocks.length - 1 - lag);
  return chain.blocks[i];
}

// lastValid returns the last block height at which a transaction with
// blockhash may land, or null when the node does not know it.
function lastValid(hash) {
  const b = chain.blocks.find((b) => b.hash === hash);
  return b ? b.height + MAX_PROCESSING_AGE : null;
}
const blockhashValid = (hash) => {
  const lv = lastValid(hash);
  return lv !== null && height() <= lv;
};

const ctx = (commitment) => ({ apiVersion: "2.2.0", slot: blockAt(commitment ?? "finalized").slot });

// Errors as a node names them in JSON. LiteSVM's native binding hands out
// the fieldless errors as numbers; their names are those of its enums, read
// from its type declarations.
function enumNames(name) {
  const dts = readFileSync(require.resolve("litesvm/dist/internal.d.ts"), "utf8");
  const body = dts.match(new RegExp(`enum ${name} \\{([^}]*)\\}`))[1];
  const names = [];
  for (const m of body.matchAll(/(\w+) = (\d+)/g)) names[Number(m[2])] = m[1];
  return names;
}
const txErrNames = enumNames("TransactionErrorFieldless");
const ixErrNames = enumNames("InstructionErrorFieldless");
const txErrName = (n) => txErrNames[n] ?? `TransactionError${n}`;
const ixErrName = (n) => ixErrNames[n] ?? `InstructionError${n}`;
function txError(err) {
  if (typeof err === "number") return txErrName(err);
  if (err instanceof internal.TransactionErrorInstructionError) {
    const inner = err.err();
    let e;
    if (typeof inner === "number") e = ixErrName(inner);
    else if (inner instanceof internal.InstructionErrorCustom) e = { Custom: inner.code };
    else e = { BorshIoError: String(inner) };
    return { InstructionError: [err.index, e] };
  }
  if (err instanceof internal.TransactionErrorDuplicateInstruction) return { DuplicateInstruction: err.index };
  if (err instanceof internal.TransactionErrorInsufficientFundsForRent) return { InsufficientFundsForRent: { account_index: err.accountIndex } };
  return String(err);
}

class RPCError extends Error {
  constructor(code, message, data) {
    super(message);
    this.code = code;
    this.data = data;
  }
}

// decodeTx reads what the node needs of a wire transaction (base64 or
// base58): its bytes, first signature, version, blockhash and where the
// blockhash sits; LiteSVM reads the rest. It is read by hand, not with
// @solana/kit's decoders, which spell out every account key in base58: a
// node under load spent most of its time there.
function decodeTx(encoded, encoding) {
  let bytes;
  try {
    bytes = encoding === "base64" ? new Uint8Array(Buffer.from(encoded, "base64")) : b58enc.encode(encoded);
  } catch (e) {
    throw new RPCError(-32602, `invalid transaction: ${e.message}`);
  }
  const bad = (why) => new RPCError(-32602, `failed to deserialize VersionedTransaction: ${why}`);
  const shortVec = (off) => {
    let n = 0;
    for (let shift = 0; ; shift += 7) {
      if (off >= bytes.length || shift > 14) throw bad("truncated length");
      const b = bytes[off++];
      n |= (b & 0x7f) << shift;
      if (!(b & 0x80)) return [n, off];
    }
  };
  const [numSignatures, sigStart] = shortVec(0);
  const msgStart = sigStart + 64 * numSignatures;
  if (msgStart + 4 > bytes.length) throw bad("truncated signatures");
  const versioned = (bytes[msgStart] & 0x80) !== 0;
  if (versioned && (bytes[msgStart] & 0x7f) !== 0) throw new RPCError(-32015, "Transaction version is not supported");
  const header = msgStart + (versioned ? 1 : 0);
  const [numKeys, keysStart] = shortVec(header + 3);
  const blockhashOffset = keysStart + 32 * numKeys;
  if (blockhashOffset + 32 > bytes.length) throw bad("truncated message");
  if (numSignatures !== bytes[header]) {
    throw new RPCError(-32602, "invalid transaction: Transaction failed to sanitize accounts offsets correctly");
  }
  const signature = b58dec.decode(bytes.subarray(sigStart, sigStart + 64));
  const blockhash = b58dec.decode(bytes.subarray(blockhashOffset, blockhashOffset + 32));
  return { bytes, signature, blockhash, blockhashOffset, versioned, numKeys, keysStart, header, numSignatures };
}

// run simulates or executes tx on LiteSVM. It returns {err, logs, units}
// for a transaction that ran (err null when it succeeded), or throws an
// RPCError for one that cannot (signature, blockhash).
function run(d, { simulate, sigVerify }) {
  if (!blockhashValid(d.blockhash)) {
    return { err: "BlockhashNotFound", logs: [], units: 0, landed: false };
  }
  svm.inner.setSigverify(sigVerify);
  let out;
  try {
    if (simulate) out = d.versioned ? svm.inner.simulateVersionedTransaction(d.bytes) : svm.inner.simulateLegacyTransaction(d.bytes);
    else out = d.versioned ? svm.inner.sendVersionedTransaction(d.bytes) : svm.inner.sendLegacyTransaction(d.bytes);
  } catch (e) {
    throw new RPCError(-32602, `failed to deserialize VersionedTransaction: ${e?.message ?? e}`);
  } finally {
    svm.inner.setSigverify(true);
  }
  if (out instanceof internal.FailedTransactionMetadata) {
    const err = txError(out.err());
    const meta = out.meta();
    // An instruction that failed lands (its fee is paid); a transaction
    // refused before it ran does not.
    const landed = typeof err === "object" && err !== null && ("InstructionError" in err || "DuplicateInstruction" in err || "InsufficientFundsForRent" in err);
    return { err, logs: simulate ? meta.logs() : [], units: Number(meta.computeUnitsConsumed()), landed, meta, keys: () => staticKeys(d) };
  }
  // A sent transaction's logs are not answered: not read.
  const meta = simulate ? out.meta() : out;
  return { err: null, logs: simulate ? meta.logs() : [], units: simulate ? Number(meta.computeUnitsConsumed()) : 0, landed: true, meta, keys: () => staticKeys(d) };
}

// staticKeys returns the account keys a transaction's message lists, in
// base58: read only when they are needed (base58 is slow).
function staticKeys(d) {
  const keys = [];
  for (let i = 0; i < d.numKeys; i++) keys.push(b58dec.decode(d.bytes.subarray(d.keysStart + 32 * i, d.keysStart + 32 * (i + 1))));
  return keys;
}

// writable returns the indexes of the keys a transaction's message marks
// writable: the signed keys before its read-only signed ones, the unsigned
// keys before its read-only unsigned ones.
function writable(d) {
  const [nsig, roSigned, roUnsigned] = [d.bytes[d.header], d.bytes[d.header + 1], d.bytes[d.header + 2]];
  const out = [];
  for (let i = 0; i < d.numKeys; i++) {
    if (i < nsig ? i < nsig - roSigned : i < d.numKeys - roUnsigned) out.push(i);
  }
  return out;
}

const tokenProgramBytes = TOKEN_PROGRAMS.map((p) => Buffer.from(addrEnc.encode(p)));

// tokenAccounts returns the token accounts among the writable keys of a
// transaction (d, from decodeTx) as they are now, each as [key index,
// token program index, its first 72 bytes (mint, owner, amount) in
// base64]: what its pre or post token balances are made of. A node lists
// its read-only token accounts too, whose balances a transaction cannot
// change; they are left out here, as are the accounts of other programs
// (read by their raw key: base58 is slow).
function tokenAccounts(d) {
  const out = [];
  for (const i of writable(d)) {
    const a = svm.inner.getAccount(d.bytes.subarray(d.keysStart + 32 * i, d.keysStart + 32 * (i + 1)));
    if (!a) continue;
    const p = tokenProgramBytes.findIndex((b) => b.equals(a.owner()));
    const data = a.data();
    // A Token-2022 account with extensions is longer, its type (2) after
    // the base account's 165 bytes.
    if (p < 0 || data.length < 165 || (data.length > 165 && data[165] !== 2)) continue;
    out.push([i, p, Buffer.from(data.subarray(0, 72)).toString("base64")]);
  }
  return out;
}

// tokenBalance returns a token account of tokenAccounts as a node answers
// it in preTokenBalances and postTokenBalances.
function tokenBalance([accountIndex, p, raw]) {
  const b = Buffer.from(raw, "base64");
  const mint = b58dec.decode(b.subarray(0, 32));
  const amount = b.readBigUInt64LE(64);
  const m = svm.getAccount(mint);
  const decimals = m.exists ? m.data[44] : 0;
  const ui = Number(amount) / 10 ** decimals;
  return {
    accountIndex, mint, owner: b58dec.decode(b.subarray(32, 64)), programId: TOKEN_PROGRAMS[p],
    uiTokenAmount: { amount: amount.toString(), decimals, uiAmount: ui, uiAmountString: String(ui) },
  };
}

// indexKeys records the signature of a landed transaction under each of
// its account keys, for getSignaturesForAddress.
function indexKeys(d) {
  for (let i = 0; i < d.numKeys; i++) {
    const key = Buffer.from(d.bytes.subarray(d.keysStart + 32 * i, d.keysStart + 32 * (i + 1))).toString("hex");
    (chain.byAddress[key] ??= []).push(d.signature);
  }
}

// compiledInner returns the inner instructions of a transaction run (r,
// from run) in their compiled form, as a node answers them for the base64
// and base58 encodings: program and accounts as indexes of its keys, data
// in base58.
function compiledInner(r) {
  const out = [];
  r.meta.innerInstructions().forEach((group, index) => {
    if (group.length === 0) return;
    out.push({ index, instructions: group.map((inner) => {
      const ix = inner.instruction();
      return { programIdIndex: ix.programIdIndex(), accounts: [...ix.accounts()], data: b58dec.decode(ix.data()), stackHeight: inner.stackHeight() };
    }) });
  });
  return out;
}

// innerInstructions returns the inner instructions of a transaction run
// (r, from run) as a node answers them in simulateTransaction: for each
// instruction that made some, its index and those it made, SPL Token's
// TransferChecked parsed (as jsonParsed), the others partially decoded.
function innerInstructions(r) {
  const out = [];
  let keys;
  r.meta.innerInstructions().forEach((group, index) => {
    if (group.length === 0) return;
    keys ??= r.keys();
    out.push({ index, instructions: group.map((inner) => uiInstruction(inner.instruction(), inner.stackHeight(), keys)) });
  });
  return out;
}

function uiInstruction(ix, stackHeight, keys) {
  const programId = keys[ix.programIdIndex()];
  const accounts = [...ix.accounts()].map((i) => keys[i]);
  const data = ix.data();
  if (TOKEN_PROGRAMS.includes(programId) && data.length === 10 && data[0] === 12 && accounts.length >= 4) {
    const amount = new DataView(data.buffer, data.byteOffset).getBigUint64(1, true);
    const decimals = data[9];
    const ui = Number(amount) / 10 ** decimals;
    return {
      program: programId === TOKEN_PROGRAM_ADDRESS ? "spl-token" : "spl-token-2022", programId, stackHeight,
      parsed: { type: "transferChecked", info: { source: accounts[0], mint: accounts[1], destination: accounts[2], authority: accounts[3],
        tokenAmount: { amount: amount.toString(), decimals, uiAmount: ui, uiAmountString: String(ui) } } },
    };
  }
  return { programId, accounts, data: b58dec.decode(data), stackHeight };
}

function encodeAccount(address, encoding) {
  const a = svm.getAccount(address);
  if (!a.exists) return null;
  const data = encoding === "base58" ? [b58dec.decode(a.data), "base58"] : [b64dec.decode(a.data), "base64"];
  return { data, executable: a.executable, lamports: Number(a.lamports), owner: a.programAddress, rentEpoch: 0, space: a.data.length };
}

function status(sig) {
  const s = chain.statuses[sig];
  if (!s) return null;
  const age = chain.slot - s.slot;
  const confirmationStatus = age >= FINALITY ? "finalized" : age >= 1 ? "confirmed" : "processed";
  return {
    slot: s.slot, confirmations: confirmationStatus === "finalized" ? null : age,
    err: s.err, status: s.err === null ? { Ok: null } : { Err: s.err }, confirmationStatus,
  };
}

const drops = {}; // method -> answers still to lose
let ignoreSends = 0; // sendTransaction calls still to drop silently
let pausedUntil = 0;
const hold = { count: 0, ms: 0 }; // sendTransaction calls still to hold, and for how long
const held = new Set(); // signatures of the sends held now

const methods = {
  getHealth: () => "ok",
  getVersion: () => ({ "solana-core": "2.2.0", "feature-set": 0 }),
  getGenesisHash: () => GENESIS_HASH,
  getSlot: (cfg) => blockAt(cfg?.commitment ?? "finalized").slot,
  getBlockHeight: (cfg) => blockAt(cfg?.commitment ?? "finalized").height,
  getLatestBlockhash: (cfg) => {
    const b = blockAt(cfg?.commitment ?? "finalized");
    return { context: ctx(cfg?.commitment), value: { blockhash: b.hash, lastValidBlockHeight: b.height + MAX_PROCESSING_AGE } };
  },
  isBlockhashValid: (hash, cfg) => ({ context: ctx(cfg?.commitment), value: blockhashValid(hash) }),
  getBalance: (address, cfg) => ({ context: ctx(cfg?.commitment), value: Number(svm.getBalance(address) ?? 0n) }),
  getMinimumBalanceForRentExemption: (len) => Number(svm.minimumBalanceForRentExemption(BigInt(len ?? 0))),
  getAccountInfo: (address, cfg) => ({ context: ctx(cfg?.commitment), value: encodeAccount(address, cfg?.encoding) }),
  getMultipleAccounts: (addresses, cfg) => ({ context: ctx(cfg?.commitment), value: addresses.map((a) => encodeAccount(a, cfg?.encoding)) }),
  getTokenAccountBalance: (address, cfg) => {
    const a = svm.getAccount(address);
    if (!a.exists || !TOKEN_PROGRAMS.includes(a.programAddress) || a.data.length < 165) {
      throw new RPCError(-32602, "Invalid param: not a Token account");
    }
    const amount = new DataView(a.data.buffer, a.data.byteOffset).getBigUint64(64, true);
    const mint = svm.getAccount(addrDec.decode(a.data.subarray(0, 32)));
    const decimals = mint.exists ? mint.data[44] : 0;
    const ui = Number(amount) / 10 ** decimals;
    return { context: ctx(cfg?.commitment), value: { amount: amount.toString(), decimals, uiAmount: ui, uiAmountString: String(ui) } };
  },
  getSignatureStatuses: (sigs) => ({ context: ctx("processed"), value: sigs.map(status) }),
  getTransaction: (sig, cfg = {}) => {
    if (cfg.commitment === "processed") throw new RPCError(-32602, "Method does not support commitment below `confirmed`");
    const st = status(sig);
    const order = ["processed", "confirmed", "finalized"];
    if (!st || order.indexOf(st.confirmationStatus) < order.indexOf(cfg.commitment ?? "finalized")) return null;
    const s = chain.statuses[sig];
    const { slot, err, inner } = s;
    const encoding = cfg.encoding ?? "json";
    if ((encoding === "base64" || encoding === "base58") && s.tx !== undefined) {
      const d = decodeTx(s.tx, "base64");
      if (d.versioned && cfg.maxSupportedTransactionVersion === undefined) {
        throw new RPCError(-32015, "Transaction version (0) is not supported by the requesting client. Please try the request again with the following configuration parameter: \"maxSupportedTransactionVersion\": 0");
      }
      return {
        slot, blockTime: s.time ?? null, version: d.versioned ? 0 : "legacy",
        transaction: [encoding === "base64" ? s.tx : b58dec.decode(d.bytes), encoding],
        meta: {
          err, status: st.status, fee: s.fee, preBalances: [], postBalances: [], innerInstructions: s.cinner ?? [], logMessages: [],
          preTokenBalances: (s.pre ?? []).map(tokenBalance), postTokenBalances: (s.post ?? []).map(tokenBalance), rewards: [],
          loadedAddresses: { writable: [], readonly: [] }, computeUnitsConsumed: s.units ?? 0,
        },
      };
    }
    return { slot, blockTime: s.time ?? null, transaction: { signatures: [sig] }, meta: { err, status: st.status, fee: 5000, innerInstructions: inner ?? [] } };
  },
  getSignaturesForAddress: (address, cfg = {}) => {
    const commitment = cfg.commitment ?? "finalized";
    if (commitment === "processed") throw new RPCError(-32602, "Method does not support commitment below `confirmed`");
    const limit = cfg.limit ?? 1000;
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new RPCError(-32602, "Invalid limit; max 1000");
    let key;
    try {
      key = Buffer.from(addrEnc.encode(address)).toString("hex");
    } catch {
      throw new RPCError(-32602, "Invalid param: Invalid");
    }
    const sigs = chain.byAddress[key] ?? [];
    const top = blockAt(commitment).slot;
    // Newest first, from before (exclusive; one the node does not know
    // finds nothing, as a node's does) down to until (exclusive).
    let i = sigs.length - 1;
    if (cfg.before) i = sigs.lastIndexOf(cfg.before) - 1;
    if (cfg.before && !chain.statuses[cfg.before]) i = -1;
    const out = [];
    for (; i >= 0 && out.length < limit; i--) {
      const sig = sigs[i];
      if (sig === cfg.until) break;
      const s = chain.statuses[sig];
      if (s.slot > top) continue;
      out.push({ signature: sig, slot: s.slot, err: s.err, memo: null, blockTime: s.time ?? null, confirmationStatus: status(sig).confirmationStatus });
    }
    return out;
  },
  simulateTransaction: (encoded, cfg = {}) => {
    const encoding = cfg.encoding ?? "base58";
    if (cfg.sigVerify && cfg.replaceRecentBlockhash) {
      throw new RPCError(-32602, "sigVerify may not be used with replaceRecentBlockhash");
    }
    const d = decodeTx(encoded, encoding);
    let replacement = null;
    if (cfg.replaceRecentBlockhash) {
      const b = blockAt("processed");
      const bytes = new Uint8Array(d.bytes);
      bytes.set(b58enc.encode(b.hash), d.blockhashOffset);
      Object.assign(d, decodeTx(Buffer.from(bytes).toString("base64"), "base64"));
      replacement = { blockhash: b.hash, lastValidBlockHeight: b.height + MAX_PROCESSING_AGE };
    }
    if (cfg.sigVerify) verifyNotAlreadyProcessed(d);
    const r = run(d, { simulate: true, sigVerify: Boolean(cfg.sigVerify) });
    if (r.err === "SignatureFailure") throw new RPCError(-32003, "Transaction signature verification failure");
    return {
      context: ctx(cfg.commitment),
      value: { err: r.err, logs: r.logs, accounts: null, unitsConsumed: r.units, returnData: null, replacementBlockhash: replacement, innerInstructions: cfg.innerInstructions && r.meta ? innerInstructions(r) : null },
    };
  },
  sendTransaction: async (encoded, cfg = {}) => {
    const d = decodeTx(encoded, cfg.encoding ?? "base58");
    if (hold.count > 0) {
      hold.count--;
      held.add(d.signature);
      await new Promise((resolve) => setTimeout(resolve, hold.ms));
      held.delete(d.signature);
    }
    if (!cfg.skipPreflight) {
      verifyNotAlreadyProcessed(d);
      const sim = run(d, { simulate: true, sigVerify: true });
      if (sim.err === "SignatureFailure") throw new RPCError(-32003, "Transaction signature verification failure");
      if (sim.err !== null) {
        throw new RPCError(-32002, `Transaction simulation failed: ${typeof sim.err === "string" ? sim.err : JSON.stringify(sim.err)}`,
          { err: sim.err, logs: sim.logs, accounts: null, unitsConsumed: sim.units, returnData: null });
      }
    }
    if (chain.statuses[d.signature]) return d.signature; // a duplicate: dropped
    if (ignoreSends > 0) {
      ignoreSends--;
      return d.signature;
    }
    const pre = tokenAccounts(d);
    const r = run(d, { simulate: false, sigVerify: true });
    if (r.landed) {
      // For getTransaction and getSignaturesForAddress.
      const s = { slot: chain.slot, err: r.err, time: chain.time, tx: Buffer.from(d.bytes).toString("base64"), fee: 5000 * d.numSignatures, pre, post: tokenAccounts(d) };
      chain.statuses[d.signature] = s;
      const inner = innerInstructions(r);
      if (inner.length > 0) {
        s.inner = inner;
        s.cinner = compiledInner(r);
      }
      indexKeys(d);
    }
    else if (r.err === "SignatureFailure") throw new RPCError(-32003, "Transaction signature verification failure");
    return d.signature;
  },

  // Test controls.
  litesvm_fund: async ({ address, lamports, amount, mint }) => {
    const ata = await fund(address, BigInt(lamports ?? 0), amount === undefined || amount === null ? null : BigInt(amount), mint ?? USDC_MINT);
    return { ata };
  },
  litesvm_mint: ({ address, tokenProgram, decimals }) => {
    makeMint(address, tokenProgram, decimals, 0n);
    return true;
  },
  litesvm_payer: ({ index }) => {
    const k = devKey(index);
    return { address: k.address, secret: b58dec.decode(k.secret) };
  },
  litesvm_drop: ({ method, count }) => {
    drops[method] = (drops[method] ?? 0) + count;
    return true;
  },
  litesvm_ignore: ({ count }) => {
    ignoreSends += count;
    return true;
  },
  litesvm_hold: ({ count, ms }) => {
    hold.count += count;
    hold.ms = ms;
    return true;
  },
  litesvm_held: () => [...held],
  litesvm_pause: ({ ms }) => {
    pausedUntil = Date.now() + ms;
    return true;
  },
  litesvm_stats: ({ reset } = {}) => statsReport(Boolean(reset)),
};

function verifyNotAlreadyProcessed(d) {
  if (chain.statuses[d.signature]) {
    throw new RPCError(-32002, "Transaction simulation failed: This transaction has already been processed", { err: "AlreadyProcessed", logs: [] });
  }
}

function count(method, started) {
  const m = (stats.methods[method] ??= { calls: 0, ms: 0 });
  m.calls++;
  m.ms += performance.now() - started;
}

function replacer(_, v) {
  return typeof v === "bigint" ? Number(v) : v;
}

// What the node has done since the last litesvm_stats that reset it: the
// JSON-RPC calls and the time spent in each method (the test controls
// litesvm_* apart), the HTTP requests, the time spent reading and writing
// their JSON, and the event loop's use.
function newStats() {
  return { since: Date.now(), elu: performance.eventLoopUtilization(), requests: 0, jsonMs: 0, methods: {} };
}
let stats = newStats();
function statsReport(reset) {
  const out = {
    seconds: (Date.now() - stats.since) / 1000,
    eventLoopUtilization: performance.eventLoopUtilization(stats.elu).utilization,
    requests: stats.requests,
    jsonMs: stats.jsonMs,
    methods: stats.methods,
  };
  if (reset) stats = newStats();
  return out;
}

async function handle(req) {
  const { id = null, method, params = [] } = req ?? {};
  const fn = methods[method];
  if (!fn) return { jsonrpc: "2.0", id, error: { code: -32601, message: "Method not found" } };
  const counted = !method.startsWith("litesvm_");
  const started = counted ? performance.now() : 0;
  try {
    // The method's own time: a batch's other calls run while it awaits.
    let result = fn(...params);
    if (counted) count(method, started);
    if (result instanceof Promise) result = await result;
    if (drops[method] > 0) {
      drops[method]--;
      return undefined;
    }
    return { jsonrpc: "2.0", id, result };
  } catch (e) {
    if (counted) count(method, started);
    if (e instanceof RPCError) {
      return { jsonrpc: "2.0", id, error: { code: e.code, message: e.message, ...(e.data ? { data: e.data } : {}) } };
    }
    return { jsonrpc: "2.0", id, error: { code: -32603, message: String(e?.message ?? e) } };
  }
}

if (statePath && existsSync(statePath)) await restore();
else await genesis();

const timer = setInterval(() => {
  if (Date.now() < pausedUntil) return;
  const started = performance.now();
  tick();
  count("(slot)", started);
}, slotMs);

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    stats.requests++;
    let t = performance.now();
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      stats.jsonMs += performance.now() - t;
    } catch {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } }));
      return;
    }
    let out;
    if (Array.isArray(body)) out = (await Promise.all(body.map(handle))).filter((r) => r !== undefined);
    else out = await handle(body);
    if (out === undefined || (Array.isArray(out) && out.length === 0 && body.length > 0)) {
      // The answer is lost: the connection drops after the work is done.
      req.socket.destroy();
      return;
    }
    t = performance.now();
    const text = JSON.stringify(out, replacer);
    stats.jsonMs += performance.now() - t;
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(text);
  });
});
server.listen(port, "127.0.0.1", () => {
  const { port: p } = server.address();
  console.log(JSON.stringify({ url: `http://127.0.0.1:${p}` }));
});

function stop() {
  clearInterval(timer);
  if (statePath) save();
  server.close();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
