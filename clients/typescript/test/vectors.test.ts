// The shared wire-format vectors (streams/testdata/vectors, README.md there):
// limits and decoding run the client's own checks and decoders; every
// produce vector runs the client against a real nats-server on freshly
// provisioned streams, and what reaches the server (every write, its
// headers, body and the server's ack) is compared with the vector.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { connect } from "@nats-io/transport-node";
import type { Msg, NatsConnection } from "@nats-io/transport-node";
import { headers as natsHeaders } from "@nats-io/nats-core";
import {
  checkBatchArgs,
  checkRunArgs,
  Client,
  JetflowError,
  rawCall,
  RawJSON,
  validateEventName,
  validateName,
  validateRunID,
  wire,
  time,
} from "../src/index.js";
import type { Run } from "../src/index.js";
import { NatsServer, provision, vectorsDir } from "./harness.js";

const dir = vectorsDir();
const present = existsSync(path.join(dir, "produce.json"));
if (!present) {
  console.log(`# vectors: ${dir} not found: the shared vectors are not on this branch yet (set JETFLOW_VECTORS to run them)`);
}

function load(name: string): any {
  const v = JSON.parse(readFileSync(path.join(dir, name), "utf8"));
  assert.equal(v.format, 1, `${name}: a format this runner does not know`);
  return v;
}

function valueOf(v: any): string {
  if (typeof v === "string") return v;
  return (v.prefix ?? "") + v.repeat.repeat(v.times);
}

function kindOf(e: unknown): string {
  if (e instanceof JetflowError) return e.code;
  throw e;
}

// ------------------------------------------------------------------ limits

describe("vectors: limits.json", { skip: !present }, () => {
  const L = present ? load("limits.json") : {};
  test("the numbers are Go's", () => {
    assert.equal(L.maxBatch, 1000);
    assert.equal(L.maxBatchArgs, 8 << 20);
    assert.equal(L.recordRoom, 4096);
  });
  const cases: [string, (s: string) => void][] = [
    ["functionNames", validateName],
    ["runIds", validateRunID],
    ["eventNames", validateEventName],
  ];
  for (const [field, check] of cases) {
    test(field, () => {
      for (const c of L[field] ?? []) {
        const v = valueOf(c.value);
        let got = "valid";
        try {
          check(v);
        } catch (e) {
          got = kindOf(e);
        }
        assert.equal(got, c.valid ? "valid" : c.error, `${field} ${JSON.stringify(v).slice(0, 80)}`);
      }
    });
  }
  test("args", () => {
    for (const c of L.args ?? []) {
      let got = "ok";
      try {
        checkRunArgs(c.argsBytes, c.maxPayload);
      } catch (e) {
        got = kindOf(e);
      }
      assert.equal(got, c.error ?? "ok", JSON.stringify(c));
    }
  });
  test("batches", () => {
    for (const c of L.batches ?? []) {
      let got = "ok";
      try {
        checkBatchArgs(new Array(c.items).fill(c.argsBytesEach), c.maxPayload);
      } catch (e) {
        got = kindOf(e);
      }
      assert.equal(got, c.error ?? "ok", JSON.stringify(c));
    }
  });
});

