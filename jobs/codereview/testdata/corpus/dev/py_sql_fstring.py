import sqlite3


def find_user(conn, name):
    cur = conn.cursor()
    cur.execute(f"SELECT id, email FROM users WHERE name = '{name}'")  # want: sql-injection
    return cur.fetchone()
