package ethrpc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402d/x402d/internal/clock"
	"github.com/x402d/x402d/internal/retryafter"
	"github.com/x402d/x402d/internal/startstop"
)

// Kinds of a call's outcome, the values Observer.ObserveCall gets (and the
// kind label of an endpoint's error figures).
const (
	// Answered is a call the node answered, a JSON-RPC error (a revert,
	// nonce too low, an unknown method) included.
	Answered = ""
	// RateLimited is an endpoint that answered 429 Too Many Requests.
	RateLimited = "429"
	// TimedOut is a call that got no answer within its timeout (or a 408
	// or 504 answer).
	TimedOut = "timeout"
	// TransportFailed is an endpoint that did not answer as a node:
	// connection refused or cut, a 5xx answer, an answer that is not
	// JSON-RPC.
	TransportFailed = "other"
)

// Observer receives the figures of one endpoint (for /metrics). Its
// methods are called concurrently.
type Observer interface {
	// ObserveCall records one call and how long it took; kind is Answered,
	// RateLimited, TimedOut or TransportFailed.
	ObserveCall(d time.Duration, kind string)
	// SetLag records how many blocks the endpoint's head is behind the
	// highest head of the network's endpoints.
	SetLag(blocks uint64)
	// SetIn records whether the endpoint takes calls (false: taken out
	// after failing FailAfter times running, and probed until it answers).
	SetIn(in bool)
}

// Config configures Endpoints.
type Config struct {
	// Network is the CAIP-2 network (eip155:<id>) the endpoints serve; each
	// must answer its chain id. Required.
	Network string
	// URLs are the JSON-RPC endpoints of the network (http, https, ws or
	// wss), several providers or several of one. Required.
	URLs []string
	// CallTimeout bounds each call to one endpoint; a call that tries
	// several endpoints takes as long as its ctx allows. Defaults to 5 s.
	CallTimeout time.Duration
	// MaxLag is how many blocks an endpoint's head may be behind the
	// highest head for reads of the latest state to go to it. Defaults to
	// 1 (0 is 1: endpoints of one chain in step are often a block apart).
	MaxLag uint64
	// FailAfter is how many failures running (connection refused or cut,
	// timeouts, 5xx) take an endpoint out. Defaults to 3.
	FailAfter int
	// ProbeEvery is how often each endpoint's head is read (a cheap
	// eth_blockNumber), and the first pause before an endpoint taken out
	// is probed; the pause doubles after each failed probe, up to
	// MaxProbeInterval. Defaults to 1 s.
	ProbeEvery time.Duration
	// MaxProbeInterval is the longest pause between two probes of an
	// endpoint taken out. Defaults to 30 s.
	MaxProbeInterval time.Duration
	// LimitBackoff is how long an endpoint that answered 429 without
	// Retry-After is left alone; it doubles with each such answer running,
	// up to MaxLimit. Defaults to 1 s.
	LimitBackoff time.Duration
	// MaxLimit is the longest an endpoint is left alone after a 429,
	// whatever its Retry-After says. Defaults to 10 minutes.
	MaxLimit time.Duration
	// Observe, when set, returns the observer of the endpoint named
	// endpoint (RedactURL's name) on network.
	Observe func(network, endpoint string) Observer
	// Logger receives the endpoints' logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Clock tells the time of probes, limits and waits. Defaults to
	// clock.Real(). A call's own timeout (CallTimeout) is the context's,
	// in real time.
	Clock clock.Clock
}

// Endpoints is a Backend over several JSON-RPC endpoints of one chain, so
// that no slow, lagging, limited or dead endpoint decides alone:
//
//   - Reads of the latest state go to an endpoint in, not limited, and not
//     behind the others by more than MaxLag blocks (round robin among
//     them); reads of a given block go first to one whose head has it. A
//     read an endpoint fails (no answer, 5xx) is tried on the next.
//   - BlockNumber answers the head of an endpoint that is not behind, so
//     the blocks up to it are there for reads. A receipt (TransactionReceipt,
//     BlockReceipts) or a header one endpoint does not have is looked for
//     on the others before NotFound is returned.
//   - NonceAt of the latest block is the highest answer of the endpoints at
//     the highest head; PendingNonceAt the highest answer of all those in.
//   - SendTransaction goes to every endpoint in; an endpoint not behind
//     that accepted it (or already has it) decides, and otherwise the
//     refusal of one not behind (its error text as the node gave it, for
//     the relayer's nonce and fee handling).
//   - An endpoint that answers 429 is not called until its Retry-After
//     (seconds or an HTTP date) has passed, or a back-off doubling from
//     LimitBackoff; the others take its calls, and a call waits (within its
//     ctx) when all are limited.
//   - An endpoint that fails FailAfter times running is taken out and
//     probed (eth_blockNumber) on a schedule; it rejoins when it answers.
//
// Each endpoint's head is read every ProbeEvery by a goroutine that Start
// starts and Stop ends. Logs and metrics name an endpoint by RedactURL's
// scheme://host[:port], never by its URL, which may carry an API key.
type Endpoints struct {
	// life runs the reading of heads between Start and Stop.
	life   startstop.Base
	cfg    Config
	clock  clock.Clock
	logger *slog.Logger
	eps    []*endpoint
	rr     atomic.Uint64

	// mu guards the state of every endpoint (endpoint.state).
	mu sync.Mutex

	closeOnce sync.Once
}