describe("vectors: limits.json on servers of each max payload", { skip: !present }, () => {
  const L = present ? load("limits.json") : {};
  const payloads = [...new Set<number>([...(L.args ?? []), ...(L.batches ?? []), ...(L.events ?? []), ...(L.workflowInputs ?? [])].map((c: any) => c.maxPayload))];
  const jsonString = (n: number) => new RawJSON('"' + "x".repeat(n - 2) + '"');
  const call = (n: number) => ({ name: "limits.fn", kind: "retryable" as const, args: jsonString(n) });
  for (const max of payloads) {
    test(`max payload ${max}`, async () => {
      const srv = await NatsServer.start({ conf: `max_payload: ${max}` });
      provision(srv.url);
      const nc = await connect({ servers: srv.url });
      try {
        let now = time.nowNanos();
        const c = await Client.connect(nc, { now: () => now });
        const count = async () => {
          const out: number[] = [];
          for (const st of ["JETFLOW_FN", "KV_jetflow_runs", "KV_jetflow_delayed", "KV_jetflow_journal"]) {
            out.push((await nc.request(`$JS.API.STREAM.INFO.${st}`, undefined, { timeout: 5000 })).json<any>().state.last_seq);
          }
          return out;
        };
        const attempt = async (what: string, want: string | undefined, op: () => Promise<unknown>) => {
          const before = await count();
          let got = "ok";
          try {
            await op();
          } catch (e) {
            got = kindOf(e);
          }
          assert.equal(got, want ?? "ok", what);
          if (want) assert.deepStrictEqual(await count(), before, `${what}: nothing stored`);
        };
        assert.equal(c.maxPayload, max);
        for (const a of (L.args ?? []).filter((x: any) => x.maxPayload === max)) {
          await attempt(`args ${a.argsBytes}`, a.error, () => c.enqueue(call(a.argsBytes)));
        }
        for (const b of (L.batches ?? []).filter((x: any) => x.maxPayload === max)) {
          await attempt(`batch ${b.items} x ${b.argsBytesEach}`, b.error, () =>
            c.batch(Array.from({ length: b.items }, () => ({ call: call(b.argsBytesEach) }))));
        }
        for (const e of (L.events ?? []).filter((x: any) => x.maxPayload === max)) {
          await attempt(`event ${e.payloadBytes}`, e.error, () => c.sendEvent("wf-none", "approve", jsonString(e.payloadBytes)));
        }
        for (const w of (L.workflowInputs ?? []).filter((x: any) => x.maxPayload === max)) {
          now = time.parseRFC3339(w.now);
          await attempt(`workflow input ${w.inputBytes}`, w.error, () => c.startWorkflow("demo.flow", jsonString(w.inputBytes), { id: w.id }));
        }
      } finally {
        await nc.close();
        await srv.stop();
      }
    });
  }
});

// ------------------------------------------------------------------ decode

const timeKeys = new Set(["scheduledTime", "creationTime", "startedTime", "heartbeat", "completedTime", "updated"]);

/** normExpect turns a vector's expected run into what this client can hold (times in ms). */
function normExpect(v: any, key = ""): any {
  if (Array.isArray(v)) return v.map((x) => normExpect(x));
  if (v && typeof v === "object") {
    const o: any = {};
    for (const [k, x] of Object.entries(v)) o[k] = normExpect(x, k);
    return o;
  }
  if (timeKeys.has(key) && typeof v === "string") return time.toDate(time.parseRFC3339(v)).getTime();
  return v;
}

/** normRun is a decoded run in the vectors' shape. */
function normRun(r: Run): any {
  const o: any = {};
  for (const [k, v] of Object.entries(r)) {
    if (k === "argsJSON" || k === "resultJSON" || k === "timeout") continue;
    if (k === "timeoutNanos") {
      o.timeout = Number(v);
      continue;
    }
    o[k] = v;
  }
  return JSON.parse(JSON.stringify(o, (_k, v) => (typeof v === "string" && /^\d{4}-\d\d-\d\dT/.test(v) ? Date.parse(v) : v)));
}

describe("vectors: decode.json", { skip: !present }, () => {
  const D = present ? load("decode.json") : { vectors: [] };
  const names = new wire.Names("jetflow");
  for (const v of D.vectors) {
    test(v.name, () => {
      let run: Run | null;
      let err = "";
      try {
        if (v.source === "kv") run = wire.decodeRecord(v.bodyText, v.revision);
        else {
          const h = new Map(Object.entries((v.headers ?? {}) as Record<string, string>).map(([k, x]) => [k.toLowerCase(), x]));
          run = wire.queuedRun(names, v.subject, (k) => h.get(k.toLowerCase()) ?? "", v.bodyText, time.parseRFC3339(v.streamTime));
          if (!run) err = "notFound";
        }
      } catch (e) {
        run = null;
        err = kindOf(e);
      }
      if (v.error) {
        assert.equal(err, v.error);
        return;
      }
      assert.equal(err, "", `decoding failed: ${err}`);
      assert.deepStrictEqual(normRun(run!), normExpect(v.expect));
    });
  }
});

// ------------------------------------------------------------------ produce

