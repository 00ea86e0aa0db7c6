package store

import (
	"database/sql"
	"fmt"
)

func UserByName(db *sql.DB, name string) (*sql.Rows, error) {
	q := fmt.Sprintf("SELECT id, email FROM users WHERE name = '%s'", name) // want: sql-injection
	return db.Query(q)
}
