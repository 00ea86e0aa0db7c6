package store

import "database/sql"

func DeleteSession(db *sql.DB, id string) error {
	_, err := db.Exec("DELETE FROM sessions WHERE id = " + id) // want: sql-injection
	return err
}

func Count(db *sql.DB, table string) (int, error) {
	var n int
	err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n) // want: sql-injection
	return n, err
}
