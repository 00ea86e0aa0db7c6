// Command sellers gives the index's pictures (docs/screenshots) a market to
// show: demo x402 sellers on loopback (127.0.0.2, 127.0.0.3 and 127.0.0.4,
// port 28471, each answering 402 with its listing's quote, the first two
// proving their ownership in /.well-known/x402), a seller listed on
// localhost that nothing answers (dead), a Bazaar-shaped listing of them
// (http://127.0.0.1:28470/list), and payments into their payTo addresses on
// the devchain: EIP-3009 settlements of the calls their listing reports,
// sent by another account as a facilitator does, a payer that 127.0.0.4
// funds paying it back with plain transfers, and paid calls to the service
// itself.
//
//	go run ./scripts/screenshots/sellers serve
//
// serves them; start `x402d serve` reading them with its devchain as the
// index's chain: DEVCHAIN_RPC_ADDR=127.0.0.1:18545
// RPC_URL_EIP155_8453=http://127.0.0.1:18545 FETCH_ALLOW_CIDRS=127.0.0.0/8
// INDEX_SOURCES=<PUBLIC_URL>/api/x402/discovery/resources,http://127.0.0.1:28470/list.
// Once its chain job watches their payTo addresses (its table
// index_chain_watch lists them: it counts from its first run on, see
// docs/operating.md),
//
//	go run ./scripts/screenshots/sellers pay -rpc http://127.0.0.1:18545 -service <PUBLIC_URL>
//
// pays them; the chain job's next run counts the payments. The ownership
// proofs are read by the discovery from origins, which runs on INDEX_CRON's
// schedule but not at start (INDEX_CRON='@every 1m' brings it sooner): once
// the table index_ownership lists the two,
// `go run ./scripts/screenshots -url <PUBLIC_URL> -host 127.0.0.2` takes the
// pictures.
package main

import (
	"context"
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/x402d/x402d/x402"
	"github.com/x402d/x402d/x402/devchain"
	"github.com/x402d/x402d/x402/payclient"
)

// port is the sellers' port; listingAddr is where the listing is served.
const (
	port        = "28471"
	listingAddr = "127.0.0.1:28470"
)

// facilitatorAccount is the devchain account that sends the settlements
// (the service's relayer is devchain.RelayerAccount); fundingAccount gives
// the funded payer its gas.
const (
	facilitatorAccount = 7
	fundingAccount     = 6
)

// resource is one listed resource: its price in USDC atomic units and the
// calls (and distinct payers) its listing reports and pay makes.
type resource struct {
	path, price, desc string
	calls, payers     int
}

// seller is one demo seller: its host, whether it proves its ownership,
// whether it answers at all, and its resources.
type seller struct {
	host          string
	proof, served bool
	resources     []resource
}

// demoSellers returns the sellers.
func demoSellers() []seller {
	return []seller{
		{"127.0.0.2", true, true, []resource{
			{"/weather", "1000", "Weather forecast for a city, hourly for 7 days", 9, 4},
			{"/air-quality", "1000", "Air quality index and pollutants for a place", 3, 2},
			{"/geocode", "500", "Place name to coordinates and back", 2, 2},
			{"/tides", "2000", "Tide times and heights for a coastal station", 0, 0},
		}},
		{"127.0.0.3", true, true, []resource{
			{"/translate", "5000", "Translate a text between 120 languages", 4, 3},
			{"/detect-language", "1000", "Detect the language of a text", 0, 0},
			{"/summarize", "10000", "Summarize a text or a web page", 2, 1},
		}},
		{"127.0.0.4", false, true, []resource{
			{"/ocr", "20000", "Text from an image (OCR)", 4, 2},
			{"/thumbnail", "3000", "A thumbnail of an image, any size", 0, 0},
		}},
		{"localhost", false, false, []resource{
			{"/search", "10000", "Web search results as JSON", 0, 0},
			{"/scrape", "50000", "A web page's readable text and links", 0, 0},
		}},
	}
}

// key returns the fixed key named name (a seller's payTo, the funded
// payer).
func key(name string) *ecdsa.PrivateKey {
	k, err := crypto.ToECDSA(crypto.Keccak256([]byte("x402d demo seller " + name)))
	if err != nil {
		panic(err) // a Keccak-256 digest is a valid key but with odds of 2^-128
	}
	return k
}

// address returns k's address.
func address(k *ecdsa.PrivateKey) common.Address { return crypto.PubkeyToAddress(k.PublicKey) }

// origin returns host's origin.
func origin(host string) string { return "http://" + host + ":" + port }

// option returns the payment option asking amount for payTo in the
// devchain's USDC.
func option(amount string, payTo common.Address) map[string]any {
	return map[string]any{"scheme": "exact", "network": "eip155:8453", "amount": amount, "asset": devchain.USDC.Hex(),
		"payTo": payTo.Hex(), "maxTimeoutSeconds": 60, "extra": map[string]string{"name": "USD Coin", "version": "2"}}
}