// endpoint is one JSON-RPC endpoint of Endpoints.
type endpoint struct {
	idx       int    // its place in Endpoints.eps
	name      string // RedactURL's name: the only one logged
	url       string // never logged: it may carry an API key
	rpc       *rpc.Client
	client    *ethclient.Client
	transport *http.Transport
	obs       Observer
	// retryAfter is the Retry-After of the endpoint's last 429 answer, as
	// unix nanoseconds (0: none), left by its transport for the call that
	// got the answer.
	retryAfter atomic.Int64

	state endpointState
}

// endpointState is what Endpoints knows of an endpoint; Endpoints.mu
// guards it.
type endpointState struct {
	// head is the endpoint's last answered head; lag how far it was behind
	// the highest head when the heads were last read together.
	head uint64
	lag  uint64
	// in is false while the endpoint is out: fails failures running took
	// it out; it is probed at nextProbe, probeGap after the previous probe.
	in        bool
	fails     int
	nextProbe time.Time
	probeGap  time.Duration
	// limitedUntil is when the endpoint may be called again after a 429;
	// limits counts the 429s running without Retry-After.
	limitedUntil time.Time
	limits       int
}

var _ Backend = (*Endpoints)(nil)

// New returns the endpoints of cfg. It opens their clients (an
// http endpoint is first reached by a call; a websocket one is dialed now);
// Start checks them and starts reading their heads.
func New(ctx context.Context, cfg *Config) (*Endpoints, error) {
	c := *cfg
	if _, err := ChainID(c.Network); err != nil {
		return nil, fmt.Errorf("rpc endpoints: %w", err)
	}
	if len(c.URLs) == 0 {
		return nil, fmt.Errorf("rpc endpoints of %s: none", c.Network)
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 5 * time.Second
	}
	c.MaxLag = max(c.MaxLag, 1)
	if c.FailAfter <= 0 {
		c.FailAfter = 3
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = time.Second
	}
	if c.MaxProbeInterval <= 0 {
		c.MaxProbeInterval = 30 * time.Second
	}
	if c.LimitBackoff <= 0 {
		c.LimitBackoff = time.Second
	}
	if c.MaxLimit <= 0 {
		c.MaxLimit = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Clock = clock.Or(c.Clock)
	names, err := redactURLs(c.URLs)
	if err != nil {
		return nil, fmt.Errorf("rpc endpoints of %s: %w", c.Network, err)
	}
	e := &Endpoints{cfg: c, clock: c.Clock, logger: c.Logger.With("network", c.Network)}
	for i, raw := range c.URLs {
		ep := &endpoint{idx: i, name: names[i], url: raw}
		ep.state.in = true
		ep.transport = newTransport()
		rc, err := rpc.DialOptions(ctx, raw, rpc.WithHTTPClient(&http.Client{Transport: &limitTransport{base: ep.transport, ep: ep, clock: c.Clock}}))
		if err != nil {
			e.closeClients()
			return nil, fmt.Errorf("rpc endpoint %s of %s: %w", ep.name, c.Network, ep.scrub(err))
		}
		ep.rpc, ep.client = rc, ethclient.NewClient(rc)
		if c.Observe != nil {
			ep.obs = c.Observe(c.Network, ep.name)
		}
		if ep.obs == nil {
			ep.obs = nopObserver{}
		}
		ep.obs.SetIn(true)
		ep.obs.SetLag(0)
		e.eps = append(e.eps, ep)
	}
	return e, nil
}

// Status is what Endpoints knows of one endpoint.
type Status struct {
	// Name is RedactURL's name of the endpoint.
	Name string
	// In is false while the endpoint is out (probed until it answers).
	In bool
	// Head is the endpoint's last answered head, Lag how many blocks it
	// was behind the highest when the heads were last read together.
	Head, Lag uint64
	// LimitedUntil is when the endpoint may be called again after a 429
	// (zero or past: now).
	LimitedUntil time.Time
}

// Status returns the state of each endpoint, in configured order.
func (e *Endpoints) Status() []Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Status, len(e.eps))
	for i, ep := range e.eps {
		s := ep.state
		out[i] = Status{Name: ep.name, In: s.in, Head: s.head, Lag: s.lag, LimitedUntil: s.limitedUntil}
	}
	return out
}

