def find_user(conn, name):
    cur = conn.cursor()
    cur.execute("SELECT id, email FROM users WHERE name = ?", (name,))
    return cur.fetchone()


def find_orders(cur, user_id, status):
    cur.execute(
        "SELECT * FROM orders WHERE user_id = %s AND status = %s",
        (user_id, status),
    )
    # The query below is built with f"..." in a comment only: SELECT * FROM x WHERE a = '{a}'
    label = f"Select from {len(status)} options"
    return cur.fetchall(), label