// quote returns a PAYMENT-REQUIRED header value asking amount for payTo
// for the resource at url.
func quote(url, desc, amount string, payTo common.Address) (string, error) {
	b, err := json.Marshal(map[string]any{"x402Version": 2, "resource": map[string]any{"url": url, "description": desc},
		"accepts": []any{option(amount, payTo)}})
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

func main() {
	rpcURL := flag.String("rpc", "http://127.0.0.1:18545", "pay: the devchain's JSON-RPC")
	service := flag.String("service", "", "pay: the service's URL, to make paid calls to it too")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch flag.Arg(0) {
	case "serve":
		err = serve(ctx)
	case "pay":
		err = pay(ctx, *rpcURL, *service)
	default:
		fmt.Fprintln(os.Stderr, "usage: sellers serve | sellers [-rpc URL] [-service URL] pay")
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "sellers:", err)
		os.Exit(1)
	}
}

// serve serves the listing and the sellers until ctx ends.
func serve(ctx context.Context) error {
	now := time.Now().UTC()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var items []map[string]any
	servers := []func() error{}
	for _, s := range demoSellers() {
		for _, r := range s.resources {
			it := map[string]any{"resource": origin(s.host) + r.path, "type": "http", "x402Version": 2,
				"accepts": []any{option(r.price, address(key(s.host)))}, "metadata": map[string]any{"description": r.desc},
				"lastUpdated": now.Add(-time.Hour).Format(time.RFC3339)}
			if r.calls > 0 {
				it["quality"] = map[string]any{"l30DaysTotalCalls": r.calls, "l30DaysUniquePayers": r.payers,
					"lastCalledAt": now.Add(-10 * time.Minute).Format(time.RFC3339)}
			}
			items = append(items, it)
		}
		if s.served {
			h, err := sellerHandler(s)
			if err != nil {
				return err
			}
			servers = append(servers, func() error { return listen(ctx, s.host+":"+port, h) })
		}
	}
	servers = append(servers, func() error {
		return listen(ctx, listingAddr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
			if limit <= 0 {
				limit = 100
			}
			offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
			offset = min(max(offset, 0), len(items))
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"x402Version": 2, "items": items[offset:min(offset+limit, len(items))],
				"pagination": map[string]int{"limit": limit, "offset": offset, "total": len(items)}})
		}))
	})
	// The first to stop (an address taken, or ctx ended) stops them all.
	errs := make(chan error, len(servers))
	for _, f := range servers {
		go func() { errs <- f() }()
	}
	fmt.Printf("listing at http://%s/list\n", listingAddr)
	err := <-errs
	cancel()
	for range len(servers) - 1 {
		<-errs
	}
	return err
}

// listen serves h on addr until ctx ends.
func listen(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", addr, err)
	}
	return ctx.Err()
}

// sellerHandler answers s's discovery document and a 402 with its quote
// for each of its resources.
func sellerHandler(s seller) (http.Handler, error) {
	var urls []string
	quotes := map[string]string{}
	payTo := address(key(s.host))
	for _, r := range s.resources {
		urls = append(urls, origin(s.host)+r.path)
		q, err := quote(origin(s.host)+r.path, r.desc, r.price, payTo)
		if err != nil {
			return nil, err
		}
		quotes[r.path] = q
	}
	doc := map[string]any{"version": 1, "resources": urls}
	if s.proof {
		// x402scan's ownership proof: the origin signed by the payTo's key
		// (EIP-191).
		sig, err := crypto.Sign(accounts.TextHash([]byte(origin(s.host))), key(s.host))
		if err != nil {
			return nil, fmt.Errorf("sign %s: %w", s.host, err)
		}
		sig[crypto.RecoveryIDOffset] += 27
		doc["ownershipProofs"] = []string{"0x" + hex.EncodeToString(sig)}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/.well-known/x402" {
			_ = json.NewEncoder(w).Encode(doc)
			return
		}
		q, ok := quotes[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set(x402.HeaderPaymentRequired, q)
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write([]byte("{}"))
	}), nil
}

// usdcABI is what pay calls of USDC.
const usdcABI = `[{"type":"function","name":"transferWithAuthorization","inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},{"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},{"name":"signature","type":"bytes"}],"outputs":[]},
{"type":"function","name":"transfer","inputs":[{"name":"to","type":"address"},{"name":"value","type":"uint256"}],"outputs":[{"name":"","type":"bool"}]}]`

// chain sends transactions to the devchain.
type chain struct {
	client *ethclient.Client
	usdc   abi.ABI
	id     *big.Int
}