// Start checks that every endpoint that answers serves the network's chain
// and reads their heads, then reads them every ProbeEvery until Stop. An
// endpoint that does not answer starts out, and is probed; none answering,
// or one serving another chain, is an error. Starting started Endpoints
// does nothing.
func (e *Endpoints) Start(ctx context.Context) error {
	want, _ := ChainID(e.cfg.Network)
	type answer struct {
		id   *big.Int
		head uint64
		err  error
	}
	answers := make([]answer, len(e.eps))
	var wg sync.WaitGroup
	for i, ep := range e.eps {
		wg.Go(func() {
			a := &answers[i]
			a.err = e.call(ctx, ep, func(ctx context.Context) error {
				var err error
				a.id, err = ep.client.ChainID(ctx)
				return err
			})
			if a.err == nil {
				a.err = e.call(ctx, ep, func(ctx context.Context) error {
					var err error
					a.head, err = ep.client.BlockNumber(ctx)
					return err
				})
			}
		})
	}
	wg.Wait()
	var answered int
	var firstErr error
	for i, ep := range e.eps {
		a := answers[i]
		if a.err != nil {
			firstErr = cmp.Or(firstErr, a.err)
			e.mu.Lock()
			e.takeOut(ep, a.err)
			e.mu.Unlock()
			continue
		}
		if a.id.Cmp(want) != 0 {
			return fmt.Errorf("rpc endpoint %s of %s serves chain %s", ep.name, e.cfg.Network, a.id)
		}
		answered++
		e.mu.Lock()
		ep.state.head = a.head
		e.mu.Unlock()
	}
	if answered == 0 {
		return fmt.Errorf("rpc endpoints of %s: none answers: %w", e.cfg.Network, firstErr)
	}
	e.mu.Lock()
	e.updateLags()
	e.mu.Unlock()
	// The reading of heads outlives ctx, which may be a dial's: it runs
	// until Stop.
	e.life.Start(context.WithoutCancel(ctx), e.probe)
	return nil
}

// Stop ends the reading of heads, waits for it, and closes the clients.
// It may be called more than once, and without Start.
func (e *Endpoints) Stop() {
	e.life.Stop()
	e.closeClients()
}

// closeClients closes the endpoints' clients, once.
func (e *Endpoints) closeClients() {
	e.closeOnce.Do(e.closeAll)
}

func (e *Endpoints) closeAll() {
	for _, ep := range e.eps {
		if ep.rpc != nil {
			ep.rpc.Close()
		}
		if ep.transport != nil {
			ep.transport.CloseIdleConnections()
		}
	}
}

// probe reads the heads every ProbeEvery until ctx ends.
func (e *Endpoints) probe(ctx context.Context) {
	t := e.clock.NewTicker(e.cfg.ProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		e.readHeads(ctx)
	}
}

