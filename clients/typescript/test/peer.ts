// The Go peer (integration/internal/clientpeer): a Go worker and scheduler
// serving demo.echo, demo.sleep, demo.fail and the workflow demo.flow.

import { existsSync } from "node:fs";
import path from "node:path";
import { goBuild, Proc, repoRoot } from "./harness.js";

/**
 * peerMissing says why the Go peer cannot run here (its source is not on
 * this branch and CLIENTPEER_BIN names no binary), or "" when it can.
 */
export function peerMissing(): string {
  if (process.env.CLIENTPEER_BIN) return "";
  if (existsSync(path.join(repoRoot, "integration", "internal", "clientpeer"))) return "";
  const why = "the Go peer (integration/internal/clientpeer) is not on this branch; set CLIENTPEER_BIN to run these tests";
  console.log(`# ${why}`);
  return why;
}

export function peerBin(): string {
  return goBuild("clientpeer", "./integration/internal/clientpeer", "CLIENTPEER_BIN");
}

/** startPeer runs the Go peer against url and waits until it serves and its scheduler leads. */
export async function startPeer(url: string, user?: { user: string; password: string }): Promise<Proc> {
  const args = ["-url", url, "-quiet"];
  if (user) args.push("-user", user.user, "-password", user.password);
  const p = new Proc(peerBin(), args);
  await p.waitLine(/^READY /m, 60_000);
  return p;
}

