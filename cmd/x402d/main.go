package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	setGCTarget(os.Getenv)
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, nil); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "x402d:", err)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// defaultGCPercent is the garbage collector's target of an x402d process
// when GOGC is unset: the heap grows to three times what is live before a
// collection, not twice. A paid call allocates about 120 kB and keeps
// little, so collections were a quarter of the process's CPU under load;
// the live heap, which stays flat, is tens of megabytes
// (docs/performance.md, CPU a paid call).
const defaultGCPercent = 200

// setGCTarget sets the garbage collector's target to defaultGCPercent
// unless the environment sets GOGC (which the Go runtime then reads).
func setGCTarget(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

const usage = `x402d: pay-per-call utility service over x402, and a public index of x402 sellers.

Usage: x402d <command>

Commands:
  serve     api + worker + scheduler in one process (migrates first)
  api       the HTTP api only
  worker    River workers only
  migrate   apply database migrations and exit
  devchain  the development chain alone, JSON-RPC on DEVCHAIN_RPC_ADDR
  index crawl  one full pass of the index's sources now, with progress
  archive   archive the event log: x402d archive -before DATE [-dir archive]
            writes each whole partition ending by DATE to files, then drops it;
            x402d archive restore FILE brings one back
  pay       pay one call: x402d pay [-account N | -key HEX] [-d BODY|@FILE] URL
  load      paid load: x402d load [-url BASE] [-op diff] [-c 16] [-t 10s] [-rate N]

Configuration is read from the environment; see docs/configuration.md.
`

// run runs the subcommand in args. opts is nil except in tests, which use it
// to replace the payment step with a double that lives in test files.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, opts *options) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	if opts == nil {
		opts = &options{}
	}
	a := newApp(cfg, stderr, opts)
	if cfg.PprofAddr != "" {
		srv := pprofServer(cfg.PprofAddr, a.logger)
		if err := srv.Start(ctx); err != nil {
			return err
		}
		defer srv.Stop()
	}
	switch args[0] {
	case "serve":
		return a.serve(ctx, true, true)
	case "api":
		return a.serve(ctx, true, false)
	case "worker":
		return a.serve(ctx, false, true)
	case "migrate":
		return a.migrate(ctx)
	case "devchain":
		return runDevchain(ctx, cfg, a.logger)
	case "index":
		if len(args) < 2 || args[1] != "crawl" {
			fmt.Fprint(stderr, "usage: x402d index crawl\n")
			return errUsage
		}
		return a.indexCrawl(ctx, stdout)
	case "archive":
		return a.archive(ctx, args[1:], stdout, stderr)
	case "pay":
		return runPay(ctx, args[1:], getenv, stdout)
	case "load":
		return runLoad(ctx, args[1:], getenv, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprintf(stderr, "x402d: unknown command %q\n\n%s", args[0], usage)
		return errUsage
	}
}
