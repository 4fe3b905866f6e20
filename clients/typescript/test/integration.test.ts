// The client against real servers: a nats-server process and the Go peer
// (integration/internal/clientpeer: a Go worker and scheduler serving
// demo.echo, demo.sleep, demo.fail and the workflow demo.flow).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  AlreadyExistsError,
  ArgsTooLargeError,
  Client,
  defineFunction,
  EndedError,
  InvalidRunIDError,
  NotAWorkflowError,
  NotFoundError,
  PermissionDeniedError,
  TooManyRunsError,
} from "../src/index.js";
import type { Run } from "../src/index.js";
import { NatsServer, Proc, repoRoot } from "./harness.js";
import { peerMissing, startPeer } from "./peer.js";

const echo = defineFunction<unknown>("demo.echo");
const sleep = defineFunction<{ ms: number }>("demo.sleep");
const fail = defineFunction<{ message?: string; permanent?: boolean; times?: number }>("demo.fail");

async function streamMsgs(nc: NatsConnection, stream: string): Promise<number> {
  const m = await nc.request(`$JS.API.STREAM.INFO.${stream}`, undefined, { timeout: 5000 });
  return m.json<any>().state.messages;
}

/** lastSeqs are the streams' last sequences: unchanged when nothing was written (a worker taking a message changes counts, not these). */
async function counts(nc: NatsConnection): Promise<number[]> {
  return Promise.all(["JETFLOW_FN", "KV_jetflow_runs", "KV_jetflow_delayed", "KV_jetflow_journal"].map(async (s) => {
    const m = await nc.request(`$JS.API.STREAM.INFO.${s}`, undefined, { timeout: 5000 });
    return m.json<any>().state.last_seq as number;
  }));
}

/** quiet waits until nothing is written for 300 ms (runs of earlier tests finishing) and returns the last sequences. */
async function quiet(nc: NatsConnection): Promise<number[]> {
  let a = await counts(nc);
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setTimeout(r, 300));
    const b = await counts(nc);
    if (b.every((x, j) => x === a[j])) return b;
    a = b;
  }
  return a;
}

