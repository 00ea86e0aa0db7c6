package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/big"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// A paid call reserves its payment against its payer's balance when it is
// admitted (Reserve): the payments of one payer and asset on one network
// that are in flight (verified, not yet settled or refused) never sum to
// more than the chain showed the payer to hold, so that a wallet holding
// one price cannot have the work of many calls run, of which at most one
// could be paid.
//
// A reservation is a row of the reservations table written in the
// admission's transaction; a trigger on its call's state (migration 019)
// ends it in the transaction that ends the call: deleted when the call ends
// unpaid, stamped ended_at when it is paid, so that a payer's payments in
// flight are summed from its own rows with no join. No crash can leave one
// counting past its authorization's validBefore, after which the payment
// can no longer move money. Admissions of one payer, in any process, take a transaction-level
// advisory lock of the payer first, so that each sees the reservations the
// others committed.

// Reservation is a paid call's claim on its payer's balance.
type Reservation struct {
	// CallID is the call admitted with the payment.
	CallID string
	// Network, Asset and Payer name the balance: the CAIP-2 network, the
	// token and the paying address, as verification spells them.
	Network, Asset, Payer string
	// Amount is the payment, in the asset's atomic units.
	Amount *big.Int
	// ValidBefore is when the payment stops being settleable: the
	// reservation counts until then at most.
	ValidBefore time.Time
	// Balance is what the chain showed the payer to hold at Read; nil
	// when it was not read, verification having shown only that it covers
	// Amount (its transfer simulated).
	Balance *big.Int
	// Read is when Balance was read, or the payment verified: the payer's
	// calls paid since may have been paid from it, and still count.
	Read time.Time
	// Cached is set when Balance was read for another payment of the
	// payer: the caller reads it again rather than refuse the payment
	// for it (Reserve does not read it).
	Cached bool
}

// ReserveOutcome is what Reserve made of a Reservation.
type ReserveOutcome int

const (
	// ReserveHeld: the reservation is written; the call may be admitted.
	ReserveHeld ReserveOutcome = iota
	// ReserveShort: the balance does not cover the payment on top of the
	// payer's payments in flight. Nothing is written.
	ReserveShort
	// ReserveNeedsBalance: other payments of the payer are in flight and
	// the reservation has no Balance: read it, and reserve again. Nothing
	// is written.
	ReserveNeedsBalance
)

// Reserved is the outcome of one Reservation.
type Reserved struct {
	Outcome ReserveOutcome
	// InFlight is the sum of the payer's payments in flight it was
	// weighed against, those reserved before it in the same call
	// included.
	InFlight *big.Int
}

// reserveLockClass is the first key of the advisory locks Reserve takes,
// ("x402" in ASCII): the second is a hash of the payer, its asset and its
// network. The two-key locks are apart from River's one-key ones.
const reserveLockClass = 0x78343032

// Limits of the reservations.
const (
	// ReserveFresh is how recent a reservation's Read must be: one read
	// earlier (a verification that took longer) is weighed again with a
	// balance read now (ReserveNeedsBalance).
	ReserveFresh = 5 * time.Second
	// reserveKeepEnded is how long the row of a reservation whose call
	// was paid is kept: long enough for every fresh Read (ReserveFresh)
	// to see a call paid after it, with a margin for the clocks of the
	// api (Read) and the database (ended_at). The admissions of its payer
	// delete it then, so that a payer's rows are its calls in flight and
	// those paid moments ago, however many it makes.
	reserveKeepEnded = ReserveFresh + 2*time.Second
	// reserveMaxAge bounds how long a reservation can count, whatever
	// its payment's validBefore (a payer picks it): the rows of payers
	// who never come back are deleted then at the latest.
	reserveMaxAge = 24 * time.Hour
	// reserveSweep is how many rows of reservations that count no more
	// (their authorization expired, or reserveMaxAge passed) one Reserve
	// deletes beyond twice those it writes.
	reserveSweep = 16
)

