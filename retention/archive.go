package retention

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/x402d/x402d/schema"
	"github.com/x402d/x402d/store"
)

// ArchiveFormat names the layout of an archive's file: JSON lines, gzip,
// each a store.Event, with its binary data (bin, in base64) when it has
// some. Restore reads it and archiveFormatJSON.
const ArchiveFormat = "x402d-events/2"

// archiveFormatJSON is the layout written before the log kept binary data
// (migration 017): the same lines without bin. A release that reads only
// it refuses an archive of ArchiveFormat rather than losing its bin.
const archiveFormatJSON = "x402d-events/1"

// Manifest describes an archived partition of the event log, beside its
// file (<partition>.manifest.json next to <partition>.jsonl.gz).
type Manifest struct {
	Format    string `json:"format"`
	Partition string `json:"partition"`
	// From is the start of the partition's range; nil for the open start
	// of the first partition.
	From *time.Time `json:"from"`
	// To is the (exclusive) end of its range.
	To   time.Time `json:"to"`
	Rows int64     `json:"rows"`
	// FirstID and LastID are the ids of its first and last events.
	FirstID int64 `json:"first_id"`
	LastID  int64 `json:"last_id"`
	// File is the base name of the archive's file.
	File string `json:"file"`
	// SHA256 is the hex SHA-256 of the file.
	SHA256     string    `json:"sha256"`
	ArchivedAt time.Time `json:"archived_at"`
}

// Archive writes every partition of the event log whose range ends on or
// before before (and before now) to dir, as <partition>.jsonl.gz (one event
// a line, in id order) with <partition>.manifest.json, both synced to disk;
// then it detaches and drops the partition. It returns the manifests
// written. A partition is dropped only once its file and manifest are
// complete and its rows counted again in the dropping transaction, the
// partition locked against writes first; each lock waits at most
// lockTimeout (LockTimeout), else Archive stops with ErrPartitionBusy.
// Files that turn out not to be their partition's are removed.
func Archive(ctx context.Context, pool *pgxpool.Pool, dir string, before time.Time, lockTimeout time.Duration) ([]Manifest, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	parts, err := endedBy(ctx, pool, before)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	var done []Manifest
	for _, p := range parts {
		m, err := archivePartition(ctx, pool, dir, p, lockTimeout)
		if err != nil {
			return done, err
		}
		done = append(done, *m)
	}
	return done, nil
}

// endedBy returns the partitions of the event log whose whole range ends
// on or before before, and before now, in order.
func endedBy(ctx context.Context, pool *pgxpool.Pool, before time.Time) ([]schema.Partition, error) {
	var parts []schema.Partition
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		all, err := schema.EventPartitions(ctx, tx)
		now := time.Now()
		for _, p := range all {
			if !p.To.After(before) && !p.To.After(now) {
				parts = append(parts, p)
			}
		}
		return err
	})
	return parts, err
}

