package evm_test

import (
	"context"
	"testing"
)

// BenchmarkVerify verifies payments on the in-process devchain: signature
// recovery plus one eth_call simulation.
func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	t := &testing.T{}
	v := newVerifier(t)
	req := requirement()
	key := chain.Account(7).Key
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			pp := newPayment(t, key, req).payload(t, req)
			if _, err := v.Verify(ctx, req, pp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSettle settles payments one after the other: sign, verify, send,
// mine, receipt: each settlement is a block of its own.
func BenchmarkSettle(b *testing.B) {
	ctx := context.Background()
	t := &testing.T{}
	v := newVerifier(t)
	r := newRelayer(b)
	req := requirement()
	key := chain.Account(7).Key
	for b.Loop() {
		p, err := v.Verify(ctx, req, newPayment(t, key, req).payload(t, req))
		if err != nil {
			b.Fatal(err)
		}
		resp, err := r.Settle(ctx, p)
		if err != nil || !resp.Success {
			b.Fatal(err, resp)
		}
	}
}
