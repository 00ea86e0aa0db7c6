package store

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// succeededPackedVersion is the first byte of job.succeeded's binary form
// (JobSucceeded.MarshalEventBinary).
const succeededPackedVersion = 1

// MarshalEventBinary returns job.succeeded's data in its binary form,
// which Append keeps in the event's bin column: a version byte, the
// result's size, the job, the attempt and the settlement job as uvarints,
// the digest's 32 bytes, then the transaction named before sending (its
// length, then its bytes): about 45 bytes against 72 of data for the
// one-string JSON form (MarshalJSON). ok is false when the event is
// written in ledger form 1 (Form1), or for values the
// form does not hold (a negative number, a digest that is not 32 bytes of
// lower-case hex), which are written as JSON. UnmarshalEventBinary reads
// it.
func (j JobSucceeded) MarshalEventBinary() ([]byte, bool) {
	if j.Form1 {
		return nil, false
	}
	if j.Result != nil {
		j.Bytes, j.SHA256 = j.resultDigest()
	}
	sum, err := hex.DecodeString(j.SHA256)
	if err != nil || len(sum) != 32 || hex.EncodeToString(sum) != j.SHA256 ||
		j.Bytes < 0 || j.JobID < 0 || j.Attempt < 0 || j.SettleJobID < 0 {
		return nil, false
	}
	b := make([]byte, 0, 48+len(j.Transaction))
	b = append(b, succeededPackedVersion)
	for _, n := range []uint64{uint64(j.Bytes), uint64(j.JobID), uint64(j.Attempt), uint64(j.SettleJobID)} {
		b = binary.AppendUvarint(b, n)
	}
	b = append(b, sum...)
	b = binary.AppendUvarint(b, uint64(len(j.Transaction)))
	return append(b, j.Transaction...), true
}

// UnmarshalEventBinary decodes what MarshalEventBinary wrote.
func (j *JobSucceeded) UnmarshalEventBinary(b []byte) error {
	if len(b) == 0 || b[0] != succeededPackedVersion {
		return errors.New("decode job.succeeded: packed form unknown")
	}
	b = b[1:]
	truncated := errors.New("decode job.succeeded: truncated")
	uvarint := func() (uint64, error) {
		v, k := binary.Uvarint(b)
		if k <= 0 || v > 1<<62 {
			return 0, truncated
		}
		b = b[k:]
		return v, nil
	}
	var n [4]uint64
	for i := range n {
		v, err := uvarint()
		if err != nil {
			return err
		}
		n[i] = v
	}
	if len(b) < 32 {
		return truncated
	}
	v := JobSucceeded{Bytes: int(n[0]), JobID: int64(n[1]), Attempt: int(n[2]), SettleJobID: int64(n[3]), SHA256: hex.EncodeToString(b[:32])}
	b = b[32:]
	tx, err := uvarint()
	if err != nil {
		return err
	}
	if uint64(len(b)) != tx {
		return fmt.Errorf("decode job.succeeded: %d bytes of transaction, want %d", len(b), tx)
	}
	v.Transaction = string(b)
	*j = v
	return nil
}
