def report(cur, region, year):
    cur.execute(
        f"""
        SELECT region, SUM(total)
        FROM sales
        WHERE region = '{region}'
        GROUP BY region
        """  # want: sql-injection
    )
    rows = cur.fetchall()
    cur.execute("SELECT * FROM sales WHERE year = %(year)s", {"year": year})
    return rows, cur.fetchall()
