package store

import (
	"context"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/x402d/x402d/x402/evm"
)

// RelayerNonces is the relayer's NonceStore in Postgres (tables
// relayer_nonces and relayer_txs): every worker process sending with one
// relayer key shares it, so that no two believe they own the same nonce,
// and any of them can send again, or fill, a nonce whose process died.
type RelayerNonces struct {
	// DB is the pool the statements run on.
	DB DBTX
}

var _ evm.NonceStore = RelayerNonces{}

// AllocateNonce hands out the next nonce of address on network, at least
// floor, in one statement: two processes never get the same one.
func (s RelayerNonces) AllocateNonce(ctx context.Context, network string, address common.Address, floor uint64, owner string) (uint64, error) {
	var nonce int64
	err := s.DB.QueryRow(ctx, `
		WITH n AS (
			INSERT INTO relayer_nonces AS r (network, address, next_nonce) VALUES ($1, $2, $3 + 1)
			ON CONFLICT (network, address) DO UPDATE SET next_nonce = GREATEST(r.next_nonce, $3) + 1
			RETURNING next_nonce - 1 AS nonce
		)
		INSERT INTO relayer_txs (network, address, nonce, owner)
		SELECT $1, $2, nonce, $4 FROM n
		ON CONFLICT (network, address, nonce) DO UPDATE SET owner = EXCLUDED.owner, raw = NULL, updated_at = now()
		RETURNING nonce`, network, address.Hex(), int64(floor), owner).Scan(&nonce)
	if err != nil {
		return 0, fmt.Errorf("allocate nonce of %s on %s: %w", address.Hex(), network, interpretError(err))
	}
	return uint64(nonce), nil
}

// RecordNonce records raw as the transaction of nonce, sent by owner.
func (s RelayerNonces) RecordNonce(ctx context.Context, network string, address common.Address, nonce uint64, owner string, raw []byte) error {
	_, err := s.DB.Exec(ctx, `
		INSERT INTO relayer_txs (network, address, nonce, owner, raw) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (network, address, nonce) DO UPDATE SET owner = EXCLUDED.owner, raw = EXCLUDED.raw, updated_at = now()`,
		network, address.Hex(), int64(nonce), owner, raw)
	if err != nil {
		return fmt.Errorf("record nonce %d of %s on %s: %w", nonce, address.Hex(), network, interpretError(err))
	}
	return nil
}

// TouchNonces records that owner still awaits nonces.
func (s RelayerNonces) TouchNonces(ctx context.Context, network string, address common.Address, owner string, nonces []uint64) error {
	ns := make([]int64, len(nonces))
	for i, n := range nonces {
		ns[i] = int64(n)
	}
	_, err := s.DB.Exec(ctx, `UPDATE relayer_txs SET owner = $3, updated_at = now()
		WHERE network = $1 AND address = $2 AND nonce = ANY($4)`, network, address.Hex(), owner, ns)
	if err != nil {
		return fmt.Errorf("touch nonces of %s on %s: %w", address.Hex(), network, interpretError(err))
	}
	return nil
}

// OutstandingNonces deletes the nonces below final and returns those from
// floor on, lowest first.
func (s RelayerNonces) OutstandingNonces(ctx context.Context, network string, address common.Address, final, floor uint64) ([]evm.OutstandingNonce, error) {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM relayer_txs WHERE network = $1 AND address = $2 AND nonce < $3`, network, address.Hex(), int64(final))
	b.Queue(`SELECT nonce, owner, raw, updated_at FROM relayer_txs WHERE network = $1 AND address = $2 AND nonce >= $3 ORDER BY nonce`,
		network, address.Hex(), int64(floor))
	res := s.DB.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return nil, fmt.Errorf("forget final nonces of %s on %s: %w", address.Hex(), network, interpretError(err))
	}
	rows, err := res.Query()
	if err != nil {
		return nil, fmt.Errorf("outstanding nonces of %s on %s: %w", address.Hex(), network, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (evm.OutstandingNonce, error) {
		var o evm.OutstandingNonce
		var nonce int64
		var at time.Time
		err := row.Scan(&nonce, &o.Owner, &o.Raw, &at)
		o.Nonce, o.UpdatedAt = uint64(nonce), at
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("outstanding nonces of %s on %s: %w", address.Hex(), network, interpretError(err))
	}
	return out, nil
}

// PayerCodeRefusals is the relayer's and the verifier's
// evm.PayerCodeRefusals in Postgres (table payer_code_refusals): a wallet
// refused by the settlement of one worker is refused by every api's
// verification and every worker's settlements.
type PayerCodeRefusals struct {
	// DB is the pool the statements run on.
	DB DBTX
}

var _ evm.PayerCodeRefusals = PayerCodeRefusals{}

// RefusePayerCode refuses addrs on network until until (a refusal already
// longer is kept), and deletes the refusals that have ended: the table
// holds what one refusal period brought.
func (s PayerCodeRefusals) RefusePayerCode(ctx context.Context, network string, addrs []common.Address, until time.Time) error {
	hexes := make([]string, len(addrs))
	for i, a := range addrs {
		hexes[i] = a.Hex()
	}
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM payer_code_refusals WHERE refused_until <= now()`)
	b.Queue(`INSERT INTO payer_code_refusals AS r (network, address, refused_until) SELECT $1, a, $3 FROM unnest($2::text[]) AS a
		ON CONFLICT (network, address) DO UPDATE SET refused_until = GREATEST(r.refused_until, EXCLUDED.refused_until)`,
		network, hexes, until)
	if err := s.DB.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("refuse payer code %v on %s: %w", hexes, network, interpretError(err))
	}
	return nil
}

// PayerCodeRefused returns the addresses refused on network at now, each
// with the end of its refusal.
func (s PayerCodeRefusals) PayerCodeRefused(ctx context.Context, network string, now time.Time) (map[common.Address]time.Time, error) {
	rows, err := s.DB.Query(ctx, `SELECT address, refused_until FROM payer_code_refusals WHERE network = $1 AND refused_until > $2`, network, now)
	if err != nil {
		return nil, fmt.Errorf("read payer code refusals on %s: %w", network, interpretError(err))
	}
	out := map[common.Address]time.Time{}
	var (
		addr  string
		until time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&addr, &until}, func() error {
		out[common.HexToAddress(addr)] = until
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read payer code refusals on %s: %w", network, interpretError(err))
	}
	return out, nil
}