describe("integration: a Go worker and scheduler (the peer)", { skip: peerMissing() || false }, () => {
  let srv: NatsServer;
  let peer: Proc;
  let nc: NatsConnection;
  let jf: Client;

  before(async () => {
    srv = await NatsServer.start(); // max payload 1 MB, nats-server's default
    peer = await startPeer(srv.url);
    nc = await connect({ servers: srv.url });
    jf = await Client.connect(nc);
  });
  after(async () => {
    await nc?.close();
    await peer?.stop();
    await srv?.stop();
  });

  test("enqueue: success with the handler's result", async () => {
    const id = await jf.enqueue(echo.with({ hello: "world", n: [1, 2, 3] }));
    const r = await jf.wait(id, { timeout: 15_000 });
    assert.equal(r.state, "success");
    assert.deepEqual(r.result, { hello: "world", n: [1, 2, 3] });
    assert.equal(r.name, "demo.echo");
    assert.equal(r.attempts, 1);
  });

  test("unicode args come back as sent", async () => {
    const args = { to: "zoë@例え.jp", subject: "Grüße 👋 <hi> & bye \u2028", emoji: "🧪" };
    const id = await jf.enqueue(echo.with(args), { id: "unicode-1" });
    const r = await jf.wait(id, { timeout: 15_000 });
    assert.equal(r.state, "success");
    assert.deepEqual(r.result, args);
    assert.deepEqual(r.args, args);
  });

  test("options: id, maxAttempts, timeout, parent reach the record", async () => {
    const id = await jf.enqueue(echo.with(1), { id: "opts-1", maxAttempts: 7, timeout: "45s", parent: "someone" });
    const r = await jf.wait(id, { timeout: 15_000 });
    assert.equal(r.state, "success");
    assert.equal(r.maxAttempts, 7);
    assert.equal(r.timeout, 45_000);
    assert.equal(r.parent, "someone");
  });

  test("runAfter fires after its delay, on time", async () => {
    const before = Date.now();
    const id = await jf.runAfter(1500, echo.with("later"));
    const pending = await jf.get(id);
    assert.equal(pending.state, "pending");
    const r = await jf.wait(id, { timeout: 20_000 });
    assert.equal(r.state, "success");
    const late = r.startedTime!.getTime() - r.scheduledTime.getTime();
    assert.ok(r.scheduledTime.getTime() >= before + 1500, "due after the delay");
    assert.ok(late >= 0 && late < 1500, `started ${late} ms after it was due`);
  });

  test("runAt fires at its time", async () => {
    const at = new Date(Date.now() + 2000);
    const id = await jf.runAt(at, echo.with("at"), { id: "run-at-1" });
    const r = await jf.wait(id, { timeout: 20_000 });
    assert.equal(r.state, "success");
    assert.equal(r.scheduledTime.getTime(), at.getTime());
    const late = r.startedTime!.getTime() - at.getTime();
    assert.ok(late >= 0 && late < 1500, `started ${late} ms after it was due`);
  });

  test("the same id twice: AlreadyExistsError, one run", async () => {
    const id = await jf.enqueue(echo.with("first"), { id: "twice-1" });
    await assert.rejects(jf.enqueue(echo.with("second"), { id: "twice-1" }), (e: unknown) => {
      assert.ok(e instanceof AlreadyExistsError);
      assert.equal(e.id, "twice-1");
      assert.equal(e.code, "alreadyExists");
      return true;
    });
    const r = await jf.wait(id, { timeout: 15_000 });
    assert.deepEqual(r.result, "first");
    await assert.rejects(jf.runAfter("1h", echo.with("third"), { id: "twice-1" }), AlreadyExistsError);
  });

  test("batch: 1,001 runs refused, nothing stored", async () => {
    const before = await quiet(nc);
    const items = Array.from({ length: 1001 }, (_, i) => ({ call: echo.with(i) }));
    await assert.rejects(jf.batch(items), TooManyRunsError);
    assert.deepEqual(await counts(nc), before);
  });

  test("batch: one bad item refuses the whole batch", async () => {
    const before = await quiet(nc);
    const items = [
      { call: echo.with(1), id: "batch-good-1" },
      { call: echo.with(2), id: "batch-good-2", after: 60_000 },
      { call: echo.with(3), id: "bad.id" },
    ];
    await assert.rejects(jf.batch(items), InvalidRunIDError);
    assert.deepEqual(await counts(nc), before);
    await assert.rejects(jf.get("batch-good-1"), NotFoundError);
  });

  test("batch: 1,000 runs, all run", async () => {
    const items = Array.from({ length: 1000 }, (_, i) => ({ call: echo.with({ i }) }));
    const ids = await jf.batch(items);
    assert.equal(ids.length, 1000);
    assert.equal(new Set(ids).size, 1000);
    const last = await jf.wait(ids[999], { timeout: 30_000 });
    assert.deepEqual(last.result, { i: 999 });
    const mixed = await jf.batch([
      { call: echo.with("a"), id: "mixed-1" },
      { call: echo.with("b") },
      { call: echo.with("c"), after: 1000 },
    ]);
    for (const id of mixed) assert.equal((await jf.wait(id, { timeout: 20_000 })).state, "success");
  });

  test("cancel of a pending run: it never starts", async () => {
    const id = await jf.runAfter("2s", echo.with("never"), { id: "cancel-pending-1" });
    const c = await jf.cancel(id);
    assert.equal(c.canceled, true);
    assert.equal(c.run.state, "canceled");
    assert.equal(await streamMsgs(nc, "KV_jetflow_delayed").then(() => 0), 0);
    await new Promise((r) => setTimeout(r, 3500));
    const r = await jf.get(id);
    assert.equal(r.state, "canceled");
    assert.equal(r.attempts, 0);
    const again = await jf.cancel(id);
    assert.equal(again.canceled, false);
    await assert.rejects(jf.cancel("nobody-here"), NotFoundError);
  });

  test("a run no worker serves waits as pending in its message; cancel removes it", async () => {
    const unserved = defineFunction<number>("nobody.serves.this");
    const id = await jf.enqueue(unserved.with(7));
    const r = await jf.get(id);
    assert.equal(r.state, "pending");
    assert.equal(r.revision, 0, "read from its waiting message");
    assert.equal(r.args, 7);
    const first: Run[] = [];
    for await (const x of jf.watch(id, { timeout: 5000 })) {
      first.push(x);
      break;
    }
    assert.equal(first[0]?.state, "pending");
    const before = await streamMsgs(nc, "JETFLOW_FN");
    const c = await jf.cancel(id);
    assert.equal(c.canceled, true);
    assert.equal(await streamMsgs(nc, "JETFLOW_FN"), before - 1, "its message purged");
    assert.equal((await jf.get(id)).state, "canceled");
  });

  test("wait and watch stop at their timeout or signal", async () => {
    const t0 = Date.now();
    await assert.rejects(jf.wait("never-made-1", { timeout: 300 }), (e: unknown) => (e as Error).name === "TimeoutError");
    assert.ok(Date.now() - t0 < 3000);
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error("stop")), 200);
    await assert.rejects(async () => {
      for await (const _ of jf.watch("never-made-2", { signal: ac.signal })) void _;
    }, /stop/);
  });

  test("cancel of a running run ends its handler", async () => {
    const id = await jf.enqueue(sleep.with({ ms: 20_000 }));
    for await (const r of jf.watch(id, { timeout: 15_000 })) if (r.state === "inProgress") break;
    const c = await jf.cancel(id);
    assert.equal(c.canceled, true);
    const r = await jf.wait(id, { timeout: 15_000 });
    assert.equal(r.state, "canceled");
  });

  test("watch and wait see every state", async () => {
    // A delayed run that works a while: pending, inProgress (0 %, then 50 %), success.
    const sid = await jf.runAfter(500, sleep.with({ ms: 1200 }));
    const seen: Run[] = [];
    for await (const r of jf.watch(sid, { timeout: 20_000 })) seen.push(r);
    const states = seen.map((r) => r.state);
    assert.equal(states[0], "pending", states.join(","));
    assert.ok(states.includes("inProgress"), states.join(","));
    assert.equal(states[states.length - 1], "success", states.join(","));
    const progress = seen.map((r) => r.progress?.message);
    assert.ok(progress.includes("sleeping") && progress.includes("halfway"), `progress seen: ${progress}`);
    assert.equal(seen.find((r) => r.progress?.message === "halfway")?.progress?.percent, 50);
    assert.deepEqual(seen[seen.length - 1].result, { slept: 1200 });
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].revision > seen[i - 1].revision, "revisions in order");
    // A retry: the failed attempt's pending record (attempts 1, its error), then the success.
    // (watched before it exists, so that no write goes unseen)
    const id = "retry-watched-1";
    const tries: Run[] = [];
    const watching = (async () => {
      for await (const r of jf.watch(id, { timeout: 20_000 })) tries.push(r);
    })();
    await new Promise((r) => setTimeout(r, 500));
    await jf.enqueue(fail.with({ times: 1, message: "once" }), { id });
    await watching;
    const retried = tries.find((r) => r.state === "pending" && r.attempts === 1);
    assert.ok(retried, `a pending record between the attempts: ${tries.map((r) => r.state)}`);
    assert.equal(retried.error, "once");
    const end = tries[tries.length - 1];
    assert.equal(end.state, "success");
    assert.deepEqual(end.result, { attempts: 2 });
    assert.equal(end.history?.length, 2);
    // failed
    const fid = await jf.enqueue(fail.with({ permanent: true, message: "no" }));
    const f = await jf.wait(fid, { timeout: 15_000 });
    assert.equal(f.state, "failed");
    assert.equal(f.permanent, true);
    assert.equal(f.error, "no");
    // a run waited for before it exists
    const w = jf.wait("later-made-1", { timeout: 15_000 });
    await new Promise((r) => setTimeout(r, 300));
    await jf.enqueue(echo.with(1), { id: "later-made-1" });
    assert.equal((await w).state, "success");
  });

  test("startWorkflow and sendEvent resume a waiting workflow within a second", async () => {
    const id = await jf.startWorkflow("demo.flow", { order: 42 }, { id: "flow-1" });
    assert.equal(id, "flow-1");
    await assert.rejects(jf.startWorkflow("demo.flow", { order: 42 }, { id: "flow-1" }), AlreadyExistsError);
    // The first segment runs and parks at its await.
    const seg = await jf.wait("flow-1-seg1", { timeout: 15_000 });
    assert.equal(seg.state, "success");
    assert.notEqual((await jf.get(id)).state, "success");
    const t0 = Date.now();
    await jf.sendEvent(id, "approve", { by: "ann", ok: true });
    const r = await jf.wait(id, { timeout: 10_000 });
    const took = Date.now() - t0;
    assert.equal(r.state, "success");
    assert.deepEqual(r.result, { by: "ann", ok: true });
    assert.ok(took < 1000, `resumed after ${took} ms`);
    await assert.rejects(jf.sendEvent(id, "approve", 1), EndedError);
    await assert.rejects(jf.sendEvent("unicode-1", "approve", 1), NotAWorkflowError);
    await assert.rejects(jf.sendEvent("wf-none", "approve", 1), NotFoundError);
  });

  test("an event sent before the await waits for it; a workflow due later", async () => {
    const id = await jf.startWorkflow("demo.flow", null, { after: 1000 });
    await jf.sendEvent(id, "approve", "early");
    const r = await jf.wait(id, { timeout: 20_000 });
    assert.equal(r.state, "success");
    assert.equal(r.result, "early");
  });

  test("args just over the limit: ArgsTooLargeError, nothing stored", async () => {
    const max = jf.maxPayload;
    assert.equal(max, 1024 * 1024);
    const before = await quiet(nc);
    const over = "x".repeat(max - 4096 - 2 + 1); // a JSON string: 2 quotes
    await assert.rejects(jf.enqueue(echo.with(over)), ArgsTooLargeError);
    await assert.rejects(jf.enqueue(echo.with(over), { id: "too-big-1" }), ArgsTooLargeError);
    await assert.rejects(jf.batch([{ call: echo.with(over) }]), ArgsTooLargeError);
    assert.deepEqual(await counts(nc), before);
    await assert.rejects(jf.get("too-big-1"), NotFoundError);
    // At the limit it is accepted, and its record holds the args whole
    // (the worker then finds no room for a result: that is the Go limit).
    const pad = "y".repeat(max - 4096 - '{"ms":1,"pad":""}'.length);
    const id = await jf.enqueue(sleep.with({ ms: 1, pad } as { ms: number }));
    const r = await jf.wait(id, { timeout: 15_000 });
    assert.equal((r.args as { pad: string }).pad.length, pad.length);
    // Well within it, it runs.
    const id2 = await jf.enqueue(sleep.with({ ms: 1, pad: pad.slice(pad.length / 2) } as { ms: number }));
    assert.equal((await jf.wait(id2, { timeout: 15_000 })).state, "success");
  });
});

