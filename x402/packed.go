package x402

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The first byte of a packed ledger payment: packedVersion is form 2,
// which packPayment writes; unpackPayment also reads packedVersionWhole,
// form 1, which keeps the option's asset and extra whole (written before
// migration 017, and in ledger form 1 since: store.PaidCall.Form1).
const (
	packedVersion      = 2
	packedVersionWhole = 1
)

// packedVersionRaw is the first byte of the packed form of a payment of
// another scheme than exact (packRaw): a batch-settlement payment's.
const packedVersionRaw = 3

// packRaw returns the packed form of a ledger payment whose payload is of
// another scheme than exact (rawPackable): its payload's JSON as it is,
// its other fields as packPayment packs them. It gives back exactly what
// it was given, with nothing to encode or parse (unpackPayment).
func packRaw(l *ledgerPayment) []byte {
	b := make([]byte, 0, len(l.Payload)+128)
	b = append(b, packedVersionRaw)
	b = appendBytes(b, l.Payload)
	b = appendTime(b, l.VerifiedAt)
	for _, s := range []string{l.Network, l.Payer, l.Nonce, l.Amount, l.Asset} {
		b = appendString(b, s)
	}
	return appendTime(b, l.ValidBefore)
}

// rawPackable reports whether l is packed by packRaw: a payload that is
// not in the compact exact EVM form and cannot be of the exact scheme
// (mayBeExact), whose forms packPayment and the JSON object keep.
func rawPackable(l *ledgerPayment) bool {
	return l.EVM == nil && len(l.Payload) > 0 && !mayBeExact(l.Payload)
}

// unpackRaw decodes what packRaw wrote, after its first byte.
func unpackRaw(r *packedReader) (*ledgerPayment, error) {
	l := &ledgerPayment{Payload: r.bytes(), VerifiedAt: r.time()}
	for _, s := range []*string{&l.Network, &l.Payer, &l.Nonce, &l.Amount, &l.Asset} {
		*s = r.string()
	}
	l.ValidBefore = r.time()
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	if r.err == nil && len(l.Payload) == 0 {
		r.err = errors.New("no payload")
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode ledger payment: %w", r.err)
	}
	return l, nil
}

// packPayment returns the packed form of a ledger payment whose payload is
// in its compact exact EVM form (l.EVM set, l.Payload empty): one binary
// value that the ledger keeps as a base64 string, about half the size of
// the same fields as a JSON object. Addresses are their 20 bytes and the
// case of their letters (a bit a hex digit), decimal strings that are
// canonical uint64 a varint, times their unix seconds and nanoseconds,
// the accepted option's asset a byte when it is the network's
// (Network.Asset, 26 bytes packed as an address) and its extra a byte when
// it is, byte for byte, what the network's asset states
// (Network.AssetExtra: {"name":"USD Coin", "version":"2"}, 33 bytes);
// anything else is kept as its string or
// bytes, so that the form gives back exactly what it was given
// (unpackPayment).
func packPayment(l *ledgerPayment) []byte { return packPaymentForm(l, packedVersion) }

// packPaymentForm is packPayment in form version: packedVersion, or
// packedVersionWhole (the asset and extra kept whole), which the releases
// before migration 017 read.
func packPaymentForm(l *ledgerPayment, version byte) []byte {
	e := l.EVM
	b := make([]byte, 0, 256)
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(e.Version))
	b = appendString(b, e.Network)
	if version == packedVersionWhole {
		b = appendAddress(b, e.Asset)
		b = binary.AppendUvarint(b, uint64(e.Timeout))
		b = appendBytes(b, e.Extra)
	} else {
		n, _ := NetworkByID(e.Network)
		b = appendAsset(b, n, e.Asset)
		b = binary.AppendUvarint(b, uint64(e.Timeout))
		b = appendExtra(b, n, e.Extra)
	}
	b = appendAddress(b, e.From)
	b = appendAddress(b, e.To)
	b = appendDecimal(b, e.Value)
	b = appendDecimal(b, e.ValidAfter)
	b = appendDecimal(b, e.ValidBefore)
	b = appendBytes(b, e.Nonce)
	b = appendBytes(b, e.Signature)
	b = appendTime(b, l.VerifiedAt)
	// The fields kept beside the payload when it does not state them as
	// they are (empty in the common case: a byte each).
	for _, s := range []string{l.Network, l.Payer, l.Nonce, l.Amount, l.Asset} {
		b = appendString(b, s)
	}
	return appendTime(b, l.ValidBefore)
}

// packable reports whether l can be packed: its payload in the compact
// exact EVM form, and numbers the form holds.
func packable(l *ledgerPayment) bool {
	return l.EVM != nil && len(l.Payload) == 0 && l.EVM.Version >= 0 && l.EVM.Timeout >= 0
}

