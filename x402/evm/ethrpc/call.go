package ethrpc

import (
	"context"
	"encoding/json"

	"github.com/ethereum/go-ethereum"
)

// CallAt makes the JSON-RPC call method(args...) and decodes its answer
// into result, for the methods this client has no typed read of (such as a
// block's transactions or receipts as JSON, whatever their types): on an
// endpoint whose head has block (0: one not behind), the next tried when
// one fails, as the typed reads are. An answer of null is
// ethereum.NotFound.
func (e *Endpoints) CallAt(ctx context.Context, block uint64, result any, method string, args ...any) error {
	return e.do(ctx, block, func(ctx context.Context, ep *endpoint) error {
		var raw json.RawMessage
		if err := ep.rpc.CallContext(ctx, &raw, method, args...); err != nil {
			return err
		}
		if len(raw) == 0 || string(raw) == "null" {
			return ethereum.NotFound
		}
		return json.Unmarshal(raw, result)
	})
}
