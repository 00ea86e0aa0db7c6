// Package worker runs the service's River jobs: the paid operations, the
// settlement of their payments, and (through the index package) the crawl and
// liveness jobs. It builds the River client that the api uses to insert jobs
// and that worker processes use to work them.
//
// A paid call's job goes: the operation runs (job.started, then job.succeeded
// or job.failed); on success the result, its event and a settlement job
// scheduled Config.SettleGrace ahead are written in one transaction; the same
// job then settles the payment and appends settlement.confirmed or
// settlement.failed, deleting the settlement job in that transaction. The
// settlement job is the safety net: it runs only when its call is still
// settling after the grace (the worker died, the settlement was slower) or
// at once when the run's attempt failed, and River retries it with backoff.
// A failed operation is never settled. Jobs are completed by River's batched
// completer: each step is guarded by the call's state, so a job run again
// after a lost completion finds its work done and stops.
//
// The claims of batch-settlement channels are a periodic job per network
// (ClaimArgs, worked by a Claimer): each round follows the claim and
// settle transactions until final, reads the payers' WithdrawInitiated
// logs, claims the channels with charges unclaimed when ClaimPolicy says
// so (and a channel whose payer started a withdrawal at once), many
// channels a claimWithSignature, and settles the claimed funds to the
// receiver (claim.go). The Claimer also works the cooperative refunds'
// jobs (chanpay.RefundArgs, queued by the api with the refund's request):
// each signs its refund, sends it through the relayer, follows it (sent
// again when lost, recorded failed past a bound) and records its outcome,
// which frees the channel (refund.go).
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/metrics"
	"github.com/x402d/x402d/store"
	"github.com/x402d/x402d/x402"
)

// Defaults of Config.
const (
	// DefaultJobTimeout is Config.JobTimeout's default.
	DefaultJobTimeout = 2 * time.Minute
	// DefaultFetchPollInterval is Config.FetchPollInterval's default.
	DefaultFetchPollInterval = 200 * time.Millisecond
	// DefaultSettleGrace is Config.SettleGrace's default.
	DefaultSettleGrace = 15 * time.Second
)

// DefaultConcurrency returns the number of jobs each queue runs at once in
// a process unless Config.Concurrency says otherwise.
func DefaultConcurrency() map[string]int {
	return map[string]int{
		jobs.QueuePure:        2048,
		jobs.QueueModel:       8,
		jobs.QueueBrowser:     4,
		jobs.QueueSettlement:  2048,
		jobs.QueueIndex:       4,
		jobs.QueueMaintenance: 1,
	}
}

