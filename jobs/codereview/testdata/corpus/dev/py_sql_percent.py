def order(cur, order_id):
    query = "SELECT * FROM orders WHERE id = %s" % order_id  # want: sql-injection
    cur.execute(query)
    return cur.fetchone()


def rename(cur, old, new):
    cur.execute("UPDATE users SET name = '{}' WHERE name = '{}'".format(new, old))  # want: sql-injection