// unpackPayment decodes what packPayment or packRaw wrote.
func unpackPayment(b []byte) (*ledgerPayment, error) {
	r := &packedReader{b: b}
	version := r.byte()
	if version == packedVersionRaw {
		return unpackRaw(r)
	}
	if version != packedVersion && version != packedVersionWhole {
		return nil, fmt.Errorf("decode ledger payment: packed form %d unknown", version)
	}
	e := &ledgerEVM{}
	e.Version = int(r.uvarint())
	e.Network = r.string()
	var extra []byte
	if version == packedVersionWhole {
		e.Asset = r.address()
		e.Timeout = int(r.uvarint())
		extra = r.bytes()
	} else {
		n, _ := NetworkByID(e.Network)
		e.Asset = r.asset(n)
		e.Timeout = int(r.uvarint())
		extra = r.extra(n)
	}
	if len(extra) > 0 {
		e.Extra = extra
	}
	e.From = r.address()
	e.To = r.address()
	e.Value = r.decimal()
	e.ValidAfter = r.decimal()
	e.ValidBefore = r.decimal()
	e.Nonce = r.bytes()
	e.Signature = r.bytes()
	l := &ledgerPayment{EVM: e, VerifiedAt: r.time()}
	for _, s := range []*string{&l.Network, &l.Payer, &l.Nonce, &l.Amount, &l.Asset} {
		*s = r.string()
	}
	l.ValidBefore = r.time()
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode ledger payment: %w", r.err)
	}
	return l, nil
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// addressOfNetwork is the kind of a packed asset address (after
// appendAddress's 0, its bytes, and 1, a string) that stands for the
// network's asset (Network.Asset), 2 bytes where its address takes 26.
const addressOfNetwork = 2

// appendAsset appends the accepted option's asset: addressOfNetwork when
// it is, character for character, network n's (Network.Asset: USDC's
// contract, checksummed), else as appendAddress does.
func appendAsset(b []byte, n Network, asset string) []byte {
	if n.Asset != "" && n.Asset == asset {
		return append(b, addressOfNetwork)
	}
	return appendAddress(b, asset)
}

// appendExtra appends the accepted option's extra: 0 when it is, byte for
// byte, what network n's asset states (Network.AssetExtra), otherwise its
// length plus one and its bytes.
func appendExtra(b []byte, n Network, extra []byte) []byte {
	if stated, ok := n.AssetExtra(); ok && bytes.Equal(extra, stated) {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(extra))+1)
	return append(b, extra...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendAddress appends an EVM address: 0 then its 20 bytes and five bytes
// of letter case (bit i set: hex digit i is upper case), or, for a string
// that is not a 0x-prefixed address of 40 hex digits, 1 then the string.
func appendAddress(b []byte, s string) []byte {
	raw, err := hex.DecodeString(strings.TrimPrefix(s, "0x"))
	if len(s) != 42 || !strings.HasPrefix(s, "0x") || err != nil {
		return appendString(append(b, 1), s)
	}
	var upper [5]byte
	for i, c := range s[2:] {
		if c >= 'A' && c <= 'F' {
			upper[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, 0)
	b = append(b, raw...)
	return append(b, upper[:]...)
}

// appendDecimal appends a decimal string: its value plus one as a varint
// when it is a canonical uint64 (the form most amounts and times have), 0
// then the string otherwise.
func appendDecimal(b []byte, s string) []byte {
	if v, err := strconv.ParseUint(s, 10, 64); err == nil && v < 1<<63 && strconv.FormatUint(v, 10) == s {
		return binary.AppendUvarint(b, v+1)
	}
	return appendString(append(b, 0), s)
}

// appendTime appends a time: 0 for the zero time, otherwise its unix
// seconds (zig-zag varint) plus one and its nanoseconds. Times are read
// back in UTC, as the ledger's JSON form reads them.
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

// packedReader reads a packed payment, keeping the first error.
type packedReader struct {
	b   []byte
	err error
}

func (r *packedReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated at its %s", what)
	}
	r.b = nil
}

func (r *packedReader) byte() byte {
	if len(r.b) < 1 {
		r.fail("kind")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *packedReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varint reads what binary.AppendVarint wrote: a zig-zag uvarint.
func (r *packedReader) varint() int64 {
	u := r.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (r *packedReader) bytes() []byte {
	n := r.uvarint()
	if uint64(len(r.b)) < n {
		r.fail("bytes")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *packedReader) string() string { return string(r.bytes()) }

// asset reads what appendAsset wrote, the option's asset on network n.
func (r *packedReader) asset(n Network) string {
	if len(r.b) == 0 || r.b[0] != addressOfNetwork {
		return r.address()
	}
	r.b = r.b[1:]
	if n.Asset != "" {
		return n.Asset
	}
	if r.err == nil {
		r.err = fmt.Errorf("asset of a network without one (%q)", n.ID)
	}
	r.b = nil
	return ""
}

// extra reads what appendExtra wrote, the option's extra on network net.
func (r *packedReader) extra(net Network) []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n == 0 {
		if extra, ok := net.AssetExtra(); ok {
			return extra
		}
		r.err = fmt.Errorf("extra of a network whose asset states none (%q)", net.ID)
		r.b = nil
		return nil
	}
	if uint64(len(r.b)) < n-1 {
		r.fail("extra")
		return nil
	}
	v := r.b[: n-1 : n-1]
	r.b = r.b[n-1:]
	return v
}

func (r *packedReader) address() string {
	if r.byte() != 0 {
		return r.string()
	}
	if len(r.b) < 25 {
		r.fail("address")
		return ""
	}
	digits := []byte(hex.EncodeToString(r.b[:20]))
	for i := range digits {
		if r.b[20+i/8]&(1<<(i%8)) != 0 && digits[i] >= 'a' {
			digits[i] -= 'a' - 'A'
		}
	}
	r.b = r.b[25:]
	return "0x" + string(digits)
}

func (r *packedReader) decimal() string {
	v := r.uvarint()
	if v == 0 {
		return r.string()
	}
	return strconv.FormatUint(v-1, 10)
}

func (r *packedReader) time() time.Time {
	if r.byte() == 0 {
		return time.Time{}
	}
	sec := r.varint()
	nsec := r.uvarint()
	if nsec >= 1e9 {
		r.fail("time")
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}
