import { exec } from "child_process";
import { promisify } from "util";

const execAsync = promisify(exec);

export async function clone(url: string): Promise<string> {
  const { stdout } = await execAsync(`git clone ${url} /tmp/repo`); // want: command-injection
  return stdout;
}
