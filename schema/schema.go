// Package schema owns the database schema: River's own tables (through
// rivermigrate) and the service's tables, from the numbered SQL files embedded
// in migration/. Migrate applies both, idempotently, under an advisory lock so
// that processes starting at the same time do not race.
package schema

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// lockKey is the advisory lock taken while migrating (a fixed 64-bit key:
// "x402d" in ASCII).
const lockKey int64 = 0x7834303264

// Migration is one numbered migration of the service's own tables.
type Migration struct {
	// Version is the number the file name starts with.
	Version int
	// Name is the rest of the file name, without the direction.
	Name string
	// Up is the SQL that applies it.
	Up string
	// Down is the SQL that reverts it.
	Down string
}

// Migrations returns the embedded migrations, ordered by version.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migration")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		base, dir, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), ".")
		if !ok || (dir != "up" && dir != "down") {
			return nil, fmt.Errorf("migration %s: name must be NNN_name.up.sql or NNN_name.down.sql", name)
		}
		num, label, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: version: %w", name, err)
		}
		body, err := fs.ReadFile(migrationFS, path.Join("migration", name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		m := byVersion[version]
		if m == nil {
			m = &Migration{Version: version, Name: label}
			byVersion[version] = m
		}
		if dir == "up" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" {
			return nil, fmt.Errorf("migration %03d_%s has no up file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate brings the database behind pool up to date: River's migrations,
// then the service's own. It holds a session advisory lock for the whole run,
// so concurrent callers wait for each other and then find nothing to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even when ctx is done.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey)
	}()

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate: river migrator: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "applied river migration", "version", v.Version, "name", v.Name)
	}

	migrations, err := Migrations()
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS x402d_migration (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("migrate: create migration table: %w", err)
	}
	for _, m := range migrations {
		if err := apply(ctx, conn.Conn(), m, logger); err != nil {
			return err
		}
	}
	return nil
}

// apply runs m in its own transaction unless it is already recorded.
func apply(ctx context.Context, conn *pgx.Conn, m Migration, logger *slog.Logger) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migration %03d: begin: %w", m.Version, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	var done bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM x402d_migration WHERE version = $1)", m.Version).Scan(&done); err != nil {
		return fmt.Errorf("migration %03d: check: %w", m.Version, err)
	}
	if done {
		return nil
	}
	if _, err := tx.Exec(ctx, m.Up); err != nil {
		return fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO x402d_migration (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
		return fmt.Errorf("migration %03d: record: %w", m.Version, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migration %03d: commit: %w", m.Version, err)
	}
	logger.InfoContext(ctx, "applied migration", "version", m.Version, "name", m.Name)
	return nil
}
