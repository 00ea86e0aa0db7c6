package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/x402d/x402d/retention"
)

// archive is `x402d archive -before DATE [-dir DIR]` and
// `x402d archive restore FILE`.
func (a *app) archive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "restore" {
		if len(args) != 2 {
			fmt.Fprint(stderr, "usage: x402d archive restore FILE (a .manifest.json or its .jsonl.gz)\n")
			return errUsage
		}
		pool, err := a.open(ctx, false)
		if err != nil {
			return err
		}
		defer pool.Close()
		m, err := retention.Restore(ctx, pool, args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "restored %s: %d events (ids %d-%d)\n", m.Partition, m.Rows, m.FirstID, m.LastID)
		return nil
	}
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	before := fs.String("before", "", "archive the partitions whose whole range ends by this date (2006-01-02, UTC, or RFC 3339)")
	dir := fs.String("dir", "archive", "directory of the archive files")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *before == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, "usage: x402d archive -before DATE [-dir DIR]\n")
		return errUsage
	}
	cutoff, err := time.Parse(time.DateOnly, *before)
	if err != nil {
		if cutoff, err = time.Parse(time.RFC3339, *before); err != nil {
			return fmt.Errorf("archive: -before %q is not a date like 2026-10-01", *before)
		}
	}
	pool, err := a.open(ctx, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	done, err := retention.Archive(ctx, pool, *dir, cutoff, retention.LockTimeout)
	for _, m := range done {
		fmt.Fprintf(stdout, "archived %s: %d events to %s\n", m.Partition, m.Rows, m.File)
	}
	if err != nil {
		return err
	}
	if len(done) == 0 {
		fmt.Fprintf(stdout, "no partition ends by %s\n", cutoff.UTC().Format(time.RFC3339))
	}
	return nil
}
