package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/jobs"
	"github.com/x402d/x402d/jobs/brief"
	"github.com/x402d/x402d/jobs/codereview"
	"github.com/x402d/x402d/jobs/csvjson"
	"github.com/x402d/x402d/jobs/dataclean"
	"github.com/x402d/x402d/jobs/diff"
	"github.com/x402d/x402d/jobs/regex"
	"github.com/x402d/x402d/jobs/urlmeta"
	"github.com/x402d/x402d/x402"
)

// specs are the seven operations the service sells, in catalogue order.
func specs() []jobs.Spec {
	var out []jobs.Spec
	for _, op := range []jobs.Operation{brief.Op, dataclean.Op, codereview.Op, urlmeta.Op, csvjson.Op, regex.Op, diff.Op} {
		out = append(out, op.Spec)
	}
	return out
}

// TestOfficialPackagesReadQuotes serves every quote x402 builds of the
// catalogue's offers (each operation, on one network and on all seven,
// and with refusal reasons) as a 402 on loopback, and has the official
// packages read them:
// @x402/core's HTTP client and header decoder, its PaymentRequired v2
// schema, @x402/extensions' validation of the bazaar extension (the
// facilitator's check before cataloguing), and its payment-identifier
// helpers (the declaration equal to the official server's, an id appended
// and extracted as the official client and server do). They must read exactly the
// PaymentRequired we meant.
func TestOfficialPackagesReadQuotes(t *testing.T) {
	t.Parallel()
	compat, err := filepath.Abs("../compat")
	require.NoError(t, err)
	_, err = exec.LookPath("node")
	require.NoError(t, err, "node (v20+) is needed for the compatibility test; run: go tool task npm (or install Node.js)")
	for _, pkg := range []string{"core", "extensions"} {
		_, err = os.Stat(filepath.Join(compat, "node_modules", "@x402", pkg, "package.json"))
		require.NoError(t, err, "the official x402 packages are missing; run: go tool task npm")
	}

	configs := []struct {
		cfg        x402.CatalogConfig
		modelReady bool
	}{
		{x402.CatalogConfig{PublicURL: "https://x402d.example", PayToEVM: "0x000000000000000000000000000000000000dEaD",
			EVMNetworks: []string{"eip155:8453", "eip155:42161", "eip155:137", "eip155:43114", "eip155:1329", "eip155:196"},
			Solana:      &x402.SolanaOption{PayTo: "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM", FeePayer: "2wmVCSfPxGPjrnMMn7rchp4uaeoTqN39mXFC2zhPdri9"}},
			true},
		{x402.CatalogConfig{PublicURL: "http://127.0.0.1:8080", PayToEVM: "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720", EVMNetworks: []string{"eip155:8453"}}, false},
	}
	type served struct {
		name  string
		quote *x402.Quote
	}
	var quotes []served
	for i, c := range configs {
		cat, err := x402.NewCatalog(jobs.Offers(specs(), c.modelReady), &c.cfg)
		require.NoError(t, err)
		for _, e := range cat.Entries() {
			q, err := cat.Quote(e.Offer.Name)
			if !e.Sellable {
				require.ErrorIs(t, err, x402.ErrNotSellable)
				continue
			}
			require.NoError(t, err)
			quotes = append(quotes, served{fmt.Sprintf("config %d %s", i, e.Offer.Name), q})
			for _, reason := range []string{x402.ReasonNoMatch, "invalid_exact_evm_signature", `odd "reason" \ ü`} {
				rq, err := cat.QuoteWithError(e.Offer.Name, reason, "refused: "+reason)
				require.NoError(t, err)
				quotes = append(quotes, served{fmt.Sprintf("config %d %s refused %q", i, e.Offer.Name, reason), rq})
			}
		}
	}
	require.Len(t, quotes, 4*(7+4), "all seven operations with a model, the four without")
	// Controls: quotes the official packages must refuse, so that the
	// harness is seen to catch a malformed quote.
	good := quotes[len(quotes)-1].quote
	var pr map[string]any
	require.NoError(t, x402.DecodeHeader(good.PaymentRequired, &pr))
	pr["accepts"] = []any{}
	empty, err := x402.EncodeHeader(pr)
	require.NoError(t, err)
	bazaar := pr["extensions"].(map[string]any)["bazaar"].(map[string]any)
	bazaar["info"].(map[string]any)["input"].(map[string]any)["method"] = "GET"
	wrongMethod, err := x402.EncodeHeader(pr)
	require.NoError(t, err)
	delete(pr["extensions"].(map[string]any), x402.ExtensionPaymentIdentifier)
	noPaymentID, err := x402.EncodeHeader(pr)
	require.NoError(t, err)
	controls := map[int]string{}
	for _, c := range []struct{ header, want string }{
		{strings.NewReplacer("+", "-", "/", "_").Replace(good.PaymentRequired + "+/"), "decodePaymentRequiredHeader"},
		{empty, "PaymentRequiredV2Schema"},
		{wrongMethod, "validateDiscoveryExtension"},
		{noPaymentID, "no payment-identifier extension"},
	} {
		controls[len(quotes)] = c.want
		quotes = append(quotes, served{"control " + c.want, &x402.Quote{PaymentRequired: c.header, WWWAuthenticate: good.WWWAuthenticate, Body: good.Body}})
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if err != nil || i < 0 || i >= len(quotes) {
			http.NotFound(w, r)
			return
		}
		q := quotes[i].quote
		// As the api writes a quote (canonical header names).
		w.Header().Set(x402.HeaderPaymentRequired, q.PaymentRequired)
		w.Header().Set("WWW-Authenticate", q.WWWAuthenticate)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write(q.Body)
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/decode.mjs", srv.URL, strconv.Itoa(len(quotes)))
	cmd.Env = append(os.Environ(), "COMPAT_DIR="+compat)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node decode.mjs failed (run: go tool task npm): %s", stderr.String())

	var results []struct {
		Status          int             `json:"status"`
		Errors          []string        `json:"errors"`
		Required        json.RawMessage `json:"required"`
		Body            json.RawMessage `json:"body"`
		WWWAuthenticate string          `json:"wwwAuthenticate"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &results), stdout.String())
	require.Len(t, results, len(quotes))
	for i, r := range results {
		name, q := quotes[i].name, quotes[i].quote
		require.Equal(t, http.StatusPaymentRequired, r.Status, name)
		if want, ok := controls[i]; ok {
			require.NotEmpty(t, r.Errors, name)
			require.Contains(t, strings.Join(r.Errors, "\n"), want, name)
			continue
		}
		require.Empty(t, r.Errors, name)
		var ours, theirs any
		require.NoError(t, x402.DecodeHeader(q.PaymentRequired, &ours), name)
		require.NoError(t, json.Unmarshal(r.Required, &theirs), name)
		require.Equal(t, ours, theirs, "%s: the official client reads the PaymentRequired we built", name)
		require.JSONEq(t, string(q.Body), string(r.Body), name)
		require.Equal(t, q.WWWAuthenticate, r.WWWAuthenticate, name)
	}
}
