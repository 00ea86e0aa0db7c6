// Package ethrpc is a JSON-RPC client of an Ethereum chain over several
// endpoints, so that no slow, lagging, rate-limited or dead endpoint
// decides alone. It knows nothing of payments: x402/evm verifies and
// settles through it.
//
//   - Endpoints (endpoints.go) is a Backend over the endpoints of one
//     chain: each endpoint's head and lag, read every ProbeEvery between
//     Start and Stop; health (an endpoint failing FailAfter times running
//     is taken out and probed until it answers); 429 answers and their
//     Retry-After (internal/retryafter); a timeout per call; reads of the
//     latest state from endpoints not behind; receipts and block receipts
//     believed once two endpoints agree on them (agreed); transactions
//     sent to every endpoint. Its figures go to an Observer (for
//     /metrics), named by RedactURL, never by a URL that may carry a key.
//   - Dial and DialChains (dial.go) open one endpoint, or the Endpoints of
//     each network, with an HTTP transport that keeps its connections.
//   - Meter (meter.go) counts a chain's calls by purpose (WithPurpose) and
//     lets settlement's calls go before verification's; WithTimeout
//     (hook.go) bounds each call. Both wrap every method of Backend
//     through one hook.
//
// Endpoints takes an internal/clock Clock (Config.Clock) for its probes,
// limits and waits, so that its tests move time instead of sleeping.
package ethrpc