// ---------------------------------------------------------------- permissions

/** permissionsConf is docs/permissions.md's server configuration, with these passwords. */
function permissionsConf(): string {
  const doc = readFileSync(path.join(repoRoot, "docs", "permissions.md"), "utf8");
  const m = doc.match(/<!-- permissions\.conf[^>]*-->\s*```\n([\s\S]*?)```/);
  assert.ok(m, "docs/permissions.md has its configuration block");
  let conf = m[1].replace(/\$([A-Z]+)_PASSWORD/g, (_s, role: string) => `"${role.toLowerCase()}-pw"`);
  // A user with no right at all, for the refusals.
  conf = conf.replace("users = [", `users = [\n    { user: nobody, password: "nobody-pw", permissions: { publish: { allow: ["_INBOX.>"] }, subscribe: { allow: ["_INBOX.>"] } } }`);
  return conf;
}

describe("integration: docs/permissions.md's users", { skip: peerMissing() || false }, () => {
  let srv: NatsServer;
  let peer: Proc;

  before(async () => {
    srv = await NatsServer.start({ conf: permissionsConf() });
    peer = await startPeer(srv.url, { user: "admin", password: "admin-pw" });
  });
  after(async () => {
    await peer?.stop();
    await srv?.stop();
  });

  test("the producer user: everything a producer does works", async () => {
    const nc = await connect({ servers: srv.url, user: "producer", pass: "producer-pw" });
    try {
      const jf = await Client.connect(nc);
      const id = await jf.enqueue(echo.with("p"));
      assert.equal((await jf.wait(id, { timeout: 15_000 })).result, "p");
      const kid = await jf.enqueue(echo.with("k"), { id: "perm-key-1" });
      await assert.rejects(jf.enqueue(echo.with("k"), { id: kid }), AlreadyExistsError);
      const later = await jf.runAfter(60_000, echo.with("later"), { id: "perm-later-1" });
      assert.equal((await jf.cancel(later)).canceled, true);
      const ids = await jf.batch([{ call: echo.with(1) }, { call: echo.with(2), id: "perm-batch-1" }]);
      assert.equal((await jf.wait(ids[1], { timeout: 15_000 })).state, "success");
      const wf = await jf.startWorkflow("demo.flow", 1, { id: "perm-flow-1" });
      await jf.wait(`${wf}-seg1`, { timeout: 15_000 });
      await jf.sendEvent(wf, "approve", "yes");
      assert.equal((await jf.wait(wf, { timeout: 15_000 })).result, "yes");
    } finally {
      await nc.close();
    }
  });

  test("the read-only CLI user reads runs: get, wait, watch", async () => {
    const pc = await connect({ servers: srv.url, user: "producer", pass: "producer-pw" });
    const nc = await connect({ servers: srv.url, user: "cli", pass: "cli-pw" });
    try {
      const id = await (await Client.connect(pc)).enqueue(sleep.with({ ms: 300 }), { id: "read-only-1" });
      const jf = await Client.connect(nc);
      const states: string[] = [];
      for await (const r of jf.watch(id, { timeout: 15_000 })) states.push(r.state);
      assert.equal(states[states.length - 1], "success");
      assert.equal((await jf.wait(id, { timeout: 5000 })).state, "success");
      assert.equal((await jf.get(id)).state, "success");
    } finally {
      await nc.close();
      await pc.close();
    }
  });

  test("a user without the rights gets the permission error at once", async () => {
    // The read-only CLI user may look the streams up, not publish runs.
    const nc = await connect({ servers: srv.url, user: "cli", pass: "cli-pw" });
    try {
      const jf = await Client.connect(nc);
      for (const attempt of [
        () => jf.enqueue(echo.with(1)),
        () => jf.enqueue(echo.with(1), { id: "denied-1" }),
        () => jf.batch([{ call: echo.with(1) }, { call: echo.with(2) }]),
        () => jf.startWorkflow("demo.flow", 1),
      ]) {
        const t0 = Date.now();
        await assert.rejects(attempt(), (e: unknown) => {
          assert.ok(e instanceof PermissionDeniedError, String(e));
          assert.equal(e.code, "permissionDenied");
          return true;
        });
        assert.ok(Date.now() - t0 < 1000, `refused after ${Date.now() - t0} ms`);
      }
    } finally {
      await nc.close();
    }
    const nobody = await connect({ servers: srv.url, user: "nobody", pass: "nobody-pw" });
    try {
      const t0 = Date.now();
      await assert.rejects(Client.connect(nobody), PermissionDeniedError);
      assert.ok(Date.now() - t0 < 1000, `refused after ${Date.now() - t0} ms`);
    } finally {
      await nobody.close();
    }
  });
});
