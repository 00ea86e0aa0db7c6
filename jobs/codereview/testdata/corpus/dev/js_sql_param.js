async function byId(db, id) {
  const { rows } = await db.query("SELECT * FROM users WHERE id = $1", [id]);
  return rows[0];
}

async function byName(pool, name) {
  const [rows] = await pool.execute("SELECT * FROM users WHERE name = ?", [name]);
  const message = "Please select from the list " + name;
  return { rows, message };
}
