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
	rpc *rpcClient

	mu      sync.Mutex
	queue   []statusWaiter
	running bool // a goroutine is sending the queue
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
	s.mu.Lock()
	s.queue = append(s.queue, statusWaiter{signature: signature, answer: answer})
	if !s.running {
		s.running = true
		go s.send()
	}
	s.mu.Unlock()
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
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		n := min(len(s.queue), maxStatuses)
		batch := s.queue[:n:n]
		s.queue = append([]statusWaiter(nil), s.queue[n:]...)
		s.mu.Unlock()

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
