// A Node.js producer feeding jetflow's Go worker: it enqueues a run, a
// delayed run and a run with an idempotency key, starts a workflow and
// sends it the event it waits for, and prints what the Go side did.
//
// Run a Go worker and scheduler first: the repository's client peer serves
// the functions and the workflow used here (demo.echo, demo.sleep,
// demo.flow), with a nats-server started with JetStream (`nats-server -js`):
//
//   go run ./integration/internal/clientpeer -url nats://127.0.0.1:4222
//   node producer.mjs nats://127.0.0.1:4222
//
// clients/typescript/test/pack.test.ts runs it, installed from the
// package's tarball, against that peer.
import { connect } from "@nats-io/transport-node";
import { AlreadyExistsError, Client, defineFunction } from "@jetflow-dev/client";

const url = process.argv[2] ?? "nats://127.0.0.1:4222";
const nc = await connect({ servers: url });
const jf = await Client.connect(nc);

// The functions the Go worker serves, with the shape of their arguments.
const echo = defineFunction("demo.echo"); // returns its args as its result
const sleep = defineFunction("demo.sleep"); // {ms}: sleeps, reports progress

// A run now: its id at once, its outcome when the worker is done.
const id = await jf.enqueue(echo.with({ hello: "from Node.js", n: 42 }));
const run = await jf.wait(id, { timeout: 30_000 });
console.log(`enqueue: ${id} ${run.state} ${JSON.stringify(run.result)}`);

// A run in one second.
const later = await jf.runAfter(1000, echo.with("a second later"));
const done = await jf.wait(later, { timeout: 30_000 });
console.log(`runAfter: ${later} ${done.state} ${done.startedTime.getTime() - done.scheduledTime.getTime() < 2000 ? "on time" : "late"}`);

// An idempotency key: the second enqueue of the same id makes no second run.
const key = `node-example-${Date.now()}`;
await jf.enqueue(echo.with("once"), { id: key, maxAttempts: 3, timeout: "30s" });
try {
  await jf.enqueue(echo.with("twice"), { id: key });
} catch (e) {
  if (!(e instanceof AlreadyExistsError)) throw e;
  console.log(`idempotency: ${e.id} already exists (${e.code})`);
}

// Every change of a run, as it happens.
const states = [];
for await (const r of jf.watch(await jf.enqueue(sleep.with({ ms: 300 })), { timeout: 30_000 })) {
  states.push(r.state === "inProgress" && r.progress?.message ? `${r.state}(${r.progress.message})` : r.state);
}
console.log(`watch: ${states.join(" -> ")}`);

// A workflow, and the event it waits for (sent before its await waits for it).
const wf = await jf.startWorkflow("demo.flow", { order: 42 });
await jf.sendEvent(wf, "approve", { by: "node", ok: true });
const flow = await jf.wait(wf, { timeout: 30_000 });
console.log(`workflow: ${wf} ${flow.state} ${JSON.stringify(flow.result)}`);

await nc.close();
