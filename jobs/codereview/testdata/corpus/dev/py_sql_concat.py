def search(cur, name, city=None):
    sql = "SELECT * FROM people WHERE name = '" + name + "'"  # want: sql-injection
    if city:
        sql += " AND city = '" + city + "'"  # want: sql-injection
    cur.execute(sql)
    return cur.fetchall()
