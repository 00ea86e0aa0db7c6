// Command x402d is the pay-per-call utility service and x402 market index:
// one binary whose subcommands run the whole service in one process or each
// part on its own.
//
//	x402d serve      api + worker + scheduler in one process
//	x402d api        the HTTP api only (quotes, payments, results)
//	x402d worker     River workers only (operations, settlement, index jobs)
//	x402d migrate    apply the database migrations and exit
//	x402d devchain   the development chain alone (JSON-RPC on DEVCHAIN_RPC_ADDR)
//	x402d index crawl  one full pass of the index's sources, with progress
//	x402d archive    move whole old partitions of the event log to files, or restore one
//	x402d pay        quote, sign, pay and print one call (smoke tests, demos)
//	x402d load       paid load against a service on loopback
//
// Configuration comes from environment variables: Config, and
// docs/configuration.md generated from it. Only this package reads the
// environment; every other package takes its configuration explicitly.
//
// # Architecture
//
//	client ──POST /api/x402/<op>──▶ api (echo)
//	   no payment ──▶ 402 + PAYMENT-REQUIRED (precomputed per operation)
//	   payment ──▶ validate the body (400, no charge) ──▶ verify the payment (x402)
//	       └─ one Postgres transaction: append events + insert the River job
//	          (shared with the calls arriving together: store.GroupCommitter)
//	       └─ long-poll: wait for the call's final event (LISTEN/NOTIFY)
//	worker (River) ◀── job ── runs the operation (jobs/<op>) ── one durable
//	   transaction: the result, its event, and a settlement job scheduled
//	   SETTLE_GRACE ahead, which the event names ──▶ the same job
//	   settles (x402: a chain, a facilitator or the devchain, in batches of
//	   the settlements of the moment) ──▶ the outcome, the settlement job
//	   deleted (it runs only if the call is still settling then, or at once
//	   after a failed attempt)
//	api ◀── NOTIFY ── 200 + result + PAYMENT-RESPONSE (or 202 + a poll URL)
//
// Postgres is the only state. Every state change is an event of the
// append-only event log (a trigger refuses UPDATE, DELETE and TRUNCATE on it
// and on each of its time partitions), appended by store.Append in the
// transaction of the projection rows it changes; the events that end a call
// are announced with NOTIFY, and each api process keeps one listening
// connection that fans them out to waiting requests. Facts that commit in
// one transaction are one event: a paid call goes call.paid (the verified
// payment and its queued job) → job.succeeded (with the run's start, and its
// settlement's first submission; a run still going after 50 ms records
// job.started before it) → settlement.confirmed | settlement.failed, a failed
// one call.paid → job.started → job.failed. Streams written before call.paid
// read payment.verified → job.queued → job.started → job.succeeded →
// settlement.submitted → …, and every reader understands both. A confirmed
// settlement followed until final has its transaction's block recorded once
// for the transaction's calls (settlement.mined, on the network's stream
// chain/<network>, with their settlement.confirmed events); it is then
// final (settlement.final), or undone by a reorganisation
// and made again (settlement.resent) or lost (settlement.lost): see
// docs/operating.md.
//
// # Crash safety
//
// A call's admission and its run's start commit without waiting for the disk:
// a crash that loses them loses nothing charged, since the caller resends the
// same payment. Its result commits durably, in one transaction with its
// settlement job, which its job.succeeded names (that settlement's first
// submission); an attempt made again commits a settlement.submitted before
// its transfer. A process can die at any
// line: River rescues and retries the job (a job run again after its result
// was recorded finds the call past running and stops); a worker that dies
// before its settlement's outcome leaves it to the settlement job,
// SETTLE_GRACE after the result; a caller can always fetch the result again
// with its poll URL or by resending the same payment. A settlement attempted
// again after its transfer went out finds the authorization used and looks
// for that transfer on chain, in the blocks stamped inside the
// authorization's validity window from ten minutes before the payment was
// verified, and delivers the result if the transfer is there. While the
// database is away, requests are answered 503 unavailable with Retry-After.
//
// # Inside the binary
//
// main reads the Config (config.go) and runs a subcommand (the smaller
// ones in commands.go); serve (app.go) wires the parts: the database pool,
// the operations (operations.go), the payment step, the River client and
// its workers, the relayer and the follower of its settlements, the
// balance watchers, the api, and the metrics and profile servers, each on
// a listener of its own (sideServer). The payment step is built once from
// the settlement mode (SETTLEMENT), one value per mode (settlement.go,
// modeOf: the settings it needs, its batching by default, the builder of
// its EVM side), Solana added when configured (payments.go), and what the
// step opens and starts is stopped as one, the last first.
// Every goroutine this package starts (the embedded devchain's server, the
// Solana blockhash's renewal, the balance watchers, the side servers) runs
// in a part with the lifecycle of internal/startstop, which stopping the
// process waits for.
//
// Run any number of x402d api and x402d worker processes against one
// Postgres: the api is stateless, River distributes jobs among workers, and
// periodic jobs (the index crawl, liveness, retention) run on River's elected
// leader only. compose.yaml starts Postgres, the devchain, one api and two
// workers.
package main