// Config configures the River client.
type Config struct {
	// Work makes the client work jobs. Without it the client only inserts
	// (an api process).
	Work bool
	// Concurrency is the number of jobs each queue runs at once in this
	// process; a queue absent or at zero takes DefaultConcurrency's. An
	// operation's job holds its place until its payment is settled: its
	// result's commit waits up to store.CommitLinger for other results,
	// and its settlement for a block (one to two block times) and the
	// outcome's commit. That wait holds no database connection, so the
	// pure queue's concurrency bounds paid throughput on a chain with
	// slow blocks: this many settle at most about half as many payments a
	// block time. The settlement queue runs the settlement jobs that take
	// up a settlement after a crash or a failed attempt.
	Concurrency map[string]int
	// FetchCooldown is the shortest time between two fetches of new jobs.
	// Defaults to 1 ms: new jobs are announced by NOTIFY, so a short cooldown
	// is what makes a paid call's round trip fast. A longer one makes
	// fewer, larger fetches, but River also drops the insert notifications
	// of a queue that come within the cooldown of the last, and a job then
	// waits for the next poll (docs/performance.md).
	FetchCooldown time.Duration
	// FetchPollInterval is how often the client looks for jobs when no
	// notification arrived. Defaults to DefaultFetchPollInterval.
	FetchPollInterval time.Duration
	// JobTimeout bounds one run of a job. Defaults to DefaultJobTimeout.
	JobTimeout time.Duration
	// RescueAfter is how long a job may stay running before it is taken
	// for dead (its worker was killed) and retried. River checks every 30 s.
	// Defaults to JobTimeout plus 30 s.
	RescueAfter time.Duration
	// ClientID is the River client's id. Defaults to NewClientID(), which
	// a Reclaimer keys the process's presence on.
	ClientID string
	// Running, when set, is kept with the jobs this process works, for its
	// Reclaimer (ReclaimConfig.Running).
	Running *Running
	// SettleGrace is how long a call's run has to settle its payment
	// before the settlement job recorded with its result takes the
	// settlement up (River makes scheduled jobs available within 5 s of
	// their time). It bounds how long a dead worker's settlements wait,
	// and should exceed the slowest settlement on a healthy chain: past
	// it a transfer may be sent twice (the second reverts, costing gas,
	// and the settlement finds the first). Defaults to DefaultSettleGrace.
	// A payment whose settler is an x402.SlowSettler has its ExtraWait on
	// top.
	SettleGrace time.Duration
	// ExpiryMargin is how long before its payment's validBefore a call's
	// run must end for its settlement to go out in time: an attempt that
	// would start later, or a retry that could not end earlier, fails the
	// call as payment_expired instead (not charged). Defaults to 10 s.
	ExpiryMargin time.Duration
	// PeriodicJobs are scheduled on the elected leader, with the
	// reconciliation of exhausted settlements (ReconcileArgs).
	PeriodicJobs []*river.PeriodicJob
	// ReconcileEvery is how often the calls whose settlement jobs are
	// exhausted are reconciled from the chain (ReconcileArgs). Defaults to
	// DefaultReconcileEvery.
	ReconcileEvery time.Duration
	// JobRetention is how long River keeps a completed job before its
	// maintenance removes it. Defaults to River's 24 hours.
	JobRetention time.Duration
	// LedgerForm1 writes the calls rows and the call events in ledger
	// form 1, as releases before migrations 016 and 017 did (a result
	// whole, a settlement's response as a JSON object, events as JSON), so
	// that their apis answer from them and show them while their processes
	// are replaced (store, Ledger forms; docs/operating.md, Upgrades).
	LedgerForm1 bool
	// Clock is the time of the runs (their payment's window, their
	// duration), of the settlement jobs' schedule and of the group
	// commits' lingers. Defaults to clock.Real().
	Clock clock.Clock
}

// WithDefaults returns a copy of c with its defaults applied.
func (c Config) WithDefaults() Config {
	conc := DefaultConcurrency()
	for q, n := range c.Concurrency {
		if n > 0 {
			conc[q] = n
		}
	}
	c.Concurrency = conc
	c.FetchCooldown = cmp.Or(c.FetchCooldown, time.Millisecond)
	c.FetchPollInterval = cmp.Or(c.FetchPollInterval, DefaultFetchPollInterval)
	c.JobTimeout = cmp.Or(c.JobTimeout, DefaultJobTimeout)
	c.RescueAfter = cmp.Or(c.RescueAfter, c.JobTimeout+30*time.Second)
	c.SettleGrace = cmp.Or(c.SettleGrace, DefaultSettleGrace)
	c.ExpiryMargin = cmp.Or(c.ExpiryMargin, 10*time.Second)
	c.ReconcileEvery = cmp.Or(c.ReconcileEvery, DefaultReconcileEvery)
	c.Clock = clock.Or(c.Clock)
	return c
}

// Deps are what the workers need to do their jobs.
type Deps struct {
	// Pool is the database.
	Pool *pgxpool.Pool
	// Settler settles verified payments. Required.
	Settler x402.Settler
	// Logger receives one line per job.
	Logger *slog.Logger
	// Ops binds each sold operation to the function that computes it.
	Ops []Op
	// Register adds further workers (the index's crawl and liveness jobs).
	Register []func(workers *river.Workers) error
	// Metrics counts jobs by kind and outcome, and settlements. Optional.
	Metrics *metrics.Metrics
}

// Client is the River client of this service.
type Client = river.Client[pgx.Tx]