// readHeads reads the head of every endpoint not limited (of one taken out,
// when its probe is due), all at once, and sets their lags from the
// answers.
func (e *Endpoints) readHeads(ctx context.Context) {
	now := e.clock.Now()
	var due []*endpoint
	e.mu.Lock()
	for _, ep := range e.eps {
		s := &ep.state
		if now.Before(s.limitedUntil) || !s.in && now.Before(s.nextProbe) {
			continue
		}
		due = append(due, ep)
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, ep := range due {
		wg.Go(func() {
			var head uint64
			err := e.call(ctx, ep, func(ctx context.Context) error {
				var err error
				head, err = ep.client.BlockNumber(ctx)
				return err
			})
			e.mu.Lock()
			defer e.mu.Unlock()
			if err != nil {
				if !ep.state.in {
					// call counted the failure; the next probe waits longer.
					ep.state.probeGap = min(2*ep.state.probeGap, e.cfg.MaxProbeInterval)
					ep.state.nextProbe = e.clock.Now().Add(ep.state.probeGap)
				}
				return
			}
			ep.state.head = head
		})
	}
	wg.Wait()
	e.mu.Lock()
	e.updateLags()
	e.mu.Unlock()
}

// updateLags sets each endpoint's lag behind the highest head of those in;
// the caller holds mu.
func (e *Endpoints) updateLags() {
	var top uint64
	for _, ep := range e.eps {
		if ep.state.in {
			top = max(top, ep.state.head)
		}
	}
	for _, ep := range e.eps {
		s := &ep.state
		lag := uint64(0)
		if s.head < top {
			lag = top - s.head
		}
		if s.in && (lag > e.cfg.MaxLag) != (s.lag > e.cfg.MaxLag) {
			if lag > e.cfg.MaxLag {
				e.logger.Warn("rpc endpoint behind the others: reads go to the others", "endpoint", ep.name, "head", s.head, "blocks_behind", lag)
			} else {
				e.logger.Info("rpc endpoint caught up", "endpoint", ep.name, "head", s.head)
			}
		}
		s.lag = lag
		ep.obs.SetLag(lag)
	}
}

// takeOut takes ep out after err; the caller holds mu.
func (e *Endpoints) takeOut(ep *endpoint, err error) {
	s := &ep.state
	if s.in {
		e.logger.Warn("rpc endpoint taken out: the others take its calls until it answers a probe", "endpoint", ep.name, "failures", s.fails, "error", err)
	}
	s.in = false
	s.probeGap = e.cfg.ProbeEvery
	s.nextProbe = e.clock.Now().Add(s.probeGap)
	ep.obs.SetIn(false)
}

// call calls f on ep within CallTimeout, and records the outcome: an
// answer, a 429 (ep is left alone for a while), or a failure (counted; ep
// is taken out after FailAfter running). The error returned names ep and
// never carries its URL.
func (e *Endpoints) call(ctx context.Context, ep *endpoint, f func(ctx context.Context) error) error {
	callCtx, cancel := context.WithTimeoutCause(ctx, e.cfg.CallTimeout, errCallTimeout)
	start := e.clock.Now()
	err := f(callCtx)
	timedOut := errors.Is(context.Cause(callCtx), errCallTimeout)
	cancel()
	d := e.clock.Now().Sub(start)
	kind := Answered
	switch {
	case err == nil || errors.Is(err, ethereum.NotFound):
	case ctx.Err() != nil && !timedOut:
		// The caller gave up: no fault of the endpoint's.
		ep.obs.ObserveCall(d, Answered)
		return ep.wrap(err)
	case timedOut:
		kind = TimedOut
	default:
		kind = kindOf(err)
	}
	ep.obs.ObserveCall(d, kind)
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &ep.state
	switch kind {
	case Answered:
		s.fails, s.limits = 0, 0
		if !s.in {
			s.in = true
			e.logger.Info("rpc endpoint back: it answered", "endpoint", ep.name)
			ep.obs.SetIn(true)
		}
		return err
	case RateLimited:
		now := e.clock.Now()
		var until time.Time
		if at := ep.retryAfter.Swap(0); at > 0 {
			until = minTime(time.Unix(0, at), now.Add(e.cfg.MaxLimit))
		} else {
			s.limits++
			until = now.Add(min(e.cfg.LimitBackoff<<min(s.limits-1, 20), e.cfg.MaxLimit))
		}
		// Retry-After: 0 is no licence to spin on the endpoint.
		until = maxTime(until, now.Add(minLimit))
		if until.After(s.limitedUntil) {
			if !now.Before(s.limitedUntil) {
				e.logger.Info("rpc endpoint limited (429): the others take its calls", "endpoint", ep.name, "for", until.Sub(now).Round(time.Millisecond).String())
			}
			s.limitedUntil = until
		}
		return ep.wrap(err)
	}
	s.fails++
	if s.in && s.fails >= e.cfg.FailAfter {
		e.takeOut(ep, ep.wrap(err))
	} else if s.in {
		e.logger.Warn("rpc endpoint failed", "endpoint", ep.name, "kind", kind, "error", ep.wrap(err))
	}
	return ep.wrap(err)
}

// minLimit is the shortest time an endpoint that answered 429 is left
// alone.
const minLimit = 50 * time.Millisecond

// errCallTimeout is a call to one endpoint past CallTimeout.
var errCallTimeout = errors.New("rpc call timeout")

// kindOf classifies a call's error: RateLimited for a 429, TimedOut for a
// timeout, Answered for an answer of the node (a JSON-RPC error: a revert,
// nonce too low, an unknown method), TransportFailed for anything else
// (the endpoint did not answer as a node).
func kindOf(err error) string {
	var herr rpc.HTTPError
	if errors.As(err, &herr) {
		switch {
		case herr.StatusCode == http.StatusTooManyRequests:
			return RateLimited
		case herr.StatusCode == http.StatusRequestTimeout || herr.StatusCode == http.StatusGatewayTimeout:
			return TimedOut
		}
		return TransportFailed
	}
	var rerr rpc.Error
	if errors.As(err, &rerr) {
		return Answered
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return TimedOut
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) && ue.Timeout() {
		return TimedOut
	}
	return TransportFailed
}

// wrap names ep in err, with its URL replaced by its name (a transport
// error quotes the URL it posted to, API key and all).
func (ep *endpoint) wrap(err error) error {
	if err == nil || errors.Is(err, ethereum.NotFound) {
		return err
	}
	return fmt.Errorf("rpc %s: %w", ep.name, ep.scrub(err))
}

// scrub returns err with ep's URL replaced by its name in its text.
func (ep *endpoint) scrub(err error) error {
	if ep.url == "" || !strings.Contains(err.Error(), ep.url) {
		return err
	}
	return &scrubbedError{msg: strings.ReplaceAll(err.Error(), ep.url, ep.name), err: err}
}

// scrubbedError is an error whose text had an endpoint's URL replaced.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// pick returns the endpoint a call goes to next, among those not tried:
// for a read of the latest state (block 0), one in and not behind, then one
// in; for a read of a given block, one in whose head has it, then one in
// not behind, then one in; endpoints taken out only when none is in; among
// equals, the next in turn. An endpoint limited (429) is passed over, or
// waited for when it ranks better than every other and is free within
// CallTimeout. It returns -1 and how long to wait, or -1 and 0 when no
// endpoint is left.
func (e *Endpoints) pick(tried []bool, block uint64) (int, time.Duration) {
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	anyIn := false
	for _, ep := range e.eps {
		anyIn = anyIn || ep.state.in
	}
	const none = 4
	best, bestRank := -1, none
	var wait time.Duration
	waitRank := none
	n := len(e.eps)
	start := int(e.rr.Add(1) % uint64(n))
	for k := range n {
		i := (start + k) % n
		s := &e.eps[i].state
		if tried[i] || !s.in && anyIn {
			continue
		}
		rank := e.rank(s, block)
		if now.Before(s.limitedUntil) {
			w := s.limitedUntil.Sub(now)
			if rank < waitRank || rank == waitRank && w < wait {
				wait, waitRank = w, rank
			}
			continue
		}
		if rank < bestRank {
			best, bestRank = i, rank
		}
	}
	if best >= 0 && (waitRank >= bestRank || wait > e.cfg.CallTimeout) {
		return best, 0
	}
	return -1, wait
}

// rank orders the endpoints for a read of block (0: the latest state),
// lower first; the caller holds mu.
func (e *Endpoints) rank(s *endpointState, block uint64) int {
	switch {
	case !s.in:
		return 3
	case block != 0 && s.head >= block:
		return 0
	case e.notBehind(s) && block == 0:
		return 0
	case e.notBehind(s):
		return 1
	}
	return 2
}

// available returns the endpoints in and not limited that match keep.
func (e *Endpoints) available(keep func(s *endpointState) bool) []*endpoint {
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*endpoint
	for _, ep := range e.eps {
		s := &ep.state
		if s.in && !now.Before(s.limitedUntil) && (keep == nil || keep(s)) {
			out = append(out, ep)
		}
	}
	return out
}

// notBehind reports whether s is not behind the others by more than
// MaxLag; the caller holds mu.
func (e *Endpoints) notBehind(s *endpointState) bool { return s.lag <= e.cfg.MaxLag }

// errNoEndpoint is a call that found no endpoint to go to.
var errNoEndpoint = errors.New("no endpoint answered")

// do runs f on one endpoint after another (pick's order) until one answers:
// a failure or a 429 moves on to the next endpoint, and when all left are
// limited it waits for the first to be free again, within ctx. The error
// of the last endpoint tried is returned when none answered.
func (e *Endpoints) do(ctx context.Context, block uint64, f func(ctx context.Context, ep *endpoint) error) error {
	return e.doExcept(ctx, block, make([]bool, len(e.eps)), f)
}

// doExcept is do on the endpoints not tried yet.
func (e *Endpoints) doExcept(ctx context.Context, block uint64, tried []bool, f func(ctx context.Context, ep *endpoint) error) error {
	var last error
	for {
		i, wait := e.pick(tried, block)
		if i < 0 && wait == 0 {
			if last == nil {
				last = errNoEndpoint
			}
			return fmt.Errorf("rpc endpoints of %s: %w", e.cfg.Network, last)
		}
		if i < 0 {
			if err := clock.Sleep(ctx, e.clock, wait); err != nil {
				return fmt.Errorf("rpc endpoints of %s: waiting for a limited (429) endpoint: %w", e.cfg.Network, context.Cause(ctx))
			}
			continue
		}
		ep := e.eps[i]
		err := e.call(ctx, ep, func(ctx context.Context) error { return f(ctx, ep) })
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		switch kindOf(err) {
		case Answered:
			return err
		case RateLimited:
			// Left alone for a while: pick passes it over until then.
		default:
			tried[i] = true
		}
		last = err
	}
}

// read runs f on one endpoint (do) and returns its answer.
func read[T any](ctx context.Context, e *Endpoints, block uint64, f func(ctx context.Context, c *ethclient.Client) (T, error)) (T, error) {
	var out T
	err := e.do(ctx, block, func(ctx context.Context, ep *endpoint) error {
		var err error
		out, err = f(ctx, ep.client)
		return err
	})
	return out, err
}

// fanout runs f on every endpoint of eps at once and returns the answers,
// in order, with errs[i] the error of eps[i].
func fanout[T any](ctx context.Context, e *Endpoints, eps []*endpoint, f func(ctx context.Context, c *ethclient.Client) (T, error)) ([]T, []error) {
	out, errs := make([]T, len(eps)), make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			errs[i] = e.call(ctx, ep, func(ctx context.Context) error {
				var err error
				out[i], err = f(ctx, ep.client)
				return err
			})
		})
	}
	wg.Wait()
	return out, errs
}

