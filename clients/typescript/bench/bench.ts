// Bench: async enqueue against raw JetStream publishes of the same body
// size, from the same client connection, in the same run, alternating
// rounds. Prints both rates and their ratio (the target: at least 0.5).
//
//   node build/bench/bench.js [--n 20000] [--size 128] [--window 1000] [--rounds 3] [--url nats://...] [--min-ratio 0.5]
//
// Without --url it starts a nats-server of its own (the tests' harness)
// and provisions jetflow's streams; no worker runs, so runs stay queued.

import { parseArgs } from "node:util";
import { connect, createInbox } from "@nats-io/transport-node";
import type { Msg, NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Client, defineFunction } from "../src/index.js";
import { NatsServer, provision } from "../test/harness.js";

const { values } = parseArgs({
  options: {
    n: { type: "string", default: "20000" },
    size: { type: "string", default: "128" },
    window: { type: "string", default: "1000" },
    rounds: { type: "string", default: "3" },
    url: { type: "string" },
    "min-ratio": { type: "string" },
  },
});
const n = Number(values.n);
const size = Number(values.size);
const window = Number(values.window);
const rounds = Number(values.rounds);

/** pipelined runs op n times with at most window calls waiting; calls per second. */
async function pipelined(op: (i: number) => Promise<unknown>): Promise<number> {
  const t0 = process.hrtime.bigint();
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      await op(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(window, n) }, worker));
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  return n / s;
}

/**
 * leanPublisher is a raw JetStream publish without nats.js's request
 * machinery: a core publish with a reply subject of one subscription, the
 * ack matched by token (what the client's own window does for enqueues).
 */
function leanPublisher(nc: NatsConnection): (subject: string, data: Uint8Array) => Promise<Msg> {
  const prefix = createInbox() + ".";
  const waiting = new Map<number, (m: Msg) => void>();
  let next = 1;
  nc.subscribe(prefix + "*", { callback: (_e, m) => {
    const tok = Number(m.subject.slice(prefix.length));
    waiting.get(tok)?.(m);
    waiting.delete(tok);
  } });
  return (subject, data) => new Promise((resolve) => {
    const tok = next++;
    waiting.set(tok, resolve);
    nc.publish(subject, data, { reply: prefix + tok });
  });
}

async function main(): Promise<void> {
  const srv = values.url ? undefined : await NatsServer.start();
  const url = values.url ?? srv!.url;
  if (srv) provision(url);
  const nc = await connect({ servers: url });
  const js = jetstream(nc);
  const jf = await Client.connect(nc);
  const fn = defineFunction<{ pad: string }>("bench.echo");
  // Args of `size` bytes of JSON: {"pad":"xxx"}
  const args = { pad: "x".repeat(Math.max(0, size - '{"pad":""}'.length)) };
  const body = new TextEncoder().encode(JSON.stringify(args));
  // warm up both paths
  await Promise.all(Array.from({ length: 3000 }, () => jf.enqueue(fn.with(args))));
  await Promise.all(Array.from({ length: 3000 }, (_, i) => js.publish(`jetflow.fn.bench.raw.w${i}`, body)));
  const lean = leanPublisher(nc);
  let bestE = 0;
  let bestR = 0;
  let bestL = 0;
  for (let r = 0; r < rounds; r++) {
    const e = await pipelined(() => jf.enqueue(fn.with(args)));
    const raw = await pipelined((i) => js.publish(`jetflow.fn.bench.raw.r${r}x${i}`, body));
    const l = await pipelined((i) => lean(`jetflow.fn.bench.lean.r${r}x${i}`, body));
    bestE = Math.max(bestE, e);
    bestR = Math.max(bestR, raw);
    bestL = Math.max(bestL, l);
    console.log(`round ${r + 1}: enqueue ${e.toFixed(0)}/s, raw js.publish ${raw.toFixed(0)}/s (ratio ${(e / raw).toFixed(2)}), lean raw publish ${l.toFixed(0)}/s (ratio ${(e / l).toFixed(2)})`);
  }
  const ratio = bestE / bestR;
  console.log(`bench (${n} calls of ${body.length} bytes, ${window} in flight, best of ${rounds}): async enqueue ${bestE.toFixed(0)} runs/s, raw JetStream publish (js.publish) ${bestR.toFixed(0)} msgs/s, ratio ${ratio.toFixed(2)}; against a lean raw publish (core publish + reply, no request machinery) ${bestL.toFixed(0)} msgs/s, ratio ${(bestE / bestL).toFixed(2)}`);
  await nc.close();
  await srv?.stop();
  const min = values["min-ratio"] ? Number(values["min-ratio"]) : undefined;
  if (min !== undefined && ratio < min) {
    console.error(`bench: ratio ${ratio.toFixed(2)} below ${min}`);
    process.exit(1);
  }
}

await main();
