// Packaging: `npm pack`, the tarball installed into a fresh project, its
// types compiled against, and examples/node-producer/producer.mjs run from
// there against a nats-server and the Go peer.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { NatsServer, pkgRoot, Proc, repoRoot } from "./harness.js";
import { peerMissing, startPeer } from "./peer.js";

describe("the npm package, installed from its tarball", { skip: peerMissing() || false }, () => {
  let dir: string;
  let srv: NatsServer;
  let peer: Proc;

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "jetflow-ts-pack-"));
    const out = execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: pkgRoot, encoding: "utf8" });
    const tgz = out.trim().split("\n").pop()!;
    assert.ok(existsSync(path.join(dir, tgz)), `npm pack made ${tgz}`);
    const proj = path.join(dir, "app");
    execFileSync("mkdir", ["-p", proj]);
    writeFileSync(path.join(proj, "package.json"), JSON.stringify({
      name: "jetflow-pack-smoke", private: true, type: "module",
      dependencies: { "@jetflow-dev/client": `file:../${tgz}`, "@nats-io/transport-node": "3.4.0" },
    }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: proj, stdio: ["ignore", "ignore", "inherit"] });
    srv = await NatsServer.start();
    peer = await startPeer(srv.url);
  });
  after(async () => {
    await peer?.stop();
    await srv?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("the tarball holds the built package and its types, not the sources or tests", () => {
    const pkg = path.join(dir, "app", "node_modules", "@jetflow-dev", "client");
    const files = readdirSync(path.join(pkg, "dist"));
    assert.ok(files.includes("index.js") && files.includes("index.d.ts"), files.join(","));
    assert.ok(existsSync(path.join(pkg, "README.md")));
    assert.ok(!existsSync(path.join(pkg, "src")) && !existsSync(path.join(pkg, "test")));
  });

  test("its types compile in a TypeScript project", () => {
    const proj = path.join(dir, "app");
    writeFileSync(path.join(proj, "check.ts"), `
import { connect } from "@nats-io/transport-node";
import { AlreadyExistsError, Client, defineFunction, type Run } from "@jetflow-dev/client";
const send = defineFunction<{ to: string }>("emails.send");
export async function f(): Promise<Run> {
  const jf = await Client.connect(await connect());
  // @ts-expect-error: the args' type is checked
  send.with({ too: "x" });
  try { await jf.enqueue(send.with({ to: "a@b.c" }), { id: "x", maxAttempts: 3, timeout: "30s" }); }
  catch (e) { if (e instanceof AlreadyExistsError) console.log(e.id, e.code); }
  return jf.wait("x");
}
`);
    const tsc = path.join(pkgRoot, "node_modules", ".bin", "tsc");
    execFileSync(tsc, ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022",
      "--types", "node", "--typeRoots", path.join(pkgRoot, "node_modules", "@types"), "check.ts"], { cwd: proj, stdio: "inherit" });
  });

  test("examples/node-producer runs against a Go worker", async () => {
    const proj = path.join(dir, "app");
    copyFileSync(path.join(repoRoot, "examples", "node-producer", "producer.mjs"), path.join(proj, "producer.mjs"));
    const p = new Proc(process.execPath, [path.join(proj, "producer.mjs"), srv.url]);
    await p.waitLine(/^workflow: .*$/m, 90_000);
    const code = await new Promise((r) => (p.proc.exitCode !== null ? r(p.proc.exitCode) : p.proc.once("exit", r)));
    assert.equal(code, 0, p.err);
    const out = p.out;
    assert.match(out, /^enqueue: \S+ success \{"hello":"from Node.js","n":42\}$/m);
    assert.match(out, /^runAfter: \S+ success on time$/m);
    assert.match(out, /^idempotency: node-example-\d+ already exists \(alreadyExists\)$/m);
    assert.match(out, /^watch: .*success$/m);
    assert.match(out, /^workflow: \S+ success \{"by":"node","ok":true\}$/m);
  });
});
