package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Job outcomes, the values of the outcome label of x402d_jobs_total.
const (
	JobCompleted = "completed"
	JobError     = "error"
	JobDiscarded = "discarded"
	JobCancelled = "cancelled"
	JobSnoozed   = "snoozed"
	JobPanic     = "panic"
)

// JobMiddleware returns the River worker middleware that records every job
// run: its kind, outcome and duration. Install it in river.Config.Middleware.
// On a nil *Metrics it records nothing.
func (m *Metrics) JobMiddleware() rivertype.Middleware {
	return &jobMiddleware{metrics: m}
}

type jobMiddleware struct {
	river.MiddlewareDefaults
	metrics *Metrics
}

// Work runs the job and records how it went.
func (mw *jobMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) (err error) {
	if mw.metrics == nil {
		return doInner(ctx)
	}
	start := time.Now()
	panicked := true
	defer func() {
		outcome := JobOutcome(job, err)
		if panicked {
			outcome = JobPanic
		}
		mw.metrics.JobDone(job.Kind, outcome, time.Since(start))
	}()
	err = doInner(ctx)
	panicked = false
	return err
}

// JobOutcome names how a run of job that returned err ends: completed,
// cancelled, snoozed, discarded (an error on its last attempt) or error (it
// will be retried).
func JobOutcome(job *rivertype.JobRow, err error) string {
	var cancel *rivertype.JobCancelError
	var snooze *rivertype.JobSnoozeError
	switch {
	case err == nil:
		return JobCompleted
	case errors.As(err, &cancel):
		return JobCancelled
	case errors.As(err, &snooze):
		return JobSnoozed
	case job.Attempt >= job.MaxAttempts:
		return JobDiscarded
	}
	return JobError
}
