package index

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/x402d/x402d/store"
)

// Change is one change of the market (index_changes): a service added or
// retired, a price or the networks of a service changed, a host gone live
// or dead. From and To are JSON: a price as decimal text in USDC (null:
// unpriced), networks as a list, liveness as a boolean (null: not measured
// before). A service added has only To (its price), a service retired only
// From.
type Change store.IndexChange

// The bounds of a page of changes.
const (
	// DefaultChangesLimit is a page's number of changes when none is asked.
	DefaultChangesLimit = 100
	// MaxChangesLimit is the most changes a page holds.
	MaxChangesLimit = 500
)

// ChangesQuery is a query of the changes feed (/api/xindex/changes).
type ChangesQuery struct {
	// Since is where the page starts: a cursor (the next of an earlier
	// page: the changes after it) or an RFC 3339 time (the changes at or
	// after it). Empty: from the first change.
	Since string `json:"since,omitempty"`
	// Host keeps only the changes of one host.
	Host string `json:"host,omitempty"`
	// Limit is the number of changes, 1 to MaxChangesLimit. Defaults to
	// DefaultChangesLimit.
	Limit int `json:"limit,omitempty"`

	after int64
	from  time.Time
}

// Check fills the defaults of q and checks its bounds, returning a
// *QueryError for the first field out of them.
func (q *ChangesQuery) Check() error {
	if q.Limit == 0 {
		q.Limit = DefaultChangesLimit
	}
	if q.Limit < 1 || q.Limit > MaxChangesLimit {
		return &QueryError{Field: "limit", Message: fmt.Sprintf("limit must be between 1 and %d", MaxChangesLimit)}
	}
	if len(q.Host) > 253 {
		return &QueryError{Field: "host", Message: "host is at most 253 characters"}
	}
	q.Host = strings.ToLower(q.Host)
	if q.Since == "" {
		return nil
	}
	if n, err := strconv.ParseInt(q.Since, 10, 64); err == nil && n >= 0 {
		q.after = n
		return nil
	}
	t, err := time.Parse(time.RFC3339, q.Since)
	if err != nil {
		return &QueryError{Field: "since", Message: "since must be a cursor (the next of a page) or an RFC 3339 time"}
	}
	q.from = t
	return nil
}

// ChangesAnswer is a page of the changes feed, oldest first. Next is the
// cursor to pass as since for the changes after this page (the same as
// since when there were none yet).
type ChangesAnswer struct {
	OK      bool     `json:"ok"`
	Changes []Change `json:"changes"`
	Next    string   `json:"next"`
}

// changesOf converts the store's changes.
func changesOf(rows []store.IndexChange) []Change {
	changes := make([]Change, len(rows))
	for i, c := range rows {
		changes[i] = Change(c)
	}
	return changes
}

// Changes answers q, which Check has accepted: the changes after its
// cursor (or from its time), oldest first.
func (r *Reader) Changes(ctx context.Context, q ChangesQuery) (*ChangesAnswer, error) {
	after := q.after
	if !q.from.IsZero() {
		var err error
		if after, err = store.ChangeCursorAt(ctx, r.pool, q.from); err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
	}
	rows, err := store.ChangeList(ctx, r.pool, after, q.Host, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	changes := changesOf(rows)
	next := after
	if len(changes) > 0 {
		next = changes[len(changes)-1].ID
	}
	return &ChangesAnswer{OK: true, Changes: changes, Next: strconv.FormatInt(next, 10)}, nil
}

// LatestChanges returns the latest limit changes by the time they
// happened, newest first, of host when it is not empty. (A probe is
// recorded after it was taken, so the log's order and the time's can
// differ a little.)
func (r *Reader) LatestChanges(ctx context.Context, host string, limit int) ([]Change, error) {
	rows, err := store.ChangeLatestList(ctx, r.pool, host, limit)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	return changesOf(rows), nil
}

// Title says a change in words, e.g. "price of https://a.example/x changed
// from 0.01 to 0.02 USDC".
func (c *Change) Title() string {
	what := c.Host
	if c.Resource != nil {
		what = *c.Resource
	}
	switch c.Kind {
	case store.ChangeServiceAdded:
		return fmt.Sprintf("%s added (%s)", what, priceWords(c.To))
	case store.ChangeServiceRetired:
		return fmt.Sprintf("%s retired", what)
	case store.ChangePriceChanged:
		return fmt.Sprintf("price of %s changed from %s to %s", what, priceWords(c.From), priceWords(c.To))
	case store.ChangeNetworksChanged:
		return fmt.Sprintf("networks of %s changed from %s to %s", what, listWords(c.From), listWords(c.To))
	case store.ChangeHostLive:
		return fmt.Sprintf("%s went live", c.Host)
	case store.ChangeHostDead:
		return fmt.Sprintf("%s went dead", c.Host)
	}
	return c.Kind + " " + what
}

func priceWords(raw json.RawMessage) string {
	var s *string
	if json.Unmarshal(raw, &s) != nil || s == nil {
		return "unpriced"
	}
	if f, err := strconv.ParseFloat(*s, 64); err == nil {
		return strconv.FormatFloat(f, 'f', -1, 64) + " USDC"
	}
	return *s + " USDC"
}

func listWords(raw json.RawMessage) string {
	var l []string
	if json.Unmarshal(raw, &l) != nil || len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
