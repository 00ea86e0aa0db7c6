package x402

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeScheme is a SchemeVerifier that records the requirement it was asked
// to check against and accepts the payment, or refuses with refuse.
type fakeScheme struct {
	got     *Requirements
	payload *PaymentPayload
	refuse  error
}

func (f *fakeScheme) Verify(_ context.Context, req *Requirements, p *PaymentPayload) (*Payment, error) {
	f.got, f.payload = req, p
	if f.refuse != nil {
		return nil, f.refuse
	}
	var id struct{ Payer, Nonce string }
	_ = json.Unmarshal(p.Payload, &id)
	return &Payment{Network: req.Network, Payer: id.Payer, Nonce: id.Nonce, Amount: req.Amount, Asset: req.Asset, Payload: p.Payload}, nil
}

func fakeIdentify(p *PaymentPayload) (string, string, error) {
	var id struct{ Payer, Nonce string }
	if err := json.Unmarshal(p.Payload, &id); err != nil || id.Payer == "" {
		return "", "", &Refusal{Reason: "invalid_fake_payload", Message: "no payer"}
	}
	return id.Payer, id.Nonce, nil
}

func TestSeller(t *testing.T) {
	t.Parallel()
	cat, err := NewCatalog(testOffers, &CatalogConfig{PayToEVM: payTo, EVMNetworks: []string{"eip155:8453", "eip155:137"},
		Solana: &SolanaOption{PayTo: solanaPayTo, FeePayer: feePayer}})
	require.NoError(t, err)
	evm, svm := &fakeScheme{}, &fakeScheme{}
	seller := NewSeller(cat, map[string]Scheme{
		"eip155": {Verifier: evm, Identify: fakeIdentify},
		"solana": {Verifier: svm, Identify: fakeIdentify},
	})
	q, err := seller.Quote("diff")
	require.NoError(t, err)
	var quoted PaymentRequired
	require.NoError(t, DecodeHeader(q.PaymentRequired, &quoted))
	base, polygon, solana := quoted.Accepts[0], quoted.Accepts[1], quoted.Accepts[2]

	header := func(version int, accepted Requirements) string {
		h, err := EncodeHeader(PaymentPayload{X402Version: version, Accepted: accepted, Payload: json.RawMessage(`{"payer":"0xP","nonce":"0x1"}`)})
		require.NoError(t, err)
		return h
	}
	with := func(r Requirements, f func(*Requirements)) Requirements { f(&r); return r }

	t.Run("Refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name, header, reason string
		}{
			{"NotBase64", "!!!", ReasonInvalidPayload},
			{"NotJSON", base64.StdEncoding.EncodeToString([]byte("nope")), ReasonInvalidPayload},
			{"URLSafeAlphabet", "eyJ4NDAyVmVyc2lvbiI6Mn0-_", ReasonInvalidPayload},
			{"Empty", "", ReasonInvalidPayload},
			{"Version1", header(1, base), ReasonInvalidVersion},
			{"NoVersion", base64.StdEncoding.EncodeToString([]byte(`{"accepted":{}}`)), ReasonInvalidVersion},
			{"NoAccepted", base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"payload":{}}`)), ReasonNoMatch},
			{"OtherNetwork", header(2, with(base, func(r *Requirements) { r.Network = "eip155:1" })), ReasonNoMatch},
			{"LegacyNetworkName", header(2, with(base, func(r *Requirements) { r.Network = "base" })), ReasonNoMatch},
			{"OtherScheme", header(2, with(base, func(r *Requirements) { r.Scheme = "upto" })), ReasonNoMatch},
			{"LowerAmount", header(2, with(base, func(r *Requirements) { r.Amount = "1" })), ReasonNoMatch},
			{"OtherAsset", header(2, with(base, func(r *Requirements) { r.Asset = polygon.Asset })), ReasonNoMatch},
			{"OtherPayTo", header(2, with(base, func(r *Requirements) { r.PayTo = "0x000000000000000000000000000000000000bEEF" })), ReasonNoMatch},
			{"SolanaPayToCase", header(2, with(solana, func(r *Requirements) { r.PayTo = strings.ToLower(r.PayTo) })), ReasonNoMatch},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := seller.Verify(context.Background(), "diff", tc.header)
				var r *Refusal
				require.True(t, errors.As(err, &r), "%v", err)
				require.Equal(t, tc.reason, r.Reason)
				require.NotEmpty(t, r.Message)
				_, err = seller.Identify("diff", tc.header)
				require.True(t, errors.As(err, &r), "Identify refuses what cannot match: %v", err)
			})
		}
	})

	t.Run("OwnRequirement", func(t *testing.T) {
		// The scheme checks against the seller's own requirement: the
		// very entry of the catalogue, whatever else accepted carries.
		for _, tc := range []struct {
			accepted Requirements
			scheme   *fakeScheme
		}{
			{base, evm},
			{with(polygon, func(r *Requirements) {
				r.PayTo, r.Asset = strings.ToLower(r.PayTo), strings.ToUpper(r.Asset[2:]) // addresses compare case-insensitively on EVM
				r.Asset = "0x" + r.Asset
				r.Extra = json.RawMessage(`{"name":"X","version":"9","more":1}`)
				r.MaxTimeoutSeconds = 5
			}), evm},
			{solana, svm},
		} {
			h := header(2, tc.accepted)
			p, err := seller.Verify(context.Background(), "diff", h)
			require.NoError(t, err)
			own, ok := cat.Requirement("diff", "exact", tc.accepted.Network)
			require.True(t, ok)
			require.Same(t, own, tc.scheme.got)
			require.Equal(t, tc.accepted.Network, p.Network)

			id, err := seller.Identify("diff", h)
			require.NoError(t, err)
			require.Equal(t, p.Key(), id.Key())
			require.Equal(t, tc.accepted.Network+"/0xP/0x1", id.Key())
			require.Equal(t, own.Amount, id.Amount)
			var echoed PaymentPayload
			require.NoError(t, json.Unmarshal(id.Payload, &echoed))
			require.Equal(t, tc.accepted.Network, echoed.Accepted.Network)
		}
	})

	t.Run("SchemeRefusalPassesThrough", func(t *testing.T) {
		s := NewSeller(cat, map[string]Scheme{"eip155": {Verifier: &fakeScheme{refuse: &Refusal{Reason: "invalid_exact_evm_signature", Message: "m"}}}})
		_, err := s.Verify(context.Background(), "diff", header(2, base))
		var r *Refusal
		require.True(t, errors.As(err, &r))
		require.Equal(t, "invalid_exact_evm_signature", r.Reason)
		_, err = s.Verify(context.Background(), "diff", header(2, solana))
		require.True(t, errors.As(err, &r))
		require.Equal(t, ReasonNoMatch, r.Reason, "a network without a scheme verifier")
		_, err = s.Identify("diff", header(2, base))
		require.True(t, errors.As(err, &r), "a scheme without Identify")
	})

	t.Run("NotSellable", func(t *testing.T) {
		_, err := seller.Verify(context.Background(), "brief", header(2, base))
		require.ErrorIs(t, err, ErrNotSellable)
		_, err = seller.Identify("brief", header(2, base))
		require.ErrorIs(t, err, ErrNotSellable)
		_, err = seller.Verify(context.Background(), "nope", header(2, base))
		require.Error(t, err)
	})
}
