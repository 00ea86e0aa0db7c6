import { DataSource } from "typeorm";

export async function findByEmail(ds: DataSource, email: string): Promise<unknown[]> {
  return ds.query(
    "SELECT id, name FROM accounts WHERE email = '" + email + "'", // want: sql-injection
  );
}

export async function remove(ds: DataSource, id: string): Promise<void> {
  await ds.query(`DELETE FROM accounts WHERE id = ${id}`); // want: sql-injection
}
