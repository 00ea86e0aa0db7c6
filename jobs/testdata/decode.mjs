// Reads 402 answers with the official x402 packages (@x402/core and
// @x402/extensions 2.27.0, installed in compat/node_modules by
// `go tool task npm`) and prints, as JSON, what they make of each.
//
// Usage: COMPAT_DIR=<repo>/compat node decode.mjs <base URL> <count>
// GETs <base URL>/<i> for i in [0, count): each answer is a 402 quote.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.COMPAT_DIR, "package.json"));
const { x402Client, x402HTTPClient } = require("@x402/core/client");
const { decodePaymentRequiredHeader } = require("@x402/core/http");
const { PaymentRequiredV2Schema } = require("@x402/core/schemas");
const { validateDiscoveryExtension, validateDiscoveryExtensionSpec } = require("@x402/extensions/bazaar");
const {
  PAYMENT_IDENTIFIER,
  declarePaymentIdentifierExtension,
  validatePaymentIdentifier,
  appendPaymentIdentifierToExtensions,
  extractAndValidatePaymentIdentifier,
} = require("@x402/extensions/payment-identifier");
const { isDeepStrictEqual } = require("node:util");

const [base, count] = process.argv.slice(2);
const http = new x402HTTPClient(new x402Client());
const out = [];
for (let i = 0; i < Number(count); i++) {
  const res = await fetch(`${base}/${i}`);
  const text = await res.text();
  const r = { status: res.status, errors: [] };
  let body;
  try {
    body = JSON.parse(text);
  } catch (e) {
    r.errors.push(`body is not JSON: ${e.message}`);
  }
  r.body = body ?? null;
  // The client's own reading of a 402: the header first, as a paying
  // client does.
  let required;
  try {
    required = http.getPaymentRequiredResponse((name) => res.headers.get(name), body);
  } catch (e) {
    r.errors.push(`getPaymentRequiredResponse: ${e.message}`);
  }
  // The header decoder on its own, on the raw value.
  try {
    decodePaymentRequiredHeader(res.headers.get("PAYMENT-REQUIRED") ?? "");
  } catch (e) {
    r.errors.push(`decodePaymentRequiredHeader: ${e.message}`);
  }
  if (required) {
    const parsed = PaymentRequiredV2Schema.safeParse(required);
    if (!parsed.success) {
      r.errors.push(`PaymentRequiredV2Schema: ${JSON.stringify(parsed.error.issues)}`);
    }
    const bazaar = required.extensions?.bazaar;
    if (!bazaar) {
      r.errors.push("no bazaar extension");
    } else {
      for (const [name, check] of [
        ["validateDiscoveryExtension", validateDiscoveryExtension],
        ["validateDiscoveryExtensionSpec", validateDiscoveryExtensionSpec],
      ]) {
        const v = check(bazaar);
        if (!v.valid) r.errors.push(`${name}: ${(v.errors ?? []).join("; ")}`);
      }
    }
  }
  if (required) {
    // The payment-identifier extension, as the official server helper
    // declares it (not required), and a client's id appended to it as the
    // official client helper appends one, read back by the official
    // server-side extraction.
    const declared = required.extensions?.[PAYMENT_IDENTIFIER];
    if (!declared) {
      r.errors.push("no payment-identifier extension");
    } else {
      if (!isDeepStrictEqual(declared, declarePaymentIdentifierExtension(false))) {
        r.errors.push(`payment-identifier: ${JSON.stringify(declared)} is not declarePaymentIdentifierExtension(false)`);
      }
      const v = validatePaymentIdentifier(declared);
      if (!v.valid) r.errors.push(`validatePaymentIdentifier: ${(v.errors ?? []).join("; ")}`);
      const extensions = structuredClone(required.extensions);
      appendPaymentIdentifierToExtensions(extensions, "pay_0123456789abcdef");
      const { id, validation } = extractAndValidatePaymentIdentifier({ extensions });
      if (!validation.valid || id !== "pay_0123456789abcdef") {
        r.errors.push(`payment-identifier: the id appended reads back as ${id}: ${(validation.errors ?? []).join("; ")}`);
      }
    }
  }
  r.required = required ?? null;
  r.wwwAuthenticate = res.headers.get("www-authenticate");
  out.push(r);
}
console.log(JSON.stringify(out));
