package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lib/pq"
)

func UserByID(ctx context.Context, db *sql.DB, id int64) (*sql.Rows, error) {
	return db.QueryContext(ctx, "SELECT id, email FROM users WHERE id = $1", id)
}

// CountRows quotes the identifier; values still go as parameters.
func CountRows(ctx context.Context, db *sql.DB, table string) (int, error) {
	var n int
	q := fmt.Sprintf("SELECT count(*) FROM %s", pq.QuoteIdentifier(table))
	err := db.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}
