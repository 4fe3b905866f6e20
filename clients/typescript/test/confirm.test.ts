// Issue 26's rule on a real server: a create refused by its expected
// sequence is decided by what the runs stream's leader holds. A record of
// this very call (an earlier try that landed, its answer lost) is this
// call's success; an expired record's marker is written over; another
// record is AlreadyExistsError.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";
import { AlreadyExistsError, Client, defineFunction, time, wire } from "../src/index.js";
import { NatsServer, provision } from "./harness.js";

describe("creates confirmed with the leader (issue 26)", () => {
  let srv: NatsServer;
  let nc: NatsConnection;
  const fn = defineFunction<{ n: number }>("confirm.fn");
  const now = time.parseRFC3339("2026-11-25T10:00:00.123Z");
  const names = new wire.Names("jetflow");

  before(async () => {
    srv = await NatsServer.start();
    provision(srv.url);
    nc = await connect({ servers: srv.url });
  });
  after(async () => {
    await nc?.close();
    await srv?.stop();
  });

  async function store(id: string, created: bigint): Promise<number> {
    const m = wire.newRecordMsg(names, {
      id, name: fn.name, kind: "retryable", args: '{"n":1}', state: "pending",
      scheduledTime: created + 60_000_000_000n, creationTime: created,
    });
    const h = (await import("@nats-io/nats-core")).headers();
    for (const [k, v] of m.headers) h.set(k, v);
    const ack = (await nc.request(m.subject, m.data, { headers: h, timeout: 5000 })).json<any>();
    assert.ok(ack.seq, JSON.stringify(ack));
    return ack.seq;
  }

  test("an earlier try of the same call stored: the id, not AlreadyExists", async () => {
    const rev = await store("landed-1", now);
    const c = await Client.connect(nc, { now: () => now });
    const id = await c.runAfter("60s", fn.with({ n: 1 }), { id: "landed-1" });
    assert.equal(id, "landed-1");
    const r = await c.get(id);
    assert.equal(r.revision, rev, "the stored record is the one");
  });

  test("another run's record: AlreadyExistsError", async () => {
    await store("taken-1", now - 5_000_000_000n);
    const c = await Client.connect(nc, { now: () => now });
    await assert.rejects(c.runAfter("60s", fn.with({ n: 1 }), { id: "taken-1" }), AlreadyExistsError);
  });

  test("an expired record's marker is written over", async () => {
    await store("expired-1", now - 5_000_000_000n);
    // A KV delete leaves a marker, as a record's expiry does.
    const h = (await import("@nats-io/nats-core")).headers();
    h.set("KV-Operation", "DEL");
    await nc.request("$KV.jetflow_runs.expired-1", "", { headers: h, timeout: 5000 });
    const c = await Client.connect(nc, { now: () => now });
    assert.equal(await c.runAfter("60s", fn.with({ n: 2 }), { id: "expired-1" }), "expired-1");
    const r = await c.get("expired-1");
    assert.deepEqual(r.args, { n: 2 });
    assert.equal(r.state, "pending");
  });
});