// Reserve weighs each of rs, in order, against its payer's balance within
// tx, the admission's transaction, at now, and writes those held. A
// reservation is held when its payer's payments in flight, with it, sum to
// no more than its Balance; without a Balance, only when none is in flight
// (verification showed the balance covers one payment). Payments in flight
// are those of the same payer, asset and network whose call is queued,
// running or settling, or was paid after the reservation's Read, and whose
// authorization has not expired; those of rs held before it count too. A
// reservation whose Read is older than ReserveFresh is not weighed
// (ReserveNeedsBalance).
//
// Reserve first locks each payer named in rs for the rest of tx (in one
// order, so that two transactions cannot deadlock), then reads and writes:
// admissions of one payer in any process are serialised. It also deletes
// the rows of these payers' calls that ended more than a few seconds ago,
// and a few rows that count no more. It takes one round trip: the rows
// of rs are written with the reads, before they are weighed, and those not
// held deleted again (a second round trip, only then).
func Reserve(ctx context.Context, tx pgx.Tx, now time.Time, rs []Reservation) ([]Reserved, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	n := len(rs)
	// The payers of rs, each read once (reserveScan) whatever the number
	// of its reservations.
	type key struct{ network, asset, payer string }
	keyOf := make([]int, n)
	index := map[key]int{}
	var networks, assets, payers []string
	var since []time.Time
	locks := make([]int32, 0, n)
	// The reservations not weighed (their Read is stale) are not written.
	stale := now.Add(-ReserveFresh)
	var calls, nets, toks, pays, amounts []string
	var befores []time.Time
	for i := range rs {
		r := &rs[i]
		k := key{r.Network, r.Asset, r.Payer}
		j, ok := index[k]
		if !ok {
			j = len(networks)
			index[k] = j
			networks, assets, payers, since = append(networks, r.Network), append(assets, r.Asset), append(payers, r.Payer), append(since, r.Read)
			locks = append(locks, reserveLock(r))
		} else if r.Read.Before(since[j]) {
			since[j] = r.Read
		}
		keyOf[i] = j
		if r.Read.Before(stale) {
			continue
		}
		calls, nets, toks, pays = append(calls, r.CallID), append(nets, r.Network), append(toks, r.Asset), append(pays, r.Payer)
		amounts, befores = append(amounts, r.Amount.String()), append(befores, minTime(r.ValidBefore, now.Add(reserveMaxAge)))
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	b := &pgx.Batch{}
	b.Queue("SELECT pg_advisory_xact_lock($1::int, k) FROM unnest($2::int[]) WITH ORDINALITY AS u(k, i) ORDER BY i", int32(reserveLockClass), locks)
	// The rows of calls paid a while ago count for no Read that is fresh:
	// deleted, they are not read again by the payer's next admissions.
	b.Queue(`DELETE FROM reservations r USING unnest($1::text[], $2::text[], $3::text[]) AS u(network, asset, payer)
		WHERE r.payer = u.payer AND r.asset = u.asset AND r.network = u.network AND r.ended_at < $4`,
		networks, assets, payers, now.Add(-reserveKeepEnded))
	// Each payer's payments in flight, as of the earliest Read of its
	// reservations: the sum of the rows of calls in flight (ended_at
	// null), and those of calls paid since, summed by when they were
	// paid (the calls paid in one transaction share it), each
	// reservation counting those paid after its own Read.
	sums := b.Queue(`SELECT u.i, r.ended_at, sum(r.amount)::text
		FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) WITH ORDINALITY AS u(network, asset, payer, since, i)
		JOIN reservations r ON r.payer = u.payer AND r.asset = u.asset AND r.network = u.network AND r.valid_before > $5
			AND (r.ended_at IS NULL OR r.ended_at > u.since)
		GROUP BY u.i, r.ended_at`,
		networks, assets, payers, since, now)
	type paid struct {
		at  time.Time
		sum *big.Int
	}
	inFlight := make([]*big.Int, len(networks))
	ended := make([][]paid, len(networks))
	for j := range inFlight {
		inFlight[j] = new(big.Int)
	}
	sums.Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var j int
			var at *time.Time
			var sum string
			if err := rows.Scan(&j, &at, &sum); err != nil {
				return err
			}
			v, ok := new(big.Int).SetString(sum, 10)
			if !ok || j < 1 || j > len(networks) {
				return fmt.Errorf("in flight %q of payer %d", sum, j)
			}
			if at == nil {
				inFlight[j-1].Add(inFlight[j-1], v)
			} else {
				ended[j-1] = append(ended[j-1], paid{at: *at, sum: v})
			}
		}
		return rows.Err()
	})
	// Written before they are weighed: the sums above do not count them.
	if len(calls) > 0 {
		b.Queue(`INSERT INTO reservations (call_id, network, asset, payer, amount, valid_before)
			SELECT c, n, a, p, m::numeric, v FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[]) AS u(c, n, a, p, m, v)`,
			calls, nets, toks, pays, amounts, befores)
	}
	b.Queue(`DELETE FROM reservations WHERE call_id IN (
		SELECT call_id FROM reservations WHERE valid_before <= $1 ORDER BY valid_before LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		now, 2*len(calls)+reserveSweep)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("reserve %d payments: %w", n, err)
	}

	// The reservations held earlier in rs count for the later ones of
	// their payer.
	held := make([]*big.Int, len(networks))
	out := make([]Reserved, n)
	var unheld []string
	for i, r := range rs {
		j := keyOf[i]
		// A Read is compared as the database has it, to the microsecond.
		read := r.Read.Truncate(time.Microsecond)
		sum := new(big.Int).Set(inFlight[j])
		for _, p := range ended[j] {
			if p.at.After(read) {
				sum.Add(sum, p.sum)
			}
		}
		if held[j] != nil {
			sum.Add(sum, held[j])
		}
		out[i].InFlight = sum
		switch after := new(big.Int).Add(sum, r.Amount); {
		case r.Read.Before(stale):
			out[i].Outcome = ReserveNeedsBalance
			continue
		case r.Balance == nil && sum.Sign() > 0:
			out[i].Outcome = ReserveNeedsBalance
		case r.Balance != nil && after.Cmp(r.Balance) > 0:
			out[i].Outcome = ReserveShort
		default:
			if held[j] == nil {
				held[j] = new(big.Int)
			}
			held[j].Add(held[j], r.Amount)
			continue
		}
		unheld = append(unheld, r.CallID)
	}
	if len(unheld) > 0 {
		if _, err := tx.Exec(ctx, "DELETE FROM reservations WHERE call_id = ANY($1)", unheld); err != nil {
			return nil, fmt.Errorf("delete %d reservations not held: %w", len(unheld), err)
		}
	}
	return out, nil
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// reserveLock is the second key of the advisory lock of r's payer.
func reserveLock(r *Reservation) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(r.Network + "\x00" + r.Asset + "\x00" + r.Payer))
	return int32(h.Sum32())
}
