// Compiles the Solidity contracts of this directory with the npm solc pinned
// in compat/package.json and writes contracts/build/<Contract>.json (ABI and
// bytecode), which Go embeds. Run it with `go tool task contracts`.
// CONTRACTS_OUT=<dir> writes the artifacts there instead (the Go test that
// checks the committed artifacts are current).
import { readFileSync, readdirSync, writeFileSync, mkdirSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.dirname(here);
const modules = path.join(root, "compat", "node_modules");
if (!existsSync(path.join(modules, "solc")) || !existsSync(path.join(modules, "@openzeppelin", "contracts"))) {
  console.error("solc or @openzeppelin/contracts is missing from compat/node_modules; run: go tool task npm");
  process.exit(1);
}
const solc = createRequire(path.join(modules, "noop.js"))("solc");

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

const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (output.errors ?? []).filter((e) => e.severity === "error");
for (const e of output.errors ?? []) console.error(e.formattedMessage);
if (errors.length > 0) process.exit(1);

const outDir = process.env.CONTRACTS_OUT || path.join(here, "build");
mkdirSync(outDir, { recursive: true });
for (const [unit, contracts] of Object.entries(output.contracts ?? {})) {
  if (!unit.startsWith("contracts/")) continue;
  for (const [name, c] of Object.entries(contracts)) {
    const artifact = {
      contractName: name,
      sourceName: unit,
      compiler: `solc ${solc.version()}`,
      abi: c.abi,
      bytecode: "0x" + c.evm.bytecode.object,
      deployedBytecode: "0x" + c.evm.deployedBytecode.object,
    };
    const out = path.join(outDir, `${name}.json`);
    writeFileSync(out, JSON.stringify(artifact, null, 2) + "\n");
    console.log(`wrote ${out} (${c.evm.bytecode.object.length / 2} bytes of init code)`);
  }
}
