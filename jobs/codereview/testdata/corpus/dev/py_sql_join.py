def search(cur, name):
    # Built in pieces and joined: the static rules do not follow this.
    parts = ["SELECT * FROM people WHERE name = '", name, "'"]
    cur.execute("".join(parts))  # want: sql-injection
    return cur.fetchall()
