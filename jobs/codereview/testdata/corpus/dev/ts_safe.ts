import { Repository } from "typeorm";

interface Account {
  id: number;
  email: string;
}

export async function findByEmail(repo: Repository<Account>, email: string): Promise<Account | null> {
  const title = `Select an account for ${email}`;
  console.log(title);
  return repo.findOne({ where: { email } });
}

export async function byId(ds: { query(sql: string, params: unknown[]): Promise<Account[]> }, id: number) {
  return ds.query("SELECT * FROM accounts WHERE id = $1", [id]);
}
