const stripe = require("stripe")("@@SECRET:stripe@@"); // want: hardcoded-secret

async function charge(amount, source) {
  return stripe.charges.create({ amount, currency: "usd", source });
}