// blockOf returns the number of a block argument (0 for nil or a named
// block such as latest).
func blockOf(n *big.Int) uint64 {
	if n == nil || n.Sign() <= 0 || !n.IsUint64() {
		return 0
	}
	return n.Uint64()
}

// sawHead records a head ep answered.
func (e *Endpoints) sawHead(ep *endpoint, head uint64) {
	e.mu.Lock()
	ep.state.head = head
	e.mu.Unlock()
}

// ChainID returns the chain id.
func (e *Endpoints) ChainID(ctx context.Context) (*big.Int, error) {
	return read(ctx, e, 0, func(ctx context.Context, c *ethclient.Client) (*big.Int, error) { return c.ChainID(ctx) })
}

// CallContract runs msg (eth_call) at block (nil: the latest).
func (e *Endpoints) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	return read(ctx, e, blockOf(block), func(ctx context.Context, c *ethclient.Client) ([]byte, error) {
		return c.CallContract(ctx, msg, block)
	})
}

// CodeAt returns the code of account at block (nil: the latest).
func (e *Endpoints) CodeAt(ctx context.Context, account common.Address, block *big.Int) ([]byte, error) {
	return read(ctx, e, blockOf(block), func(ctx context.Context, c *ethclient.Client) ([]byte, error) {
		return c.CodeAt(ctx, account, block)
	})
}

