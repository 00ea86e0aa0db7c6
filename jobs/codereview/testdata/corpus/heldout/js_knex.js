async function find(knex, a) {
  const rows = await knex.raw(`SELECT * FROM things WHERE a = '${a}'`); // want: sql-injection
  const safe = await knex("things").where({ a });
  return [rows, safe];
}

async function find2(sequelize, id) {
  return sequelize.query("SELECT * FROM things WHERE id = :id", { replacements: { id } });
}
