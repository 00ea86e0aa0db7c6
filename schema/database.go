package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnsureDatabase creates the database named in connString when it does not
// exist and the role may create it. An unreachable server is an error that
// says how to start one. connString may carry pgxpool's settings
// (pool_max_conns, pool_max_conn_lifetime, ...): they are the pool's, not the
// server's, and are not sent.
func EnsureDatabase(ctx context.Context, connString string) error {
	poolConfig, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	config := poolConfig.ConnConfig
	conn, err := pgx.ConnectConfig(ctx, config)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect to Postgres at %s:%d: %w (start it, e.g. `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, or set DATABASE_URL)", config.Host, config.Port, err)
	}
	admin := config.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("create database %s: connect to the postgres database: %w", config.Database, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{config.Database}.Sanitize())
	if err != nil && !isDuplicateDatabase(err) {
		return fmt.Errorf("create database %s: %w", config.Database, err)
	}
	return nil
}

func isDuplicateDatabase(err error) bool {
	var pgErr *pgconn.PgError
	// 23505: two processes created it at the same moment.
	return errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") // duplicate_database
}

// PoolConfig parses connString into the configuration of a pool of the
// service's database, with the service's session settings: JIT compilation
// off, unless connString sets jit. The service's statements are short, and
// Postgres decides to compile by a cost estimate, not by time: on a large
// index it compiles the index summary on every call, for far longer than the
// query runs (docs/performance.md, Index).
func PoolConfig(connString string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["jit"]; !ok {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	return cfg, nil
}