// BlockNumber returns the head of the chain as two endpoints have it: with
// several endpoints in, every one is asked and the second highest answer is
// the head (a head only one endpoint reports, a lie or a block the others
// have not seen yet, is not believed: the blocks up to the head returned
// are on two endpoints, and so are the receipts the relayer scans them for
// and the depth the finality policy counts); with one endpoint in, its
// head, from an endpoint not behind the others.
func (e *Endpoints) BlockNumber(ctx context.Context) (uint64, error) {
	if eps := e.available(nil); len(eps) >= 2 {
		heads, errs := fanout(ctx, e, eps, func(ctx context.Context, c *ethclient.Client) (uint64, error) { return c.BlockNumber(ctx) })
		var answered []uint64
		for i, err := range errs {
			if err == nil {
				e.sawHead(eps[i], heads[i])
				answered = append(answered, heads[i])
			}
		}
		if len(answered) >= 2 {
			slices.Sort(answered)
			return answered[len(answered)-2], nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
	var head uint64
	err := e.do(ctx, 0, func(ctx context.Context, ep *endpoint) error {
		var err error
		if head, err = ep.client.BlockNumber(ctx); err == nil {
			e.sawHead(ep, head)
		}
		return err
	})
	return head, err
}

// EstimateGas estimates the gas of msg.
func (e *Endpoints) EstimateGas(ctx context.Context, msg ethereum.CallMsg) (uint64, error) {
	return read(ctx, e, 0, func(ctx context.Context, c *ethclient.Client) (uint64, error) { return c.EstimateGas(ctx, msg) })
}

// FilterLogs returns the logs of q, from an endpoint whose head has q's
// last block: a node behind it would answer the logs it has, silently
// fewer.
func (e *Endpoints) FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	block := blockOf(q.ToBlock)
	if q.BlockHash != nil {
		block = 0
	}
	return read(ctx, e, block, func(ctx context.Context, c *ethclient.Client) ([]types.Log, error) { return c.FilterLogs(ctx, q) })
}

// SubscribeFilterLogs is not offered: the relayer and the verifier poll.
func (e *Endpoints) SubscribeFilterLogs(context.Context, ethereum.FilterQuery, chan<- types.Log) (ethereum.Subscription, error) {
	return nil, errors.New("rpc endpoints: log subscriptions are not supported")
}

// HeaderByNumber returns the header of block number (nil: the head, from an
// endpoint not behind), looked for on every endpoint before NotFound.
func (e *Endpoints) HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error) {
	var h *types.Header
	err := e.do(ctx, blockOf(number), func(ctx context.Context, ep *endpoint) error {
		var err error
		if h, err = ep.client.HeaderByNumber(ctx, number); err == nil && number == nil {
			e.sawHead(ep, h.Number.Uint64())
		}
		return err
	})
	if errors.Is(err, ethereum.NotFound) && number != nil {
		h, err = elsewhere(ctx, e, "header", number.String(), func(ctx context.Context, c *ethclient.Client) (*types.Header, error) {
			return c.HeaderByNumber(ctx, number)
		})
	}
	return h, err
}

// elsewhere asks every endpoint in for what one endpoint did not find, and
// returns the first answer found, or NotFound.
func elsewhere[T any](ctx context.Context, e *Endpoints, what, which string, f func(ctx context.Context, c *ethclient.Client) (T, error)) (T, error) {
	var zero T
	eps := e.available(nil)
	if len(eps) < 2 {
		return zero, ethereum.NotFound
	}
	out, errs := fanout(ctx, e, eps, f)
	var firstErr error
	for i, err := range errs {
		if err == nil {
			e.logger.Debug("rpc endpoints disagree: found on one and not another", "what", what, "which", which, "endpoint", eps[i].name)
			return out[i], nil
		}
		if !errors.Is(err, ethereum.NotFound) {
			firstErr = cmp.Or(firstErr, err)
		}
	}
	if firstErr != nil && IsMethodNotFound(firstErr) {
		return zero, firstErr
	}
	return zero, ethereum.NotFound
}

// PendingNonceAt returns the highest pending nonce of account among the
// endpoints in: the first nonce that none of them lacks.
func (e *Endpoints) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	return e.highest(ctx, nil, func(ctx context.Context, c *ethclient.Client) (uint64, error) {
		return c.PendingNonceAt(ctx, account)
	})
}

// NonceAt returns the nonce of account at block; of the latest block, the
// highest answer of the endpoints at the highest head (never one from an
// endpoint behind).
func (e *Endpoints) NonceAt(ctx context.Context, account common.Address, block *big.Int) (uint64, error) {
	f := func(ctx context.Context, c *ethclient.Client) (uint64, error) { return c.NonceAt(ctx, account, block) }
	if block != nil {
		return read(ctx, e, blockOf(block), f)
	}
	return e.highest(ctx, e.notBehind, f)
}

