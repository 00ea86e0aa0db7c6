package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/x402d/x402d/fetch"
	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/brief"
	"github.com/x402d/x402d/jobs/codereview"
	"github.com/x402d/x402d/jobs/csvjson"
	"github.com/x402d/x402d/jobs/dataclean"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/jobs/regex"
	"github.com/x402d/x402d/jobs/urlmeta"
	"github.com/x402d/x402d/model"
	"github.com/x402d/x402d/worker"
)

// opDeps are what the operations need to compute their results.
type opDeps struct {
	fetch   *fetch.Client
	browser urlmeta.Renderer
	// model is nil without GEMINI_API_KEY: the model operations are then
	// listed but not sold.
	model  *model.Client
	limits *jobs.Limits
	logger *slog.Logger
}

// opDef is a sold operation: its catalogue entry for the api and its binding
// to the function that computes it for the workers (nil when it cannot run
// here, for an operation listed but not sold).
type opDef struct {
	op   jobs.Operation
	bind worker.Op
}

// newModel returns the Gemini client, or nil without an API key.
func newModel(ctx context.Context, cfg *Config) (*model.Client, error) {
	mc, err := model.New(ctx, &model.Config{APIKey: cfg.GeminiAPIKey, Model: cfg.GeminiModel, BaseURL: cfg.GeminiBaseURL})
	if errors.Is(err, model.ErrNoAPIKey) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("model client: %w", err)
	}
	return mc, nil
}

// operations lists every operation the service sells, in catalogue order
// (spec part 4), followed by extra (tests only), and the bindings of those
// that can run here.
func operations(deps *opDeps, extra []opDef) ([]jobs.Operation, []worker.Op, error) {
	defs := []opDef{{op: brief.Op}, {op: dataclean.Op}, {op: codereview.Op}}
	if deps.model != nil {
		br, err := brief.NewWorker(deps.model)
		if err != nil {
			return nil, nil, err
		}
		dc, err := dataclean.NewWorker(deps.model, deps.limits)
		if err != nil {
			return nil, nil, err
		}
		cr, err := codereview.NewWorker(deps.model, deps.logger)
		if err != nil {
			return nil, nil, err
		}
		defs[0].bind = worker.Bind(brief.Op, br.Work, true)
		defs[1].bind = worker.Bind(dataclean.Op, dc.Work, true)
		defs[2].bind = worker.Bind(codereview.Op, cr.Work, true)
	}
	meta := &urlmeta.Worker{Fetch: deps.fetch, Browser: deps.browser, Logger: deps.logger}
	defs = append(defs,
		opDef{urlmeta.Op, worker.Bind(urlmeta.Op, meta.Work, false)},
		opDef{csvjson.Op, worker.Bind(csvjson.Op, csvjson.Work, false)},
		opDef{regex.Op, worker.Bind(regex.Op, regex.Work, false)},
		opDef{diff.Op, worker.Bind(diff.Op, diff.Work, false)},
	)
	defs = append(defs, extra...)
	ops := make([]jobs.Operation, len(defs))
	var binds []worker.Op
	for i, d := range defs {
		ops[i] = d.op
		if d.bind != nil {
			binds = append(binds, d.bind)
		}
	}
	return ops, binds, nil
}
