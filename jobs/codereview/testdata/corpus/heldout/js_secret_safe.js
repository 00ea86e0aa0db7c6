const apiKey = process.env.API_KEY || "";
const docs = "Set STRIPE_KEY to sk_test_YOUR_KEY_HERE before running";
module.exports = { apiKey, docs };
