package svm

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// maxStatuses is the most signatures getSignatureStatuses takes in one
// call.
const maxStatuses = 256

// signatureStatus is a node's status of a transaction it has seen.
type signatureStatus struct {
	Err                json.RawMessage `json:"err"`
	ConfirmationStatus string          `json:"confirmationStatus"`
}

// statuses asks a node the statuses of the signatures concurrent
// settlements wait on: those asked while a call is on its way go together
// in the next one (up to maxStatuses a call), so that the node answers one
// call a round trip however many settlements are in flight, and a lone
// settlement's call leaves at once. It is safe for concurrent use.
type statuses struct {
	rpc   *rpcClient
	queue sendQueue[statusWaiter]
}

type statusWaiter struct {
	signature string
	answer    chan<- statusAnswer
}

type statusAnswer struct {
	status *signatureStatus // nil: the node has not seen it
	err    error
}

// get returns the node's status of the transaction of signature, nil when
// the node has not seen it.
func (s *statuses) get(ctx context.Context, signature string) (*signatureStatus, error) {
	answer := make(chan statusAnswer, 1)
	if s.queue.push(statusWaiter{signature: signature, answer: answer}, 1) {
		go s.send()
	}
	select {
	case a := <-answer:
		return a.status, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send asks the statuses of the queued signatures, a call at a time, until
// none is queued. A waiter that gave up is answered all the same (its
// channel is buffered).
func (s *statuses) send() {
	for batch := s.queue.take(maxStatuses); batch != nil; batch = s.queue.take(maxStatuses) {
		sigs := make([]string, len(batch))
		for i, w := range batch {
			sigs[i] = w.signature
		}
		var out struct {
			Value []*signatureStatus `json:"value"`
		}
		// No caller's context: the call answers every waiter, and the
		// client's timeout bounds it.
		err := s.rpc.call(context.Background(), "getSignatureStatuses", []any{sigs, map[string]bool{"searchTransactionHistory": true}}, &out)
		if err == nil && len(out.Value) != len(sigs) {
			err = fmt.Errorf("getSignatureStatuses: %d statuses for %d signatures", len(out.Value), len(sigs))
		}
		for i, w := range batch {
			if err != nil {
				w.answer <- statusAnswer{err: err}
				continue
			}
			w.answer <- statusAnswer{status: out.Value[i]}
		}
	}
}

// sendQueue is what waits to be sent to a node, and the goroutines sending
// it: a sender takes all that waits (up to a bound) each time, so that
// what was queued while it was busy leaves together. It is safe for
// concurrent use.
type sendQueue[T any] struct {
	mu      sync.Mutex
	items   []T
	senders int
}

// push queues item, and reports whether the caller is to start a sender
// (fewer than senders are running; the caller's counts among them).
func (q *sendQueue[T]) push(item T, senders int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, item)
	if q.senders < senders {
		q.senders++
		return true
	}
	return false
}

// take returns up to n queued items, oldest first; when none is queued it
// returns nil, and the sender asking is no longer counted.
func (q *sendQueue[T]) take(n int) []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		q.senders--
		return nil
	}
	n = min(len(q.items), n)
	taken := q.items[:n:n]
	q.items = append([]T(nil), q.items[n:]...)
	return taken
}

// state returns how many items are queued and senders running.
func (q *sendQueue[T]) state() (queued, senders int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items), q.senders
}
