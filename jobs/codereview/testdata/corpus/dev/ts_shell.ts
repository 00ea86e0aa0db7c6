import { spawn } from "child_process";

export function run(command: string): void {
  const child = spawn(command, { shell: true }); // want: command-injection
  child.stdout?.on("data", (d: Buffer) => process.stdout.write(d));
}
