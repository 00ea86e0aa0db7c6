package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/x402d/x402d/loadgen"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/evm"
	"github.com/x402d/x402d/x402/payclient"
)

// devchainNetwork is the network the devchain stands for: Base.
const devchainNetwork = "eip155:8453"

// devchain returns the devchain's configuration: `x402d devchain`'s, and
// that of the chain `x402d serve` embeds.
func (c *Config) devchain(logger *slog.Logger) *devchain.Config {
	return &devchain.Config{Logger: logger, DataDir: c.DevchainDataDir, History: uint64(c.DevchainHistoryBlocks)}
}

// runDevchain is `x402d devchain`: the development chain alone, serving
// JSON-RPC on DEVCHAIN_RPC_ADDR, for split deployments.
func runDevchain(ctx context.Context, cfg *Config, logger *slog.Logger) error {
	logger.InfoContext(ctx, "devchain serving", "addr", cfg.DevchainRPCAddr, "chain_id", 8453, "usdc", devchain.USDC.Hex())
	return devchain.ListenAndServe(ctx, cfg.devchain(logger), cfg.DevchainRPCAddr)
}

// payFlags are the flags shared by `x402d pay` and `x402d load`.
type payFlags struct {
	keyHex  *string
	account *int
	network *string
}

func addPayFlags(fs *flag.FlagSet, getenv func(string) string) *payFlags {
	return &payFlags{
		keyHex:  fs.String("key", getenv("PAY_KEY"), "hex private key of the paying account (default $PAY_KEY)"),
		account: fs.Int("account", 0, "development account (0-9) paying when -key and $PAY_KEY are empty"),
		network: fs.String("network", devchainNetwork, "CAIP-2 network to pay on"),
	}
}

func (p *payFlags) client() (*payclient.Client, error) {
	key, err := devchain.DeriveKey(devchain.Mnemonic, uint32(*p.account))
	if *p.keyHex != "" {
		key, err = evm.ParseKey(*p.keyHex)
	}
	if err != nil {
		return nil, fmt.Errorf("paying key: %w", err)
	}
	return payclient.New(&payclient.Config{Key: key, Network: *p.network})
}

// runPay is `x402d pay [-key HEX | -account N] [-network eip155:8453]
// [-X METHOD] [-d BODY | -d @FILE] [-payment-id ID] URL`: quote, sign, pay
// and print. With -payment-id, running it again after a lost answer signs
// a new payment that gets the first call's answer, charged once.
func runPay(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pay", flag.ContinueOnError)
	pf := addPayFlags(fs, getenv)
	method := fs.String("X", "POST", "HTTP method")
	data := fs.String("d", "", "request body, or @file")
	paymentID := fs.String("payment-id", "", "payment identifier (x402's payment-identifier extension, 16-128 of [A-Za-z0-9_-]): the same id again is charged once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: x402d pay [-key HEX | -account N] [-network CAIP2] [-X METHOD] [-d BODY|@FILE] [-payment-id ID] URL")
	}
	body := []byte(*data)
	if file, ok := strings.CutPrefix(*data, "@"); ok {
		var err error
		if body, err = os.ReadFile(file); err != nil {
			return err
		}
	}
	client, err := pf.client()
	if err != nil {
		return err
	}
	res, err := client.Do(ctx, &payclient.Request{Method: *method, URL: fs.Arg(0), Body: body, PaymentID: *paymentID})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "HTTP %d (payer %s)\n", res.Status, client.Address().Hex())
	if res.Refusal != "" {
		fmt.Fprintln(stdout, "payment refused:", res.Refusal)
	}
	if res.Settlement != nil {
		fmt.Fprintf(stdout, "PAYMENT-RESPONSE success=%t transaction=%s network=%s\n", res.Settlement.Success, res.Settlement.Transaction, res.Settlement.Network)
	}
	_, err = stdout.Write(append(res.Body, '\n'))
	return err
}

// runLoad is `x402d load`: paid load from a development account against a
// service on loopback.
func runLoad(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	pf := addPayFlags(fs, getenv)
	base := fs.String("url", "http://"+DefaultConfig().ListenAddr, "the service (loopback only)")
	op := fs.String("op", "diff", "operation to call")
	body := fs.String("d", `{"a":"one\ntwo\n","b":"one\n2\n"}`, "request body")
	conc := fs.Int("c", 16, "calls in flight")
	rate := fs.Float64("rate", 0, "calls started per second (0: as fast as the concurrency allows)")
	dur := fs.Duration("t", 10*time.Second, "duration")
	retry := fs.Bool("retry", true, "resend a lost answer with the same payment header")
	every := fs.Duration("every", 0, "also report the calls started in each interval this long (0: none)")
	presign := fs.Bool("presign", false, "sign every call's payment before the run starts (with -rate: rate × duration of them), so that signing does not share the run's CPU")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client, err := pf.client()
	if err != nil {
		return err
	}
	rep, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL: *base, Requests: []loadgen.Request{{Op: *op, Body: *body}}, Payer: client,
		Concurrency: *conc, Rate: *rate, Duration: *dur, Retry: *retry, Interval: *every, Presign: *presign,
	})
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(stdout, rep)
	return err
}