interface Write {
  kind: string;
  subject: string;
  headers: Record<string, string>;
  bodyText: string;
  body?: unknown;
  ack?: any;
}

describe("vectors: produce.json (a real nats-server)", { skip: !present }, () => {
  const P = present ? load("produce.json") : { vectors: [] };
  const byName = new Map<string, any>(P.vectors.map((v: any) => [v.name, v]));
  let srv: NatsServer;
  let admin: NatsConnection;
  let configs: any[] = [];

  before(async () => {
    srv = await NatsServer.start({ conf: `max_payload: ${P.maxPayload}` });
    provision(srv.url);
    admin = await connect({ servers: srv.url });
    const names = (await req(admin, "$JS.API.STREAM.NAMES", {})).streams as string[];
    for (const n of names) configs.push((await req(admin, `$JS.API.STREAM.INFO.${n}`, undefined)).config);
  });
  after(async () => {
    await admin?.close();
    await srv?.stop();
  });

  async function req(nc: NatsConnection, subject: string, body: unknown): Promise<any> {
    const m = await nc.request(subject, body === undefined ? undefined : JSON.stringify(body), { timeout: 5000 });
    const r = m.json<any>();
    if (r.error) throw new Error(`${subject}: ${JSON.stringify(r.error)}`);
    return r;
  }

  /**
   * fresh deletes and recreates every stream: sequences start at 1 again.
   * A loaded server may still be removing a deleted stream's store when the
   * create comes ("error creating store for stream"): the create is made
   * again for a while, and a stream a failed reset left deleted is no error.
   */
  async function fresh(): Promise<void> {
    for (const c of configs) {
      try {
        await req(admin, `$JS.API.STREAM.DELETE.${c.name}`, undefined);
      } catch (e) {
        if (!String(e).includes("10059")) throw e;
      }
      for (let i = 0; ; i++) {
        try {
          await req(admin, `$JS.API.STREAM.CREATE.${c.name}`, c);
          break;
        } catch (e) {
          if (i >= 50) throw e;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    }
  }

  function setupWrites(v: any): Write[] {
    if (v.setupFrom) {
      const from = byName.get(v.setupFrom);
      assert.ok(from, `setupFrom ${v.setupFrom}`);
      return [...setupWrites(from), ...from.writes];
    }
    return v.setup ?? [];
  }

  async function replay(ws: Write[]): Promise<void> {
    for (const w of ws) {
      const h = Object.keys(w.headers).length ? natsHeaders() : undefined;
      for (const [k, x] of Object.entries(w.headers)) h!.set(k, x);
      if (w.kind === "publish" && w.ack) {
        const m = await admin.request(w.subject, w.bodyText, { headers: h, timeout: 5000 });
        const ack = m.json<any>();
        if (!w.ack.error) assert.equal(ack.seq, w.ack.seq, `setup ${w.subject}: ${JSON.stringify(ack)}`);
      } else if (w.kind === "request") {
        await admin.request(w.subject, w.bodyText, { headers: h, timeout: 5000 });
      } else {
        admin.publish(w.subject, w.bodyText, { headers: h });
      }
    }
    await admin.flush();
  }

  function isWrite(subject: string): boolean {
    return subject.startsWith("jetflow.fn.") || subject.startsWith("$KV.") || subject === "jetflow.cancel" || subject.startsWith("$JS.API.STREAM.PURGE.");
  }

  async function run(v: any, c: Client): Promise<any> {
    const op = v.op;
    const o = op.options ?? {};
    const call = (fn: string, args: unknown) => ({ name: fn, kind: "retryable" as const, args });
    const runOpts = { id: o.id, maxAttempts: o.maxAttempts, timeout: o.timeout, parent: o.parent };
    switch (op.type) {
      case "enqueue":
        return { id: await c.enqueue(call(op.function, op.args), runOpts) };
      case "runAfter":
        return { id: await c.runAfter(op.delay, call(op.function, op.args), runOpts) };
      case "runAt":
        return { id: await c.runAt(new Date(op.at), call(op.function, op.args), runOpts) };
      case "batch":
        return {
          ids: await c.batch(
            op.items.map((it: any) => ({
              call: call(it.function, it.args), at: it.at ? new Date(it.at) : undefined,
              id: it.options?.id, maxAttempts: it.options?.maxAttempts, timeout: it.options?.timeout, parent: it.options?.parent,
            })),
          ),
        };
      case "cancel":
        await c.cancel(op.id);
        return {};
      case "startWorkflow":
        return { id: await c.startWorkflow(op.workflow, op.input, { id: o.id, at: o.at ? new Date(o.at) : undefined, after: o.after }) };
      case "sendEvent":
        await c.sendEvent(op.workflowId, op.event, op.payload);
        return {};
    }
    throw new Error(`unknown op ${op.type}`);
  }

  for (const v of P.vectors) {
    test(v.name, async () => {
      await fresh();
      await replay(setupWrites(v));
      // Everything the client sends, and the server's answers, as a
      // subscriber of every subject sees them.
      const cap = await connect({ servers: srv.url });
      const seen: Msg[] = [];
      const sub = cap.subscribe(">", { callback: (_e, m) => { seen.push(m); } });
      await cap.flush();
      const nc = await connect({ servers: srv.url });
      const ids: string[] = [...v.generatedIds];
      let extra = 0; // ids a vector does not list are seen nowhere (a batch refused after its first item's)
      const now = time.parseRFC3339(v.now);
      let result: any;
      try {
        const c = await Client.connect(nc, { now: () => now, newId: () => ids.shift() ?? `unlisted${++extra}` });
        try {
          result = await run(v, c);
        } catch (e) {
          result = { error: kindOf(e) };
          if (e && typeof e === "object" && "id" in e) result.id = (e as { id: string }).id;
        }
        await nc.flush();
        // Until every reply of a request seen has been seen too (JetStream
        // answers from another goroutine: an ack may overtake or trail its
        // request), 5 s at most.
        for (let i = 0; i < 100; i++) {
          await cap.flush();
          const replies = new Set(seen.filter((m) => m.subject.startsWith("_INBOX.")).map((m) => m.subject));
          if (seen.every((m) => !isWrite(m.subject) || !m.reply || replies.has(m.reply))) break;
          await new Promise((r) => setTimeout(r, 50));
        }
      } finally {
        sub.unsubscribe();
        await nc.close();
        await cap.close();
      }
      const expected = { ...v.result };
      if (expected.error && expected.id === undefined) delete result.id;
      assert.deepStrictEqual(result, expected, "result");
      assert.deepStrictEqual(ids, [], "every generated id used");
      const replies = new Map<string, Msg>();
      for (const m of seen) if (m.subject.startsWith("_INBOX.")) replies.set(m.subject, m);
      const got = seen.filter((m) => isWrite(m.subject));
      const want: Write[] = v.writes;
      assert.deepStrictEqual(got.map((m) => m.subject), want.map((w) => w.subject), "the subjects written, in order");
      got.forEach((m, i) => {
        const w = want[i];
        const kind = m.subject.startsWith("$JS.API.") ? "request" : m.subject === "jetflow.cancel" ? "core" : "publish";
        assert.equal(kind, w.kind, `write ${i} (${w.subject}): kind`);
        const h: Record<string, string> = {};
        for (const k of m.headers?.keys() ?? []) h[k] = m.headers!.get(k);
        assert.deepStrictEqual(h, w.headers, `write ${i} (${w.subject}): headers`);
        const text = m.string();
        if (w.body !== undefined) assert.deepStrictEqual(JSON.parse(text), w.body, `write ${i} (${w.subject}): body`);
        else assert.equal(text, w.bodyText, `write ${i} (${w.subject}): body`);
        if (w.ack) {
          const r = m.reply ? replies.get(m.reply) : undefined;
          assert.ok(r, `write ${i} (${w.subject}): no ack seen`);
          const ack = r.json<any>();
          if (w.ack.error) assert.equal(ack.error?.err_code, w.ack.error.err_code, `write ${i}: ack ${JSON.stringify(ack)}`);
          else assert.deepStrictEqual({ stream: ack.stream, seq: ack.seq }, { stream: w.ack.stream, seq: w.ack.seq }, `write ${i}: ack`);
        }
      });
    });
  }
});

void rawCall;
