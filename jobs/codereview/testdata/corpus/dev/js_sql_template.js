const express = require("express");
const app = express();

app.get("/users/:id", async (req, res) => {
  const rows = await db.query(`SELECT * FROM users WHERE id = ${req.params.id}`); // want: sql-injection
  res.json(rows);
});

app.get("/search", async (req, res) => {
  const sql = "SELECT * FROM items WHERE title LIKE '%" + req.query.q + "%'"; // want: sql-injection
  res.json(await db.query(sql));
});
