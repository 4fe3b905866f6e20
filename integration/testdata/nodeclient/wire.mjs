// A producer in another language: nats.js publishes runs by hand, as
// docs/wire-format.md describes, and reads their records from the runs
// bucket. integration/wireformat_node_test.go runs it against a Go worker.
//
// node wire.mjs <nats url> <id prefix>
// (NATS_USER and NATS_PASSWORD, when set, are the user to connect as)
// prints one JSON line per case: what the stream acknowledged and the
// record the case ended with.
import { connect, headers, StringCodec } from "nats";

const sc = StringCodec();
const [url, prefix] = process.argv.slice(2);
const auth = process.env.NATS_USER ? { user: process.env.NATS_USER, pass: process.env.NATS_PASSWORD } : {};
const nc = await connect({ servers: url, ...auth });
const js = nc.jetstream();
const kv = await js.views.kv("jetflow_runs");

// ended waits, with a KV watch, for run id's record to reach an end state.
async function ended(id) {
  const w = await kv.watch({ key: id });
  const timer = setTimeout(() => w.stop(), 30000);
  try {
    for await (const e of w) {
      if (e.operation !== "PUT") continue;
      const r = JSON.parse(sc.decode(e.value));
      if (["success", "failed", "canceled"].includes(r.state)) return r;
    }
  } finally {
    clearTimeout(timer);
  }
  return null;
}

function hdrs(kvs) {
  const h = headers();
  for (const [k, v] of Object.entries(kvs)) h.set(k, v);
  return h;
}

// out prints a case's line, with the state a KV get reads now (a direct
// get of the record's last revision).
async function out(o) {
  const e = await kv.get(o.id);
  o.getState = e && e.value.length ? JSON.parse(sc.decode(e.value)).state : "";
  console.log(JSON.stringify(o));
}

// A run now, with an idempotency key, published twice.
{
  const id = `${prefix}-now`;
  const h = { "Nats-Msg-Id": id, "Jetflow-Max-Attempts": "3", "Jetflow-Timeout": "30s" };
  const ack = await js.publish(`jetflow.fn.emails.send.${id}`, sc.encode(JSON.stringify({ to: "a@b.c" })), { headers: hdrs(h) });
  const again = await js.publish(`jetflow.fn.emails.send.${id}`, sc.encode(JSON.stringify({ to: "x@y.z" })), { headers: hdrs(h) });
  await out({ case: "now", id, stream: ack.stream, duplicate: again.duplicate, record: await ended(id) });
}

// A body that is not JSON.
{
  const id = `${prefix}-notjson`;
  const ack = await js.publish(`jetflow.fn.emails.send.${id}`, sc.encode("not json"));
  await out({ case: "notjson", id, stream: ack.stream, record: await ended(id) });
}

// A header that does not parse.
{
  const id = `${prefix}-badheader`;
  const ack = await js.publish(`jetflow.fn.emails.send.${id}`, sc.encode("{}"), { headers: hdrs({ "Jetflow-Timeout": "soon" }) });
  await out({ case: "badheader", id, stream: ack.stream, record: await ended(id) });
}

// A run due in 2 s: the record, then the delayed entry.
{
  const id = `${prefix}-later`;
  const now = new Date();
  const due = new Date(now.getTime() + 2000);
  const args = { to: "later@b.c" };
  const rec = { id, name: "emails.send", kind: "retryable", args, state: "pending",
    scheduledTime: due.toISOString(), creationTime: now.toISOString(), attempts: 0 };
  const ack = await js.publish(`$KV.jetflow_runs.${id}`, sc.encode(JSON.stringify(rec)), {
    headers: hdrs({ "Nats-Expected-Last-Subject-Sequence": "0", "Jetflow-State": "pending",
      "Jetflow-Function": "emails.send", "Jetflow-Due": String(due.getTime()) }),
  });
  const entry = { fn: "emails.send", id, rev: ack.seq, scheduled: due.toISOString(),
    created: now.toISOString(), args, due: due.toISOString() };
  await js.publish(`$KV.jetflow_delayed.${Math.floor(due.getTime() / 1000)}.${id}`, sc.encode(JSON.stringify(entry)));
  await out({ case: "later", id, due: due.toISOString(), record: await ended(id) });
}

await nc.close();
