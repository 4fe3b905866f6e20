// Real servers for the tests: a nats-server process (built from the Go
// module cache of this repository, or NATS_SERVER_BIN), jetflow's streams
// provisioned by the jetflow CLI, and the Go peer (a worker, a scheduler,
// demo functions and a demo workflow) as a separate process.

import { execFileSync, spawn, ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The package's folder (clients/typescript). */
export const pkgRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
/** The repository's root. */
export const repoRoot = path.resolve(pkgRoot, "../..");
const binDir = path.join(pkgRoot, "build", "bin");

const built = new Set<string>();

/**
 * goBuild builds a Go main package of the repository (or of its module
 * cache) into build/bin, once per process: Go's build cache makes a build
 * of unchanged sources a fraction of a second, and a binary is never
 * older than the sources it tests. envVar names a prebuilt binary instead.
 */
export function goBuild(name: string, pkg: string, envVar: string): string {
  const given = process.env[envVar];
  if (given) return given;
  const out = path.join(binDir, name);
  if (!built.has(out)) {
    mkdirSync(binDir, { recursive: true });
    execFileSync("go", ["build", "-o", out, pkg], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
    built.add(out);
  }
  return out;
}

export function natsServerBin(): string {
  return goBuild("nats-server", "github.com/nats-io/nats-server/v2", "NATS_SERVER_BIN");
}

export function jetflowBin(): string {
  return goBuild("jetflow", "./cmd/jetflow", "JETFLOW_BIN");
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

async function waitFor(what: string, ok: () => Promise<boolean> | boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (await ok()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A nats-server process with JetStream, on a free port, storing in a temp folder. */
export class NatsServer {
  readonly url: string;
  readonly port: number;
  private readonly proc: ChildProcess;
  private readonly dir: string;
  log = "";

  private constructor(port: number, proc: ChildProcess, dir: string) {
    this.port = port;
    this.url = `nats://127.0.0.1:${port}`;
    this.proc = proc;
    this.dir = dir;
    proc.stderr?.on("data", (d) => {
      this.log += d.toString();
      if (this.log.length > 200_000) this.log = this.log.slice(-100_000);
    });
  }

  /** start starts a server; conf is extra configuration (an authorization block, max_payload). */
  static async start(opts: { conf?: string } = {}): Promise<NatsServer> {
    const bin = natsServerBin();
    const port = await freePort();
    const dir = mkdtempSync(path.join(tmpdir(), "jetflow-ts-nats-"));
    const conf = path.join(dir, "server.conf");
    writeFileSync(conf, `listen: "127.0.0.1:${port}"\njetstream { store_dir: "${dir}/js" }\n${opts.conf ?? ""}\n`);
    const proc = spawn(bin, ["-c", conf], { stdio: ["ignore", "ignore", "pipe"] });
    const s = new NatsServer(port, proc, dir);
    await waitFor("nats-server to listen", () => s.log.includes("Server is ready") || proc.exitCode !== null);
    if (proc.exitCode !== null) throw new Error(`nats-server exited: ${s.log}`);
    return s;
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode === null) {
      const done = new Promise((r) => this.proc.once("exit", r));
      this.proc.kill("SIGTERM");
      await Promise.race([done, new Promise((r) => setTimeout(r, 5000))]);
      if (this.proc.exitCode === null) this.proc.kill("SIGKILL");
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** provision creates jetflow's streams and buckets with the jetflow CLI (an admin's job). */
export function provision(url: string, user?: { user: string; password: string }): void {
  const args = ["provision", "--url", url];
  if (user) args.push("--user", user.user, "--password", user.password);
  execFileSync(jetflowBin(), args, { stdio: ["ignore", "ignore", "inherit"] });
}

/** A process with marker lines on stdout. */
export class Proc {
  readonly proc: ChildProcess;
  out = "";
  err = "";
  constructor(bin: string, args: string[], env: Record<string, string> = {}) {
    this.proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
    this.proc.stdout?.on("data", (d) => (this.out += d.toString()));
    this.proc.stderr?.on("data", (d) => {
      this.err += d.toString();
      if (this.err.length > 200_000) this.err = this.err.slice(-100_000);
    });
  }
  async waitLine(re: RegExp, ms = 30_000): Promise<RegExpMatchArray> {
    let m: RegExpMatchArray | null = null;
    await waitFor(`a line ${re} (stdout: ${this.out.slice(-500)}; stderr: ${this.err.slice(-1500)})`, () => {
      m = this.out.match(re);
      return m !== null || this.proc.exitCode !== null;
    }, ms);
    if (!m) throw new Error(`process exited (${this.proc.exitCode}) before ${re}: ${this.err.slice(-2000)}`);
    return m;
  }
  async stop(): Promise<void> {
    if (this.proc.exitCode !== null) return;
    const done = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGTERM");
    await Promise.race([done, new Promise((r) => setTimeout(r, 10_000))]);
    if (this.proc.exitCode === null) this.proc.kill("SIGKILL");
  }
}

/** vectorsDir is the shared test vectors' folder (JETFLOW_VECTORS overrides, for local runs). */
export function vectorsDir(): string {
  return process.env.JETFLOW_VECTORS ?? path.join(repoRoot, "streams", "testdata", "vectors");
}