// NewClient returns the River client for pool: with config.Work it works every
// queue; without it, it only inserts. Every job kind is registered in both
// cases, so inserting an unknown kind fails.
func NewClient(deps *Deps, config *Config) (*Client, error) {
	if deps.Settler == nil {
		return nil, errors.New("worker: Deps.Settler is required")
	}
	cfg := config.WithDefaults()
	workers := river.NewWorkers()
	commits := newCommits(deps.Pool, deps.Metrics, cfg.SettleGrace, deps.Settler, cfg.Clock)
	commits.expiry = cfg.ExpiryMargin
	commits.form1 = cfg.LedgerForm1
	for _, op := range deps.Ops {
		if err := op.register(workers, deps, commits); err != nil {
			return nil, fmt.Errorf("worker: register %s: %w", op.Name(), err)
		}
	}
	if err := river.AddWorkerSafely(workers, &settleWorker{deps: deps, commits: commits}); err != nil {
		return nil, fmt.Errorf("worker: register settle: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &reconcileWorker{deps: deps, commits: commits}); err != nil {
		return nil, fmt.Errorf("worker: register settle.reconcile: %w", err)
	}
	for _, register := range deps.Register {
		if err := register(workers); err != nil {
			return nil, fmt.Errorf("worker: register: %w", err)
		}
	}

	middleware := []rivertype.Middleware{deps.Metrics.JobMiddleware()}
	if cfg.Running != nil {
		middleware = append(middleware, &runningMiddleware{running: cfg.Running})
	}
	rc := &river.Config{
		ID:                   cmp.Or(cfg.ClientID, NewClientID()),
		FetchCooldown:        cfg.FetchCooldown,
		FetchPollInterval:    cfg.FetchPollInterval,
		JobTimeout:           cfg.JobTimeout,
		Logger:               deps.Logger,
		Middleware:           middleware,
		RescueStuckJobsAfter: cfg.RescueAfter,
		Workers:              workers,
		// River's default when zero.
		CompletedJobRetentionPeriod: cfg.JobRetention,
	}
	if cfg.Work {
		rc.Queues = map[string]river.QueueConfig{}
		for q, n := range cfg.Concurrency {
			rc.Queues[q] = river.QueueConfig{MaxWorkers: n}
		}
		rc.PeriodicJobs = append(slices.Clone(cfg.PeriodicJobs), river.NewPeriodicJob(river.PeriodicInterval(cfg.ReconcileEvery),
			func() (river.JobArgs, *river.InsertOpts) { return ReconcileArgs{}, nil }, nil))
	}
	client, err := river.NewClient(riverpgxv5.New(deps.Pool), rc)
	if err != nil {
		return nil, fmt.Errorf("worker: new river client: %w", err)
	}
	return client, nil
}

// commits are the shared transactions of the paid calls' jobs
// (store.GroupCommitter): runs and settlements ending at the same time
// (settlements mined in one block end together) write together.
type commits struct {
	// grace is how far ahead the settlement jobs are scheduled
	// (Config.SettleGrace), lengthened for slow settlements (graceOf).
	grace time.Duration
	// slow tells how much longer some settlements wait (nil: none).
	slow x402.SlowSettler
	// expiry is Config.ExpiryMargin: the runs of a call end at least this
	// long before its payment's validBefore.
	expiry time.Duration
	// form1 is Config.LedgerForm1.
	form1 bool
	// clock is Config.Clock.
	clock clock.Clock
	// results records operation results and their settlement jobs,
	// durably. (They once committed without waiting for the disk, on the
	// argument that a crash losing them would make the job run again; but
	// River completes the job apart, in its batched completer, which
	// retries after the database is back: a crash could lose the result
	// and keep the completion, and the call stayed queued for ever, its
	// result never delivered. Seen once in about twenty crash runs of
	// load:pg-restart.)
	results *store.GroupCommitter[*completed]
	// submissions records settlement.submitted durably before the
	// transfer of a settlement's later attempt (a job retried or rescued);
	// the first attempt's is recorded with the result. They come one by
	// one, so it lingers to group them.
	submissions *store.GroupCommitter[store.NewEvent]
	// outcomes records the settlements' outcomes durably, and deletes
	// their settlement jobs. Those mined in one block end together: no
	// linger.
	outcomes *store.GroupCommitter[settled]
}

// resultsLingerIdle ends a linger of the results' group commit once no
// result has come for that long. Results come in bursts, the jobs of one
// admission's group being fetched and run together, so a linger may end soon
// after a burst, shorter than store.LingerIdle, without writing fewer
// results a transaction (docs/performance.md, Tuning choices).
const resultsLingerIdle = 3 * time.Millisecond

// completed is an operation run that succeeded: the call whose settlement
// job is to be inserted and its job.succeeded. The transaction that records
// it sets settleJob to the id of that job (which its job.succeeded names)
// and payment to the call's payment, read there with the others of its
// group.
type completed struct {
	callID    string
	succeeded store.JobSucceeded
	settleJob int64
	payment   *x402.Payment
	// settled is the settlement made in the transaction that records the
	// result (an off-chain one: x402.OffChainSettler), nil when the run
	// settles afterwards.
	settled *x402.SettleResponse
}

func newCommits(pool *pgxpool.Pool, m *metrics.Metrics, grace time.Duration, settler x402.Settler, clk clock.Clock) *commits {
	namer, _ := settler.(x402.TransactionNamer)
	offChain, _ := settler.(x402.OffChainSettler)
	slow, _ := settler.(x402.SlowSettler)
	clk = clock.Or(clk)
	var c *commits
	c = &commits{
		grace: grace,
		slow:  slow,
		clock: clk,
		results: store.NewGroupCommitter(pool, &store.GroupCommitConfig{Linger: store.CommitLinger, LingerIdle: resultsLingerIdle, Observe: m.GroupCommitObserver("results"), Clock: clk}, func(ctx context.Context, tx pgx.Tx, runs []*completed) error {
			if err := readPayments(ctx, tx, runs, offChain != nil); err != nil {
				return err
			}
			// A settlement off chain (a voucher's charge) is made here,
			// with the result: no settlement job, no transaction of its
			// own. One that fails is left to the run, as the others.
			// The channel's record read with the payment is for that
			// settlement only: one made later (the run's, a deposit's)
			// reads the record as it is then.
			var ledger []store.NewEvent
			for _, run := range runs {
				run.settled = nil
				if offChain == nil || !offChain.OffChain(run.payment) {
					run.payment.Record = nil
					continue
				}
				resp, err := settler.Settle(x402.WithCall(ctx, run.callID), run.payment)
				run.payment.Record = nil
				if err != nil || !resp.Success {
					continue
				}
				recs, _ := resp.Ledger.([]store.NewEvent)
				ledger = append(ledger, recs...)
				run.settled = resp
			}
			// The other runs settle their payments themselves: their
			// settlement jobs wait their grace, as a safety net.
			now := clk.Now()
			params := make([]river.InsertManyParams, 0, len(runs))
			for _, run := range runs {
				if run.settled != nil {
					continue
				}
				opts := &river.InsertOpts{ScheduledAt: now.Add(graceOf(grace, slow, run.payment))}
				params = append(params, river.InsertManyParams{Args: SettleArgs{CallID: run.callID}, InsertOpts: opts})
			}
			settleJobs := map[string]int64{}
			if len(params) > 0 {
				// The workers' client, from the context of the job whose
				// run writes this transaction.
				client := river.ClientFromContext[pgx.Tx](ctx)
				inserted, err := client.InsertManyTx(ctx, tx, params)
				if err != nil {
					return fmt.Errorf("insert %d settle jobs: %w", len(params), err)
				}
				if settleJobs, err = settleJobIDs(inserted); err != nil {
					return err
				}
			}
			// Each settlement's first attempt, the run's, is recorded
			// here with the result, in its job.succeeded, with the
			// transaction it sends when that is named beforehand:
			// durable before any transfer, and no write of its own. A
			// later attempt records itself (settleWorker).
			// The results, then the settlements made with them: the
			// events of one type next to each other, which Append writes
			// with one statement.
			events := make([]store.NewEvent, 0, len(ledger)+2*len(runs))
			events = append(events, ledger...)
			var confirmed []store.NewEvent
			for _, run := range runs {
				run.settleJob = settleJobs[run.callID]
				succeeded := run.succeeded
				succeeded.SettleJobID = run.settleJob
				succeeded.Transaction = transactionOf(namer, run.payment)
				events = append(events, store.NewEvent{Stream: store.CallStream(run.callID), Type: store.EventJobSucceeded, Data: succeeded})
				if run.settled != nil {
					confirmed = append(confirmed, store.NewEvent{Stream: store.CallStream(run.callID), Type: store.EventSettlementConfirmed,
						Data: store.SettlementDone{Response: *run.settled, Form1: c.form1}})
				}
			}
			return store.Append(ctx, tx, append(events, confirmed...)...)
		}),
		submissions: store.NewGroupCommitter(pool, &store.GroupCommitConfig{Linger: store.CommitLinger, Observe: m.GroupCommitObserver("submission"), Clock: clk}, appendEvents),
		outcomes: store.NewGroupCommitter(pool, &store.GroupCommitConfig{Observe: m.GroupCommitObserver("settlement"), Clock: clk}, func(ctx context.Context, tx pgx.Tx, outcomes []settled) error {
			return writeOutcomes(ctx, tx, clk.Now(), outcomes)
		}),
	}
	return c
}

// graceOf returns how long the run that recorded a result has to settle
// payment before its settlement job takes it up: grace, and as much longer
// as slow (nil: none) says the payment's settlement waits beyond an
// ordinary one (a Solana block's finalization at
// SOLANA_COMMITMENT=finalized), so that the job does not start while the
// run's attempt still waits.
func graceOf(grace time.Duration, slow x402.SlowSettler, payment *x402.Payment) time.Duration {
	if slow == nil {
		return grace
	}
	return grace + slow.ExtraWait(payment)
}

// readPayments sets the payment of each of runs, read in one statement
// rather than one per run; with, when held (a settler settles some off
// chain), the record of the channel each holds (x402.Payment.Record),
// which a voucher's charge, made in tx, takes instead of reading it.
func readPayments(ctx context.Context, tx pgx.Tx, runs []*completed, held bool) error {
	ids := make([]string, len(runs))
	for i, run := range runs {
		ids[i] = run.callID
	}
	list := store.CallListToSettle
	if held {
		list = store.CallListToSettleHeld
	}
	calls, err := list(ctx, tx, ids)
	if err != nil {
		return err
	}
	byID := make(map[string]*x402.Payment, len(calls))
	for _, c := range calls {
		byID[c.ID] = &c.Payment
	}
	for _, run := range runs {
		if run.payment = byID[run.callID]; run.payment == nil {
			return fmt.Errorf("read payment of call %s: %w", run.callID, store.ErrNotFound)
		}
	}
	return nil
}

// transactionOf returns the transaction that settles payment, when namer
// (nil: none) names it before it is sent; "" otherwise. A payment it cannot
// name is one its settler cannot settle either: the settlement reports that
// itself.
func transactionOf(namer x402.TransactionNamer, payment *x402.Payment) string {
	if namer == nil {
		return ""
	}
	name, err := namer.Transaction(payment)
	if err != nil {
		return ""
	}
	return name
}

// settleJobIDs maps each call to the id of the settlement job inserted for
// it (River does not promise to answer in the order of its params).
func settleJobIDs(inserted []*rivertype.JobInsertResult) (map[string]int64, error) {
	ids := make(map[string]int64, len(inserted))
	for _, res := range inserted {
		var args SettleArgs
		if err := json.Unmarshal(res.Job.EncodedArgs, &args); err != nil {
			return nil, fmt.Errorf("settle job %d: args: %w", res.Job.ID, err)
		}
		ids[args.CallID] = res.Job.ID
	}
	return ids, nil
}

// appendEvents appends the events of a group commit.
func appendEvents(ctx context.Context, tx pgx.Tx, events []store.NewEvent) error {
	return store.Append(ctx, tx, events...)
}

// Stop stops client gracefully: running jobs may finish within timeout, then
// they are cancelled (River retries them later).
func Stop(client *Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := client.Stop(ctx); err != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		return errors.Join(err, client.StopAndCancel(cctx))
	}
	return nil
}