// highest returns the highest answer of f among the endpoints available
// that match keep (nil: all), asked at once; when none answers, it asks as
// do does (waiting for a limited one).
func (e *Endpoints) highest(ctx context.Context, keep func(*endpointState) bool, f func(ctx context.Context, c *ethclient.Client) (uint64, error)) (uint64, error) {
	eps := e.available(keep)
	if len(eps) > 0 {
		out, errs := fanout(ctx, e, eps, f)
		var best uint64
		answered := false
		var refused error
		for i, err := range errs {
			if err == nil {
				if answered && out[i] != best {
					e.logger.Debug("rpc endpoints disagree on a nonce: the highest is taken", "endpoint", eps[i].name, "nonce", out[i], "other", best)
				}
				best, answered = max(best, out[i]), true
			} else if kindOf(err) == Answered {
				refused = cmp.Or(refused, err)
			}
		}
		if answered {
			return best, nil
		}
		if refused != nil {
			return 0, refused
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
	return read(ctx, e, 0, f)
}

// BalanceAt returns the native balance of account at block (nil: the
// latest).
func (e *Endpoints) BalanceAt(ctx context.Context, account common.Address, block *big.Int) (*big.Int, error) {
	return read(ctx, e, blockOf(block), func(ctx context.Context, c *ethclient.Client) (*big.Int, error) {
		return c.BalanceAt(ctx, account, block)
	})
}

// SuggestGasTipCap returns a node's suggested priority fee.
func (e *Endpoints) SuggestGasTipCap(ctx context.Context) (*big.Int, error) {
	return read(ctx, e, 0, func(ctx context.Context, c *ethclient.Client) (*big.Int, error) { return c.SuggestGasTipCap(ctx) })
}

// TransactionReceipt returns the receipt of hash once two endpoints report
// it alike (the same block and status; agreed): a receipt only one of
// several endpoints reports is not believed, and is NotFound until another
// has it. With one endpoint in, its answer, looked for on the others before
// NotFound.
func (e *Endpoints) TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error) {
	f := func(ctx context.Context, c *ethclient.Client) (*types.Receipt, error) {
		return transactionReceipt(ctx, c, hash)
	}
	if r, ok, err := agreed(ctx, e, nil, "receipt", hash.Hex(), f, receiptKey); ok {
		return r, err
	}
	r, err := read(ctx, e, 0, f)
	if errors.Is(err, ethereum.NotFound) || err != nil && IsIndexing(err) {
		if found, ferr := elsewhere(ctx, e, "receipt", hash.Hex(), f); ferr == nil {
			return found, nil
		}
	}
	return r, err
}

// BlockReceipts returns the receipts of a block once two endpoints whose
// heads have it answer them alike (agreed); with fewer such endpoints, from
// an endpoint whose head has it, looked for on every endpoint before
// NotFound (or before the method is reported missing).
func (e *Endpoints) BlockReceipts(ctx context.Context, block rpc.BlockNumberOrHash) ([]*types.Receipt, error) {
	var number uint64
	if n, ok := block.Number(); ok && n >= 0 {
		number = uint64(n)
	}
	f := func(ctx context.Context, c *ethclient.Client) ([]*types.Receipt, error) {
		return blockReceipts(ctx, c, block)
	}
	var keep func(s *endpointState) bool
	if number > 0 {
		keep = func(s *endpointState) bool { return s.head >= number }
	}
	if r, ok, err := agreed(ctx, e, keep, "block receipts", block.String(), f, blockReceiptsKey); ok {
		return r, err
	}
	r, err := read(ctx, e, number, f)
	if errors.Is(err, ethereum.NotFound) || err != nil && IsMethodNotFound(err) {
		found, ferr := elsewhere(ctx, e, "block receipts", block.String(), f)
		if ferr == nil {
			return found, nil
		}
		if errors.Is(ferr, ethereum.NotFound) {
			return nil, ferr
		}
	}
	return r, err
}

// agreed asks endpoints available that match keep (nil: all) for f, when
// there are two or more, and returns (ok true) the answer two of them gave
// alike (by key), or NotFound when two or more answered and no two alike:
// an answer only one endpoint gives is not believed. Two endpoints (in
// turn) are asked first, the others only when those two did not agree, so
// that agreement costs a provider's limit two calls. It returns ok false,
// for the caller to ask as with one endpoint, when fewer than two
// endpoints are available or fewer than two answered (found or not found);
// a node's error other than NotFound (an unknown method) when that is all
// they answered.
func agreed[T any](ctx context.Context, e *Endpoints, keep func(s *endpointState) bool, what, which string,
	f func(ctx context.Context, c *ethclient.Client) (T, error), key func(T) string) (T, bool, error) {
	var zero T
	eps := e.available(keep)
	if len(eps) < 2 {
		return zero, false, nil
	}
	first := int(e.rr.Add(1) % uint64(len(eps)))
	eps = slices.Concat(eps[first:], eps[:first])
	votes := map[string]int{}
	answers := map[string]T{}
	answered := 0
	var foundOn string
	var nodeErr error
	ask := func(eps []*endpoint) (T, bool) {
		out, errs := fanout(ctx, e, eps, f)
		for i, err := range errs {
			switch {
			case err == nil:
				k := key(out[i])
				if _, ok := answers[k]; !ok {
					answers[k] = out[i]
				}
				votes[k]++
				answered++
				foundOn = eps[i].name
			case errors.Is(err, ethereum.NotFound) || IsIndexing(err):
				answered++
			case kindOf(err) == Answered:
				nodeErr = cmp.Or(nodeErr, err)
			}
		}
		best := ""
		for k, n := range votes {
			if n >= 2 && (best == "" || n > votes[best]) {
				best = k
			}
		}
		return answers[best], best != ""
	}
	if v, ok := ask(eps[:2]); ok {
		return v, true, nil
	}
	if len(votes) > 0 || answered < 2 {
		if v, ok := ask(eps[2:]); ok {
			return v, true, nil
		}
	}
	switch {
	case answered >= 2 && len(votes) > 0:
		e.logger.Debug("rpc endpoints disagree: an answer only one endpoint gives is not believed", "what", what, "which", which, "endpoint", foundOn)
		return zero, true, ethereum.NotFound
	case answered >= 2:
		return zero, true, ethereum.NotFound
	case answered == 0 && nodeErr != nil:
		return zero, true, nodeErr
	}
	return zero, false, nil
}

// receiptKey is what two endpoints must agree on in a receipt.
func receiptKey(r *types.Receipt) string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf("%s %s %d", r.TxHash.Hex(), r.BlockHash.Hex(), r.Status)
}

