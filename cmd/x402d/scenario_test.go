//go:build scenario

package main

// Scenarios that disturb the whole machine's Postgres run only when asked
// for, with -tags scenario (go tool task load:pg-restart): they would break
// every other test that runs at the same time.

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/dbtest"
	"github.com/x402d/x402d/loadgen"
)

// TestLoadPostgresRestarted restarts the Postgres server during paid load on
// one api and one worker process, cleanly (a fast shutdown, which flushes
// the WAL) and as a crash (an immediate shutdown: commits that did not wait
// for the disk may be lost, which must never lose a call whose payment
// moved): clients retry lost answers with the same header, and every call
// ends paid once, with no restart of ours.
func TestLoadPostgresRestarted(t *testing.T) {
	for _, tt := range []struct{ name, command string }{
		{"Restart", `pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main restart`},
		{"Crash", `v="$(ls /etc/postgresql | head -n1)"; pg_ctlcluster --skip-systemctl-redirect "$v" main stop -m immediate && pg_ctlcluster --skip-systemctl-redirect "$v" main start`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := dbtest.Schema(ctx, t)
			// A job running when the server went away may have lost its
			// last records with it (commits that did not wait for the
			// disk): it stays running until River's rescuer, which looks
			// every 30 s, takes it for dead and runs it again.
			env := map[string]string{"DATABASE_URL": db.URL, "LISTEN_ADDR": "127.0.0.1:0", "CALL_WAIT": "2s", "RIVER_POLL_INTERVAL": "200ms",
				"JOB_TIMEOUT": "15s", "JOB_RESCUE_AFTER": "20s"}
			api := startChild(t, "api", env)
			startChild(t, "worker", env)

			restarted := make(chan error, 1)
			go func() {
				time.Sleep(2 * time.Second)
				out, err := exec.Command("sh", "-c", tt.command).CombinedOutput()
				if err != nil {
					err = &restartError{err: err, out: strings.TrimSpace(string(out))}
				}
				restarted <- err
			}()
			rep, err := loadgen.Run(ctx, loadgen.Config{
				BaseURL: api.addr, Requests: loadRequests, Payer: &fakePayer{payer: "0xpg"},
				Concurrency: 8, Duration: 8 * time.Second, Retry: true, RetryFor: 90 * time.Second,
			})
			require.NoError(t, <-restarted)
			require.NoError(t, err)
			t.Log(rep)
			require.Equal(t, rep.Calls, rep.Statuses[http.StatusOK], rep.String())
			checkLedger(ctx, t, db, rep)
		})
	}
}

type restartError struct {
	err error
	out string
}

func (e *restartError) Error() string { return "restart postgres: " + e.err.Error() + ": " + e.out }
