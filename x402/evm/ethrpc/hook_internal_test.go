package ethrpc

import (
	"context"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"
)

// TestWithTimeout_EveryMethod calls every method of Backend through
// WithTimeout in front of a node that never answers: each returns an error
// within its timeout, none escapes it (the hook runs around every method).
func TestWithTimeout_EveryMethod(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request read whole, the server notices the client leave.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	e, err := New(context.Background(), &Config{Network: "eip155:8453", URLs: []string{srv.URL}, CallTimeout: time.Hour})
	require.NoError(t, err)
	t.Cleanup(e.Stop)
	// Cancelled once the test is over, first: a call that escaped the
	// timeout ends then.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := reflect.ValueOf(WithTimeout(e, 50*time.Millisecond))
	tx := types.NewTx(&types.DynamicFeeTx{ChainID: big.NewInt(8453)})
	args := map[reflect.Type]reflect.Value{
		reflect.TypeFor[context.Context]():       reflect.ValueOf(ctx),
		reflect.TypeFor[*types.Transaction]():    reflect.ValueOf(tx),
		reflect.TypeFor[rpc.BlockNumberOrHash](): reflect.ValueOf(rpc.BlockNumberOrHashWithNumber(1)),
	}
	backend := reflect.TypeFor[Backend]()
	for i := range backend.NumMethod() {
		m := backend.Method(i)
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			var in []reflect.Value
			for j := range m.Type.NumIn() {
				typ := m.Type.In(j)
				if v, ok := args[typ]; ok {
					in = append(in, v)
				} else {
					in = append(in, reflect.Zero(typ))
				}
			}
			done := make(chan []reflect.Value, 1)
			go func() { done <- b.MethodByName(m.Name).Call(in) }()
			select {
			case out := <-done:
				require.False(t, out[len(out)-1].IsNil(), "%s answered without a node", m.Name)
			case <-time.After(2 * time.Second):
				t.Fatalf("%s escapes the timeout", m.Name)
			}
		})
	}
}
