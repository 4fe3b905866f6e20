// The Go peer (integration/internal/clientpeer): a Go worker and scheduler
// serving demo.echo, demo.sleep, demo.fail and the workflow demo.flow.

import { goBuild, Proc } from "./harness.js";

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

