// oracle.mjs computes what JavaScript's RegExp returns for every case of a
// corpus, in the shape of the regex operation's result, with positions
// converted from UTF-16 code units to code points.
//
// Usage: node oracle.mjs corpus.json > expected.json
//
// The corpus is a JSON array of groups {patterns, texts, flags, deviation?};
// each group stands for every pattern x text x flags combination. Output is
// a JSON array of cases {pattern, text, flags, deviation, error, split,
// matches}. error is the SyntaxError message when RegExp refuses the
// pattern. split is true when a position falls inside a surrogate pair and
// so cannot be given in code points. Without g the result is one exec;
// with g it is matchAll.
import { readFileSync } from "node:fs";

const corpus = JSON.parse(readFileSync(process.argv[2], "utf8"));

// groupNames returns the name of each capturing group in pattern order
// (null when unnamed), scanning the source as the grammar nests it.
function groupNames(source) {
  const names = [];
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === "\\") { i++; continue; }
    if (inClass) { if (c === "]") inClass = false; continue; }
    if (c === "[") { inClass = true; continue; }
    if (c !== "(") continue;
    if (source[i + 1] !== "?") { names.push(null); continue; }
    if (source[i + 2] === "<" && source[i + 3] !== "=" && source[i + 3] !== "!") {
      const end = source.indexOf(">", i + 3);
      names.push(source.slice(i + 3, end));
    }
  }
  return names;
}

// codePointIndex maps each UTF-16 offset of text to its code point index,
// or -1 inside a surrogate pair.
function codePointIndex(text) {
  const map = new Array(text.length + 1).fill(-1);
  let cp = 0;
  for (let i = 0; i < text.length; ) {
    map[i] = cp++;
    const code = text.codePointAt(i);
    i += code > 0xffff ? 2 : 1;
  }
  map[text.length] = cp;
  return map;
}

function run(pattern, text, flags) {
  let re;
  try {
    re = new RegExp(pattern, flags + "d");
  } catch (e) {
    return { error: String(e.message), split: false, matches: [] };
  }
  const names = groupNames(pattern);
  const cpAt = codePointIndex(text);
  let split = false;
  const pos = (i) => {
    if (cpAt[i] < 0) split = true;
    return cpAt[i];
  };
  const found = [];
  if (flags.includes("g")) {
    for (const m of text.matchAll(re)) {
      found.push(m);
      if (found.length > 10000) break;
    }
  } else {
    const m = re.exec(text);
    if (m) found.push(m);
  }
  const matches = found.map((m) => ({
    match: m[0],
    index: pos(m.indices[0][0]),
    end: pos(m.indices[0][1]),
    groups: names.map((name, k) => {
      const ix = m.indices[k + 1];
      return {
        name,
        value: m[k + 1] === undefined ? null : m[k + 1],
        index: ix === undefined ? null : pos(ix[0]),
      };
    }),
  }));
  return { error: null, split, matches };
}

const out = [];
for (const g of corpus) {
  for (const pattern of g.patterns) {
    for (const flags of g.flags ?? [""]) {
      for (const text of g.texts) {
        out.push({ pattern, text, flags, deviation: g.deviation ?? "", ...run(pattern, text, flags) });
      }
    }
  }
}
process.stdout.write(JSON.stringify(out));