// blockReceiptsKey is what two endpoints must agree on in a block's
// receipts.
func blockReceiptsKey(rs []*types.Receipt) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(receiptKey(r))
		b.WriteByte(';')
	}
	return b.String()
}

// SendTransaction sends tx to every endpoint in at once. An endpoint not
// behind that accepted it, or said it already has it, decides (nil, or
// its "already known" when none accepted it); then a refusal from one not
// behind (nonce too low, underpriced: the node's text); then the answers
// of endpoints behind, in the same order; then a failure (no answer). When
// every endpoint is limited, it waits for one.
func (e *Endpoints) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	eps := e.available(nil)
	if len(eps) == 0 {
		return e.do(ctx, 0, func(ctx context.Context, ep *endpoint) error { return ep.client.SendTransaction(ctx, tx) })
	}
	_, errs := fanout(ctx, e, eps, func(ctx context.Context, c *ethclient.Client) (struct{}, error) {
		return struct{}{}, c.SendTransaction(ctx, tx)
	})
	e.mu.Lock()
	behind := make([]bool, len(eps))
	for i, ep := range eps {
		behind[i] = !e.notBehind(&ep.state)
	}
	e.mu.Unlock()
	best, bestRank, accepted := -1, 7, false
	for i, err := range errs {
		rank := 0
		switch {
		case err == nil:
			accepted = true
		case IsAlreadyKnown(err):
			rank = 1
		case kindOf(err) == Answered:
			rank = 2
		default:
			rank = 6
		}
		if behind[i] && rank < 6 {
			rank += 3
		}
		if rank < bestRank {
			best, bestRank = i, rank
		}
	}
	for i, err := range errs {
		if err != nil && i != best && kindOf(err) == Answered && !IsAlreadyKnown(err) {
			e.logger.Debug("rpc endpoint refused a transaction another answered otherwise", "endpoint", eps[i].name, "transaction", tx.Hash().Hex(), "error", err)
		}
	}
	err := errs[best]
	if err != nil && (bestRank == 1 || bestRank == 4) && accepted {
		return nil
	}
	if err != nil && bestRank == 6 && ctx.Err() == nil {
		// No endpoint answered: those left (limited meanwhile or before,
		// out) are asked, one after another, waiting for a limited one.
		tried, left := make([]bool, len(e.eps)), false
		for i, ep := range eps {
			tried[ep.idx] = kindOf(errs[i]) != RateLimited
		}
		for _, t := range tried {
			left = left || !t
		}
		if left {
			if derr := e.doExcept(ctx, 0, tried, func(ctx context.Context, ep *endpoint) error { return ep.client.SendTransaction(ctx, tx) }); derr == nil || kindOf(derr) == Answered {
				return derr
			}
		}
	}
	return err
}

// limitTransport leaves the Retry-After of a 429 answer on its endpoint,
// for the call that got it (go-ethereum's error carries the status, not the
// headers).
type limitTransport struct {
	base  http.RoundTripper
	ep    *endpoint
	clock clock.Clock
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		now := t.clock.Now()
		if d, ok := retryafter.Parse(resp.Header.Get("Retry-After"), now); ok {
			t.ep.retryAfter.Store(now.Add(d).UnixNano())
		}
	}
	return resp, err
}

// RedactURL names an RPC endpoint for logs and metrics without the parts
// that may carry a secret: scheme://host[:port], no user, path or query.
func RedactURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("an RPC URL does not parse")
	}
	switch u.Scheme {
	case "http", "https", "ws", "wss":
	default:
		return "", fmt.Errorf("RPC URL scheme %q is not http, https, ws or wss", u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("an RPC URL (%s) has no host", u.Scheme)
	}
	return u.Scheme + "://" + u.Host, nil
}

// redactURLs names each URL by RedactURL, with "#<position>" (from 1)
// added to the names of URLs sharing one.
func redactURLs(urls []string) ([]string, error) {
	names := make([]string, len(urls))
	count := map[string]int{}
	for i, raw := range urls {
		name, err := RedactURL(raw)
		if err != nil {
			return nil, fmt.Errorf("URL %d: %w", i+1, err)
		}
		names[i] = name
		count[name]++
	}
	for i, name := range names {
		if count[name] > 1 {
			names[i] = name + "#" + strconv.Itoa(i+1)
		}
	}
	return names, nil
}

// nopObserver is the observer of an endpoint without metrics.
type nopObserver struct{}

func (nopObserver) ObserveCall(time.Duration, string) {}
func (nopObserver) SetLag(uint64)                     {}
func (nopObserver) SetIn(bool)                        {}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