// archivePartition archives one partition (Archive).
func archivePartition(ctx context.Context, pool *pgxpool.Pool, dir string, p schema.Partition, lockTimeout time.Duration) (*Manifest, error) {
	m := &Manifest{Format: ArchiveFormat, Partition: p.Name, To: p.To.UTC(), File: p.Name + ".jsonl.gz", ArchivedAt: time.Now().UTC()}
	if !p.From.IsZero() {
		from := p.From.UTC()
		m.From = &from
	}
	path := filepath.Join(dir, m.File)
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("archive %s: %s exists already", p.Name, path)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", p.Name, err)
	}
	defer os.Remove(tmp)
	defer f.Close()
	sum := sha256.New()
	buffered := bufio.NewWriterSize(io.MultiWriter(f, sum), 1<<16)
	gz := gzip.NewWriter(buffered)
	enc := json.NewEncoder(gz)
	err = store.EventPartitionEach(ctx, pool, p.Name, func(e store.Event) error {
		e.CreatedAt = e.CreatedAt.UTC()
		if m.Rows == 0 {
			m.FirstID = e.ID
		}
		m.LastID = e.ID
		m.Rows++
		if err := enc.Encode(&e); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", p.Name, err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("archive %s: write: %w", p.Name, err)
	}
	if err := buffered.Flush(); err != nil {
		return nil, fmt.Errorf("archive %s: write: %w", p.Name, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("archive %s: sync: %w", p.Name, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("archive %s: %w", p.Name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("archive %s: %w", p.Name, err)
	}
	m.SHA256 = hex.EncodeToString(sum.Sum(nil))
	if err := writeManifest(filepath.Join(dir, p.Name+".manifest.json"), m); err != nil {
		return nil, fmt.Errorf("archive %s: %w", p.Name, err)
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("archive %s: %w", p.Name, err)
	}

	if err := dropArchived(ctx, pool, p.Name, m.Rows, lockTimeout); err != nil {
		// The files are not the partition's archive: a later run writes
		// them again.
		_ = os.Remove(path)
		_ = os.Remove(filepath.Join(dir, p.Name+".manifest.json"))
		return nil, fmt.Errorf("archive %s: %w", p.Name, err)
	}
	return m, nil
}

// dropArchived detaches and drops partition name, locked against writes
// (lockEnded) and its rows counted again: unless they are the rows
// archived, it is left as it is.
func dropArchived(ctx context.Context, pool *pgxpool.Pool, name string, rows int64, lockTimeout time.Duration) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := lockEnded(ctx, tx, name, lockTimeout); err != nil {
		return busy(err)
	}
	count, err := store.EventPartitionCount(ctx, tx, name)
	if err != nil {
		return err
	}
	if count != rows {
		return fmt.Errorf("%d rows now, %d written: not dropped", count, rows)
	}
	if err := schema.DetachEventPartition(ctx, tx, name); err != nil {
		return busy(err)
	}
	return tx.Commit(ctx)
}

// writeManifest writes m to path, synced.
func writeManifest(path string, m *Manifest) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(path + ".tmp")
	if _, err := f.Write(append(raw, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// syncDir makes the names written in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Restore brings back the archived partition whose manifest, or file, is
// at path: it checks the file's checksum, loads its rows into a table of
// the partition's name and attaches it for its range, in one transaction,
// and returns the manifest.
func Restore(ctx context.Context, pool *pgxpool.Pool, path string) (*Manifest, error) {
	manifestPath := path
	if base, ok := strings.CutSuffix(path, ".jsonl.gz"); ok {
		manifestPath = base + ".manifest.json"
	}
	raw, err := os.ReadFile(manifestPath)
	if err != nil {
		return nil, fmt.Errorf("restore: manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("restore: manifest %s: %w", manifestPath, err)
	}
	if m.Format != ArchiveFormat && m.Format != archiveFormatJSON {
		return nil, fmt.Errorf("restore: %s is format %q, not %q or %q", manifestPath, m.Format, ArchiveFormat, archiveFormatJSON)
	}
	file := filepath.Join(filepath.Dir(manifestPath), m.File)
	if err := checkSum(file, m.SHA256); err != nil {
		return nil, fmt.Errorf("restore %s: %w", m.Partition, err)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", m.Partition, err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", m.Partition, err)
	}
	dec := json.NewDecoder(gz)

	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", m.Partition, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := schema.CreateDetachedPartition(ctx, tx, m.Partition); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	n, err := store.EventPartitionLoad(ctx, tx, m.Partition, func() (*store.Event, error) {
		var e store.Event
		if err := dec.Decode(&e); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			return nil, fmt.Errorf("read %s: %w", m.File, err)
		}
		return &e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", m.Partition, err)
	}
	if n != m.Rows {
		return nil, fmt.Errorf("restore %s: %d rows in the file, the manifest says %d", m.Partition, n, m.Rows)
	}
	p := schema.Partition{Name: m.Partition, To: m.To}
	if m.From != nil {
		p.From = *m.From
	}
	if err := schema.AttachEventPartition(ctx, tx, p); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("restore %s: %w", m.Partition, err)
	}
	return &m, nil
}

// checkSum checks that the file at path has the hex SHA-256 want.
func checkSum(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s: SHA-256 %s, the manifest says %s", path, got, want)
	}
	return nil
}
