package main

import (
	"log/slog"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/csvjson"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/jobs/regex"
	"github.com/x402d/x402d/jobs/urlmeta"
	"github.com/x402d/x402d/worker"
)

// opDeps are what the operations need to compute their results.
type opDeps struct {
	fetch   *fetch.Client
	browser urlmeta.Renderer
	logger  *slog.Logger
}

// opDef is a sold operation: its catalogue entry for the api and its binding
// to the function that computes it for the workers.
type opDef struct {
	op   jobs.Operation
	bind worker.Op
}

// operations lists every operation the service sells, in catalogue order,
// followed by extra (tests only).
func operations(deps *opDeps, extra []opDef) ([]jobs.Operation, []worker.Op) {
	meta := &urlmeta.Worker{Fetch: deps.fetch, Browser: deps.browser, Logger: deps.logger}
	defs := []opDef{
		{urlmeta.Op, worker.Bind(urlmeta.Op, meta.Work, false)},
		{csvjson.Op, worker.Bind(csvjson.Op, csvjson.Work, false)},
		{regex.Op, worker.Bind(regex.Op, regex.Work, false)},
		{diff.Op, worker.Bind(diff.Op, diff.Work, false)},
	}
	defs = append(defs, extra...)
	ops := make([]jobs.Operation, len(defs))
	binds := make([]worker.Op, len(defs))
	for i, d := range defs {
		ops[i], binds[i] = d.op, d.bind
	}
	return ops, binds
}