// send sends value and data to `to` from k's account and waits for its
// receipt.
func (ch *chain) send(ctx context.Context, k *ecdsa.PrivateKey, to common.Address, value *big.Int, data []byte) error {
	nonce, err := ch.client.PendingNonceAt(ctx, address(k))
	if err != nil {
		return fmt.Errorf("nonce: %w", err)
	}
	head, err := ch.client.HeaderByNumber(ctx, nil)
	if err != nil {
		return fmt.Errorf("head: %w", err)
	}
	tip := big.NewInt(1e9)
	tx, err := types.SignNewTx(k, types.LatestSignerForChainID(ch.id), &types.DynamicFeeTx{ChainID: ch.id, Nonce: nonce,
		GasTipCap: tip, GasFeeCap: new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip),
		Gas: 200_000, To: &to, Value: value, Data: data})
	if err != nil {
		return err
	}
	if err := ch.client.SendTransaction(ctx, tx); err != nil {
		return fmt.Errorf("send %s: %w", tx.Hash(), err)
	}
	for {
		r, err := ch.client.TransactionReceipt(ctx, tx.Hash())
		if err == nil {
			if r.Status != types.ReceiptStatusSuccessful {
				return fmt.Errorf("%s reverted", tx.Hash())
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// settle has payer sign the payment of header (a PAYMENT-REQUIRED value)
// as an x402 client does, and the facilitator account settle it.
func (ch *chain) settle(ctx context.Context, payer *ecdsa.PrivateKey, header string) error {
	pc, err := payclient.New(&payclient.Config{Key: payer})
	if err != nil {
		return err
	}
	signature, err := pc.Pay(ctx, header)
	if err != nil {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return fmt.Errorf("payment: %w", err)
	}
	var p x402.PaymentPayload
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("payment: %w", err)
	}
	var e x402.ExactEVMPayload
	if err := json.Unmarshal(p.Payload, &e); err != nil {
		return fmt.Errorf("payment: %w", err)
	}
	a := e.Authorization
	var nums [3]*big.Int
	for i, v := range []string{a.Value, a.ValidAfter, a.ValidBefore} {
		n, ok := new(big.Int).SetString(v, 10)
		if !ok {
			return fmt.Errorf("payment: %q is not a number", v)
		}
		nums[i] = n
	}
	data, err := ch.usdc.Pack("transferWithAuthorization", common.HexToAddress(a.From), common.HexToAddress(a.To),
		nums[0], nums[1], nums[2], common.HexToHash(a.Nonce), common.FromHex(e.Signature))
	if err != nil {
		return err
	}
	return ch.send(ctx, devKey(facilitatorAccount), devchain.USDC, nil, data)
}

// devKey returns the devchain's account i's key.
func devKey(i uint32) *ecdsa.PrivateKey {
	k, err := devchain.DeriveKey(devchain.Mnemonic, i)
	if err != nil {
		panic(err) // the standard mnemonic derives
	}
	return k
}

// pay makes the payments: each listed call, a payer 127.0.0.4 funds paying
// it, and, with service set, paid calls to the service.
func pay(ctx context.Context, rpcURL, service string) error {
	client, err := ethclient.DialContext(ctx, rpcURL)
	if err != nil {
		return fmt.Errorf("dial %s: %w", rpcURL, err)
	}
	defer client.Close()
	usdc, err := abi.JSON(strings.NewReader(usdcABI))
	if err != nil {
		return err
	}
	ch := &chain{client: client, usdc: usdc, id: big.NewInt(8453)}
	sellers := demoSellers()
	for n, s := range sellers {
		payTo := address(key(s.host))
		for _, r := range s.resources {
			q, err := quote(origin(s.host)+r.path, r.desc, r.price, payTo)
			if err != nil {
				return err
			}
			// Its calls spread over its payers: devchain accounts from
			// n on.
			for i := range r.calls {
				if err := ch.settle(ctx, devKey(uint32(n+i%max(r.payers, 1))), q); err != nil {
					return fmt.Errorf("pay %s%s: %w", s.host, r.path, err)
				}
			}
			fmt.Printf("%s%s: %d settlements\n", s.host, r.path, r.calls)
		}
	}
	// 127.0.0.4 funds a payer (its own EIP-3009 transfer), who pays it
	// back in plain transfers.
	seller, payer := key("127.0.0.4"), key("funded payer of 127.0.0.4")
	fund, err := quote("funding", "", "50000", address(payer))
	if err != nil {
		return err
	}
	if err := ch.settle(ctx, seller, fund); err != nil {
		return fmt.Errorf("fund a payer: %w", err)
	}
	if err := ch.send(ctx, devKey(fundingAccount), address(payer), big.NewInt(1e17), nil); err != nil {
		return fmt.Errorf("gas for the funded payer: %w", err)
	}
	for range 2 {
		data, err := usdc.Pack("transfer", address(seller), big.NewInt(20000))
		if err != nil {
			return err
		}
		if err := ch.send(ctx, payer, devchain.USDC, nil, data); err != nil {
			return fmt.Errorf("the funded payer pays: %w", err)
		}
	}
	fmt.Println("127.0.0.4: funded a payer, who paid it twice")
	if service == "" {
		return nil
	}
	for i := range 6 {
		pc, err := payclient.New(&payclient.Config{Key: devKey(uint32(3 + i%3))})
		if err != nil {
			return err
		}
		res, err := pc.Do(ctx, &payclient.Request{URL: service + "/api/x402/diff",
			Body: []byte(`{"a":"one\ntwo\nthree\n","b":"one\n2\nthree\n"}`)})
		if err != nil {
			return fmt.Errorf("paid call: %w", err)
		}
		if res.Status != http.StatusOK {
			return fmt.Errorf("paid call: %d %s", res.Status, res.Body)
		}
	}
	fmt.Println(service + ": 6 paid calls")
	return nil
}
