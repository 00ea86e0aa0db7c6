package api

import (
	"context"

	"github.com/x402d/x402d/mcp"
)

// toolCalls runs the paid calls of the MCP tools through the same pipeline
// as the HTTP API's (admit, wait), and answers their outcomes as the HTTP
// API does (outcome.go): the MCP endpoint only renders them.
type toolCalls struct{ s *Server }

// Call implements mcp.Caller. A call without a payment gets the quote once
// its arguments are valid, so that an agent learns of a bad argument before
// it signs anything; with a payment, the arguments are checked again before
// the payment is verified.
func (t toolCalls) Call(ctx context.Context, op string, args []byte, payment string, progress func()) mcp.Outcome {
	s := t.s
	entry := s.ops[op]
	if !entry.sold() {
		return s.toolOutcome(ctx, s.unpaid(ctx, entry))
	}
	if payment == "" {
		if _, err := entry.op.Decode("", args, &s.cfg.Limits); err != nil {
			return s.toolOutcome(ctx, s.failed(ctx, invalidInput(entry, err)))
		}
		return s.toolOutcome(ctx, s.unpaid(ctx, entry))
	}
	a, err := s.admit(ctx, entry, args, payment)
	if err != nil {
		return s.toolOutcome(ctx, s.outcomeOf(ctx, op, nil, nil, err))
	}
	defer a.close()
	call, err := s.wait(ctx, a, s.cfg.ToolWait, s.cfg.ProgressEvery, progress)
	return s.toolOutcome(ctx, s.outcomeOf(ctx, op, a, call, err))
}
