// The producer: schedules runs, starts workflows, sends them events, cancels
// runs and reads their status, over a NATS connection the caller owns.
// Named after the Go producer (package producer) and doing what it does on
// the wire (docs/wire-format.md).

import { createInbox, headers as natsHeaders, nuid } from "@nats-io/nats-core";
import type { Msg, MsgHdrs, NatsConnection, Subscription } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import type { JetStreamClient } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { KV } from "@nats-io/kv";
import {
  AlreadyExistsError,
  ArgsTooLargeError,
  BadArgsError,
  BatchFailedError,
  DefinitionInactiveError,
  EndedError,
  InvalidNameError,
  JetflowError,
  NotAWorkflowError,
  NotFoundError,
  PermissionDeniedError,
  TimeoutError,
  TooManyRunsError,
} from "./errors.js";
import { encodeArgs, goJSON, RawJSON, utf8Length } from "./json.js";
import {
  formatGoDuration,
  formatRFC3339Nano,
  fromDate,
  Nanos,
  nowNanos,
  parseGoDuration,
  parseRFC3339,
  timeFits,
} from "./time.js";
import { argsLimit, checkRunArgs, isValidRunID, MAX_BATCH, MAX_CALL_ARGS, validateEventName, validateName, validateRunID } from "./validate.js";
import {
  decodeRecord,
  delayedKey,
  delayedMsg,
  directMessage,
  Envelope,
  envelopeOf,
  eventJSON,
  eventKey,
  eventLimit,
  H,
  isMarker,
  isTerminal,
  Kind,
  Names,
  NewRecord,
  newRecordMsg,
  queuedRun,
  recordHeaders,
  reencodeRecord,
  Run,
  runMessage,
  segArgsJSON,
  segmentFunction,
  segmentID,
  wakeArgsJSON,
  wakeFunction,
  WireMsg,
} from "./wire.js";

// ---------------------------------------------------------------- functions

/** A call of a function with its arguments (jetflow.Call). */
export interface Call<Args = unknown> {
  readonly name: string;
  readonly kind: Kind;
  readonly args: Args;
}

/** A typed reference to a function a Go worker serves (jetflow.Function). */
export interface JetflowFunction<Args> {
  readonly name: string;
  readonly kind: Kind;
  /** with pairs the function with its arguments (Go's Function.With). */
  with(args: Args): Call<Args>;
}

/**
 * defineFunction names a function served by a Go worker
 * (jetflow.Define[Args]("emails.send")): the type parameter is its
 * arguments' shape. Throws InvalidNameError for a name Go would refuse.
 */
export function defineFunction<Args = unknown>(name: string, opts: { kind?: Kind } = {}): JetflowFunction<Args> {
  validateName(name);
  const kind = opts.kind ?? "retryable";
  if (kind !== "retryable" && kind !== "atMostOnce") throw new InvalidNameError(`${name}: unknown kind ${JSON.stringify(kind)}`);
  return Object.freeze({ name, kind, with: (args: Args): Call<Args> => Object.freeze({ name, kind, args }) });
}

/** rawCall is a call whose arguments are JSON text already (jetflow.RawCall). */
export function rawCall(name: string, argsJSON: string): Call<RawJSON> {
  return { name, kind: "retryable", args: new RawJSON(argsJSON) };
}

// ---------------------------------------------------------------- options

/** A duration: milliseconds, or a Go duration string ("30s", "1m30s", "500ms"). */
export type Duration = number | string;

/** Options of one run (producer.Option). */
export interface RunOptions {
  /** The run's id, an idempotency key: an id that exists is AlreadyExistsError, never a second run. Default: generated. */
  id?: string;
  /** Overrides the function's max attempts (first included). */
  maxAttempts?: number;
  /** Overrides the function's timeout. */
  timeout?: Duration;
  /** The run that scheduled this one (recorded as its parent). */
  parent?: string;
}

/** One run of a batch (producer.Item). */
export interface BatchItem extends RunOptions {
  call: Call<unknown>;
  /** When the run starts (default now). */
  at?: Date;
  /** Or: how long from now. */
  after?: Duration;
}

/** Options of startWorkflow (workflow.StartOption). */
export interface StartOptions {
  /** The workflow's id, an idempotency key. Default: generated. */
  id?: string;
  /** Start at this time (a past time means now). */
  at?: Date;
  /** Or: start after this long. */
  after?: Duration;
}

/** What cancel did (producer.CancelResult). */
export interface CancelResult {
  /** true when this call canceled the run; false when it had already ended (nothing changed). */
  canceled: boolean;
  /** The run's record after the call. */
  run: Run;
}

/** Options of the client. */
export interface ClientOptions {
  /** The deployment's prefix (streams.Config.Prefix). Default "jetflow". */
  prefix?: string;
  /** Retention of ended records (the Nats-TTL of the records cancel ends). Default 7 days. */
  retention?: Duration;
  /** How long one call rides out elections and reconnects before it gives up. Default 30 s. */
  callTimeout?: number;
  /** The clock. Default: the system's. */
  now?: () => Date | bigint;
  /** The id generator (run ids, batch ids, event keys). Default: nuid. */
  newId?: () => string;
  /** Receives warnings (a dispatch left to the scheduler's repair sweep). Default: none. */
  onWarning?: (message: string) => void;
  /** Skip the check that jetflow's streams exist (Client.connect). */
  skipCheck?: boolean;
}

/** Options of a call that waits. */
export interface WaitOptions {
  /** Stops waiting. */
  signal?: AbortSignal;
  /** Gives up after this many milliseconds (TimeoutError). */
  timeout?: number;
}

// ---------------------------------------------------------------- internals

/** A JetStream API error answer. */
class ApiError extends Error {
  readonly status: number;
  readonly errCode: number;
  constructor(e: { code?: number; err_code?: number; description?: string }, subject: string) {
    super(`${e.description ?? "error"} (${subject}, status ${e.code}, code ${e.err_code})`);
    this.status = e.code ?? 0;
    this.errCode = e.err_code ?? 0;
    this.name = "JetStreamApiError";
  }
}

/** An attempt to do again at once (a create refused with nothing stored). */
class Again extends Error {
  constructor(why: string) {
    super(why);
    this.name = "Again";
  }
}

const WRONG_LAST_SEQ = 10071;
const WRONG_LAST_SEQ_CONSTANT = 10164;
const NO_MESSAGE = 10037;
const ATTEMPT_MS = 2000;

function isWrongSequence(e: unknown): boolean {
  return e instanceof ApiError && (e.errCode === WRONG_LAST_SEQ || e.errCode === WRONG_LAST_SEQ_CONSTANT || /wrong last sequence/i.test(e.message));
}

function isNoResponders(e: unknown): boolean {
  const x = e as { name?: string; cause?: { name?: string } };
  return x?.name === "NoResponders" || (x?.name === "RequestError" && x.cause?.name === "NoResponders");
}

/** asPermission is the PermissionDeniedError of a request nats.js failed for a permissions violation. */
function asPermission(e: unknown): PermissionDeniedError | null {
  if (e instanceof PermissionDeniedError) return e;
  const x = e as { name?: string; message?: string; cause?: { name?: string; subject?: string; message?: string } };
  const pv = x?.name === "PermissionViolationError" ? (x as { subject?: string; message?: string }) : x?.cause?.name === "PermissionViolationError" ? x.cause : null;
  if (pv) return new PermissionDeniedError(pv.subject ?? "", pv.message, { cause: e });
  const m = /Permissions Violation for Publish to "([^"]+)"/.exec(x?.message ?? "");
  return m ? new PermissionDeniedError(m[1], x.message, { cause: e }) : null;
}

function transient(e: unknown): boolean {
  if (e instanceof Again) return true;
  if (e instanceof ApiError) return e.errCode === 10008 || /temporarily unavailable/i.test(e.message) || e.status === 503;
  const name = (e as { name?: string })?.name;
  return name === "TimeoutError" || isNoResponders(e);
}

const enc = new TextEncoder();
const dec = new TextDecoder();

function hdrs(list: [string, string][]): MsgHdrs | undefined {
  if (list.length === 0) return undefined;
  const h = natsHeaders();
  for (const [k, v] of list) h.set(k, v);
  return h;
}

function getter(h: MsgHdrs | undefined): (k: string) => string {
  return (k) => h?.get(k) ?? "";
}

/** parseHeaderBlock reads a NATS header block ("NATS/1.0\r\nK: V\r\n\r\n"). */
function parseHeaderBlock(b64: string | undefined): (k: string) => string {
  const m = new Map<string, string>();
  if (b64) {
    const lines = Buffer.from(b64, "base64").toString("utf8").split("\r\n");
    for (const line of lines.slice(1)) {
      const i = line.indexOf(":");
      if (i <= 0) continue;
      const k = line.slice(0, i).trim().toLowerCase();
      if (!m.has(k)) m.set(k, line.slice(i + 1).trim());
    }
  }
  return (k) => m.get(k.toLowerCase()) ?? "";
}

/** A stored message as a stream's leader answers it. */
interface StoredMsg {
  subject: string;
  seq: number;
  header: (k: string) => string;
  data: string;
  time: Nanos;
}

function toNanos(d: Duration, what: string): bigint {
  if (typeof d === "number") {
    if (!Number.isFinite(d)) throw new BadArgsError(`${what}: ${d}`);
    return BigInt(Math.round(d * 1e6));
  }
  return parseGoDuration(d);
}

/** A run prepared for scheduling. */
interface Prepared {
  rec: NewRecord;
  direct: boolean;
  argsBytes: number;
}

interface Guard {
  prefixes: string[];
  fail: (e: PermissionDeniedError) => void;
}

/** An error a JetStream publish got: no stream listens (NATS's 503). */
class NoResponders extends Error {
  constructor(subject: string) {
    super(`no responders: '${subject}': no stream stores it (are jetflow's streams provisioned?)`);
    this.name = "NoResponders";
  }
}

/** A publish waiting for its ack in the window. */
interface Waiting {
  subject: string;
  at: number;
  resolve: (m: Msg) => void;
  reject: (e: Error) => void;
}

/**
 * Window is the client's pipelined JetStream publishes: each publish
 * carries a reply subject of the window's own subscription, and its caller
 * waits for its own acknowledgement. It costs less per publish than a
 * request (no per-request timer or error object), which is how concurrent
 * enqueues reach raw JetStream's publish rate (the Go producer's window).
 */
class Window {
  private readonly nc: NatsConnection;
  private readonly prefix: string;
  private readonly waiting = new Map<number, Waiting>();
  private next = 1;
  private sub?: Subscription;
  private sweeper?: ReturnType<typeof setInterval>;

  constructor(nc: NatsConnection) {
    this.nc = nc;
    this.prefix = createInbox((nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix) + ".";
  }

  private start(): void {
    this.sub = this.nc.subscribe(this.prefix + "*", {
      callback: (_err, m) => {
        const tok = Number(m.subject.slice(this.prefix.length));
        const w = this.waiting.get(tok);
        if (!w) return;
        this.waiting.delete(tok);
        if (m.data.length === 0 && m.headers?.code === 503) w.reject(new NoResponders(w.subject));
        else w.resolve(m);
      },
    });
    // One timer for every publish: each waits ATTEMPT_MS at most.
    this.sweeper = setInterval(() => {
      const now = Date.now();
      for (const [tok, w] of this.waiting) {
        if (now - w.at < ATTEMPT_MS) break; // in the order they were sent
        this.waiting.delete(tok);
        w.reject(Object.assign(new Error(`no acknowledgement within ${ATTEMPT_MS} ms`), { name: "TimeoutError" }));
      }
      if (this.waiting.size === 0) this.stop();
    }, 100);
    this.sweeper.unref?.();
  }

  private stop(): void {
    clearInterval(this.sweeper);
    this.sweeper = undefined;
    this.sub?.unsubscribe();
    this.sub = undefined;
  }

  /**
   * denied fails the oldest publish waiting on subject: the server refused
   * it for lack of permission (one "Permissions Violation" per publish), as
   * nats.js does for its requests. False when none waits on it.
   */
  denied(subject: string, err: PermissionDeniedError): boolean {
    for (const [tok, w] of this.waiting) {
      if (w.subject === subject) {
        this.waiting.delete(tok);
        w.reject(err);
        return true;
      }
    }
    return false;
  }

  publish(subject: string, data: Uint8Array, headers: MsgHdrs | undefined): Promise<Msg> {
    if (this.nc.isClosed()) return Promise.reject(Object.assign(new Error("connection closed"), { name: "ClosedConnectionError" }));
    if (!this.sub) this.start();
    const tok = this.next++;
    return new Promise<Msg>((resolve, reject) => {
      this.waiting.set(tok, { subject, at: Date.now(), resolve, reject });
      try {
        this.nc.publish(subject, data, { headers, reply: this.prefix + tok });
      } catch (e) {
        this.waiting.delete(tok);
        reject(e as Error);
      }
    });
  }
}

// ---------------------------------------------------------------- client

/**
 * Client schedules runs and reads their status (the Go producer.Producer).
 * It does not own the connection it is given. Safe for concurrent use.
 */
export class Client {
  readonly nc: NatsConnection;
  readonly names: Names;
  private readonly js: JetStreamClient;
  private readonly callTimeout: number;
  private readonly ttl: string;
  private readonly clock: () => Nanos;
  private readonly newId: () => string;
  private readonly warn: (m: string) => void;
  private readonly guards = new Set<Guard>();
  private deniedLeaderReads = new Map<string, number>();
  /** Leader reads a denial must not fail the call of (the runs stream's: Go's GetConfirmed). */
  private readonly tolerant = new Map<string, Set<(e: PermissionDeniedError) => void>>();
  private runsKV?: Promise<KV>;
  private readonly window: Window;

  private constructor(nc: NatsConnection, opts: ClientOptions) {
    this.nc = nc;
    this.names = new Names(opts.prefix ?? "jetflow");
    if (!isValidRunID(this.names.prefix)) throw new InvalidNameError(`prefix ${JSON.stringify(this.names.prefix)}: one token of letters, digits, '_' and '-'`);
    // checkAPI off: no $JS.API.INFO before the first KV watch (a read-only user need not have it).
    this.js = jetstream(nc, { checkAPI: false });
    this.callTimeout = opts.callTimeout ?? 30_000;
    this.ttl = formatGoDuration(opts.retention === undefined ? 7n * 24n * 3600n * 1_000_000_000n : toNanos(opts.retention, "retention"));
    const now = opts.now;
    this.clock = now
      ? () => {
          const v = now();
          return typeof v === "bigint" ? v : fromDate(v);
        }
      : nowNanos;
    this.newId = opts.newId ?? (() => nuid.next());
    this.warn = opts.onWarning ?? (() => {});
    this.window = new Window(nc);
    this.watchStatus();
  }

  /**
   * connect returns a client on nc, once it has looked jetflow's function
   * stream and runs bucket up (a Go worker, scheduler, producer or
   * `jetflow provision` creates them; this client never does). A user not
   * allowed to look them up gets PermissionDeniedError at once.
   */
  static async connect(nc: NatsConnection, opts: ClientOptions = {}): Promise<Client> {
    const c = new Client(nc, opts);
    if (!opts.skipCheck) {
      await c.guarded(async () => {
        for (const s of [c.names.functionStream, c.names.kvStream(c.names.runsBucket)]) {
          try {
            await c.api(`$JS.API.STREAM.INFO.${s}`, undefined, 5000);
          } catch (e) {
            if (e instanceof ApiError && e.status === 404) {
              throw new JetflowError("notProvisioned", "streams: not provisioned", `stream ${s} is missing: start a jetflow worker or run \`jetflow provision\` first`);
            }
            throw e;
          }
        }
      });
    }
    return c;
  }

  /** maxPayload is the server's max payload (bytes). */
  get maxPayload(): number {
    return this.nc.info?.max_payload ?? 0;
  }

  // ------------------------------------------------------------ scheduling

  /** enqueue schedules a run to start now and returns its id once it is stored. */
  enqueue<A>(call: Call<A>, options: RunOptions = {}): Promise<string> {
    return this.schedule(undefined, call, options);
  }

  /** runAfter schedules a run to start after delay (milliseconds or a Go duration). */
  runAfter<A>(delay: Duration, call: Call<A>, options: RunOptions = {}): Promise<string> {
    let at: Nanos | undefined;
    try {
      const d = toNanos(delay, "delay");
      at = d > 0n ? this.clock() + d : undefined;
    } catch (e) {
      return Promise.reject(e);
    }
    return this.schedule(at, call, options);
  }

  /** runAt schedules a run to start at a time (a past time means now). */
  runAt<A>(at: Date, call: Call<A>, options: RunOptions = {}): Promise<string> {
    let t: Nanos;
    try {
      t = fromDate(at);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.schedule(t, call, options);
  }

  private async schedule(at: Nanos | undefined, call: Call<unknown>, options: RunOptions): Promise<string> {
    const p = this.prepare(at, call, options);
    this.checkSize(p.argsBytes);
    if (p.direct) return this.enqueueDirect(p.rec);
    return this.guarded(async () => {
      const rev = await this.createRecord(p.rec);
      await this.dispatch(p.rec, rev);
      return p.rec.id;
    });
  }

  private prepare(at: Nanos | undefined, call: Call<unknown>, o: RunOptions, item?: number): Prepared {
    const pfx = item === undefined ? "" : `item ${item}: `;
    try {
      if (!call || typeof call !== "object") throw new BadArgsError("a call is defineFunction(...).with(args)");
      validateName(call.name);
      if (call.kind && call.kind !== "retryable" && call.kind !== "atMostOnce") {
        throw new InvalidNameError(`${call.name}: unknown kind ${JSON.stringify(call.kind)}`);
      }
      const args = encodeArgs(call.args);
      let id: string;
      if (o.id === undefined || o.id === "") id = this.newId();
      else {
        validateRunID(o.id);
        id = o.id;
      }
      if (o.parent !== undefined && o.parent !== "") validateRunID(o.parent);
      if (o.maxAttempts !== undefined && (!Number.isSafeInteger(o.maxAttempts) || o.maxAttempts < 0)) {
        throw new BadArgsError(`maxAttempts ${o.maxAttempts}: a whole number`);
      }
      let timeout: bigint | undefined;
      if (o.timeout !== undefined) {
        timeout = toNanos(o.timeout, "timeout");
        if (timeout < 0n) throw new BadArgsError(`timeout ${String(o.timeout)}: negative`);
      }
      if (at !== undefined && !timeFits(at)) throw new BadArgsError("time: a run record holds years 0 through 9999");
      const now = this.clock();
      const sched = at === undefined || at < now ? now : at;
      const rec: NewRecord = {
        id, name: call.name, kind: call.kind || "retryable", args, state: "pending", scheduledTime: sched,
        creationTime: now, attempts: 0, maxAttempts: o.maxAttempts || undefined, timeout: timeout || undefined,
        parent: o.parent || undefined,
      };
      const direct = (o.id === undefined || o.id === "") && !rec.parent && !(sched > now) && (call.name.split(".").length - 1) < 8;
      return { rec, direct, argsBytes: utf8Length(args) };
    } catch (e) {
      if (pfx && e instanceof JetflowError) {
        (e as { message: string }).message = pfx + e.message;
      }
      throw e;
    }
  }

  /** checkSize is producer.checkSize: one run's args fit a record on this server. */
  private checkSize(n: number): void {
    checkRunArgs(n, this.maxPayload);
  }

  /**
   * batch schedules up to 1,000 runs at once, all or none, and returns
   * their ids in order. Every item is checked before anything is written:
   * one bad item refuses the whole batch (its error names the item).
   */
  async batch(items: BatchItem[]): Promise<string[]> {
    if (items.length === 0) return [];
    if (items.length > MAX_BATCH) throw new TooManyRunsError(`${items.length} > ${MAX_BATCH}`);
    const prepared: Prepared[] = [];
    const seen = new Set<string>();
    let total = 0;
    for (let i = 0; i < items.length; i++) {
      const it = items[i];
      let at: Nanos | undefined;
      try {
        if (it.at !== undefined) at = fromDate(it.at);
        else if (it.after !== undefined) {
          const d = toNanos(it.after, "after");
          if (d > 0n) at = this.clock() + d;
        }
      } catch (e) {
        if (e instanceof JetflowError) (e as { message: string }).message = `item ${i}: ` + e.message;
        throw e;
      }
      const p = this.prepare(at, it.call, it, i);
      if (seen.has(p.rec.id)) throw new AlreadyExistsError(p.rec.id, `item ${i}: run ${p.rec.id} twice in one batch`);
      seen.add(p.rec.id);
      try {
        this.checkSize(p.argsBytes);
      } catch (e) {
        (e as { message: string }).message = `item ${i}: ` + (e as Error).message;
        throw e;
      }
      total += p.argsBytes;
      prepared.push(p);
    }
    if (total > MAX_CALL_ARGS) throw new ArgsTooLargeError(`${total} bytes in one call, limit ${MAX_CALL_ARGS}`);
    const ids = prepared.map((p) => p.rec.id);
    return this.guarded(async () => {
      if (prepared.every((p) => p.direct)) {
        const msgs = prepared.map((p) => {
          const m = runMessage(this.names, { ...envelopeOf(p.rec, 0), new: true });
          return m;
        });
        try {
          await this.atomicBatch(msgs);
        } catch (e) {
          if (transient(e) || e instanceof TimeoutError) {
            // No answer: all or none landed. Its ids only once the leader has them.
            if (await this.directStored(prepared[0].rec)) return ids;
            throw new TimeoutError(`batch of ${msgs.length} runs: no answer, and none is stored yet; its outcome is unknown`, { cause: e });
          }
          if (e instanceof JetflowError || asPermission(e)) throw e;
          throw new BatchFailedError((e as Error).message, { cause: e });
        }
        return ids;
      }
      const msgs = prepared.map((p) => newRecordMsg(this.names, p.rec, 0));
      let last: number;
      try {
        last = await this.atomicBatch(msgs);
      } catch (e) {
        if (isWrongSequence(e)) {
          // Refused: only the leader's word says which id exists.
          for (const p of prepared) {
            const m = await this.leaderRecord(p.rec.id);
            if (m) throw new AlreadyExistsError(p.rec.id);
          }
        }
        if (transient(e) || e instanceof TimeoutError) {
          // No answer: all or none landed. The records, if the leader has them as this call wrote them.
          const revs = await this.batchLanded(prepared);
          if (!revs) throw new TimeoutError(`batch of ${msgs.length} runs: no answer, and none is stored yet; its outcome is unknown`, { cause: e });
          await this.dispatchBatch(prepared, revs);
          return ids;
        }
        if (e instanceof JetflowError || asPermission(e)) throw e;
        throw new BatchFailedError((e as Error).message, { cause: e });
      }
      const first = last - (prepared.length - 1);
      await this.dispatchBatch(prepared, prepared.map((_, i) => first + i));
      return ids;
    });
  }

  /** batchLanded reads a batch's records from the runs leader: their revisions if this call stored them. */
  private async batchLanded(prepared: Prepared[]): Promise<number[] | null> {
    const revs: number[] = [];
    for (const p of prepared) {
      const m = await this.leaderRecord(p.rec.id);
      if (!m) return null;
      try {
        const cur = JSON.parse(m.data);
        if (cur.name !== p.rec.name || cur.creationTime !== formatRFC3339Nano(p.rec.creationTime)) return null;
      } catch {
        return null;
      }
      revs.push(m.seq);
    }
    return revs;
  }

  /** dispatchBatch publishes a stored batch's runs, pipelined; what fails is left to the repair sweep. */
  private async dispatchBatch(prepared: Prepared[], revs: number[]): Promise<void> {
    {
      const acks = prepared.map((p, i) => this.dispatchOnce(p.rec, revs[i]).catch((e) => e as Error));
      const errs = (await Promise.all(acks)).filter((e): e is Error => e instanceof Error);
      if (errs.length > 0) {
        this.warn(`batch dispatch incomplete (${errs.length} runs); the scheduler's repair sweep will publish them: ${errs[0].message}`);
      }
    }
  }

  /** atomicBatch publishes msgs as one JetStream atomic batch; the commit's ack seq. */
  private async atomicBatch(msgs: WireMsg[]): Promise<number> {
    const id = this.newId();
    const lastIdx = msgs.length - 1;
    for (let i = 0; i < lastIdx; i++) {
      const m = msgs[i];
      const h = hdrs([...m.headers, ["Nats-Batch-Id", id], ["Nats-Batch-Sequence", String(i + 1)]]);
      this.nc.publish(m.subject, enc.encode(m.data), { headers: h });
    }
    const m = msgs[lastIdx];
    const reply = await this.nc.request(m.subject, enc.encode(m.data), {
      timeout: 10_000,
      headers: hdrs([...m.headers, ["Nats-Batch-Id", id], ["Nats-Batch-Sequence", String(lastIdx + 1)], ["Nats-Batch-Commit", "1"]]),
    });
    const ack = JSON.parse(dec.decode(reply.data) || "{}");
    if (ack.error) throw new ApiError(ack.error, m.subject);
    if (ack.count !== msgs.length) throw new BatchFailedError(`batch stored ${ack.count} of ${msgs.length} messages`);
    return ack.seq;
  }

  // ------------------------------------------------------------ writes

  /** jsPublish is a JetStream publish: the stream's ack, or ApiError. */
  private async jsPublish(m: WireMsg): Promise<{ stream: string; seq: number; duplicate?: boolean }> {
    const reply = await this.window.publish(m.subject, enc.encode(m.data), hdrs(m.headers));
    const ack = JSON.parse(dec.decode(reply.data) || "{}");
    if (ack.error) throw new ApiError(ack.error, m.subject);
    if (!ack.stream) throw new ApiError({ description: "invalid ack" }, m.subject);
    return ack;
  }

  /**
   * ride runs op until it succeeds, fails for good or the call's time is
   * up, trying again after what an election or a reconnect causes; retried
   * tells op that an earlier attempt may have landed.
   */
  private async ride<T>(op: (retried: boolean) => Promise<T>): Promise<T> {
    const end = Date.now() + this.callTimeout;
    let delay = 25;
    for (let retried = false; ; retried = true) {
      try {
        return await op(retried);
      } catch (e) {
        if (!transient(e) || Date.now() >= end) {
          if (transient(e)) throw new TimeoutError(`gave up retrying after ${this.callTimeout} ms: ${(e as Error).message}`, { cause: e });
          throw e;
        }
        if (!(e instanceof Again)) {
          await new Promise((r) => setTimeout(r, Math.min(delay, Math.max(0, end - Date.now()))));
          delay = Math.min(2 * delay, 500);
        }
      }
    }
  }

  /**
   * publishDirect publishes a run due now without a record (its message is
   * its pending record). It returns only once the message (or the record a
   * worker made of it) is known stored: a try refused, answered as a
   * duplicate or unanswered is checked with reads the streams' leaders
   * answer, and made again if nothing is there.
   */
  private async publishDirect(rec: NewRecord, triedBefore = false): Promise<void> {
    const e = envelopeOf(rec, 0);
    let first = true;
    await this.ride(async (retriedHere) => {
      const retried = retriedHere || (first && triedBefore);
      first = false;
      const m = directMessage(this.names, e);
      if (retried) {
        if (await this.directStored(rec)) return;
        m.headers.push([H.msgID, rec.id]); // deduplicated from here on
      }
      let ack;
      try {
        ack = await this.jsPublish(m);
      } catch (err) {
        if (isWrongSequence(err)) {
          if (await this.directStored(rec)) return;
          throw new Again(`run ${rec.id}: refused, and nothing is stored`);
        }
        throw err;
      }
      if (ack.duplicate) {
        if (await this.directStored(rec)) return;
        throw new Again(`run ${rec.id}: a duplicate, and nothing is stored`);
      }
    });
  }

  /**
   * enqueueDirect is the hot path of a run due now with a generated id: one
   * pipelined publish in the window (a permissions violation fails it at
   * once there), and only a try that was not plainly stored goes through
   * publishDirect's confirmation.
   */
  private async enqueueDirect(rec: NewRecord): Promise<string> {
    const m = directMessage(this.names, envelopeOf(rec, 0));
    try {
      const reply = await this.window.publish(m.subject, enc.encode(m.data), hdrs(m.headers));
      const text = dec.decode(reply.data);
      // A plain ack, neither refused nor a duplicate: stored.
      if (text.startsWith('{"stream":') && !text.includes('"error"') && !text.includes('"duplicate"')) return rec.id;
    } catch (e) {
      const pe = asPermission(e);
      if (pe) throw pe;
      if (!transient(e)) throw e;
    }
    await this.guarded(() => this.publishDirect(rec, true));
    return rec.id;
  }

  /** directStored reports whether a run's message waits, or its record exists, by the leaders' word. */
  private async directStored(rec: NewRecord): Promise<boolean> {
    const m = await this.leaderLast(this.names.functionStream, this.names.functionSubject(rec.name, rec.id));
    if (m) return true;
    return (await this.leaderRecord(rec.id)) !== null;
  }

  /**
   * createRecord creates a pending record, create-only, and returns its
   * revision. A refusal is checked with the runs stream's leader: a record
   * there is AlreadyExistsError (or this call's own, landed on an earlier
   * try), a marker (an expired record) is written over, and nothing there
   * means the create is tried again.
   */
  private async createRecord(rec: NewRecord): Promise<number> {
    let expect = 0;
    const created = formatRFC3339Nano(rec.creationTime);
    return this.ride(async () => {
      try {
        const ack = await this.jsPublish(newRecordMsg(this.names, rec, expect));
        return ack.seq;
      } catch (err) {
        if (!isWrongSequence(err)) throw err;
        const m = await this.leaderRecordMsg(rec.id);
        if (!m) {
          expect = 0;
          throw new Again(`run ${rec.id}: create refused, and no record is stored`);
        }
        if (isMarker(m.header)) {
          expect = m.seq;
          throw new Again(`run ${rec.id}: an expired record's marker`);
        }
        try {
          const cur = JSON.parse(m.data);
          if (cur.name === rec.name && cur.creationTime === created) return m.seq; // an earlier try of this call
        } catch {
          // not a record jetflow wrote: the id is taken all the same
        }
        throw new AlreadyExistsError(rec.id);
      }
    });
  }

  /** dispatch makes a pending run with a record startable; a failure is left to the repair sweep. */
  private async dispatch(rec: NewRecord, rev: number): Promise<void> {
    try {
      await this.ride(() => this.dispatchOnce(rec, rev));
    } catch (e) {
      if (asPermission(e)) throw asPermission(e);
      this.warn(`dispatch of run ${rec.id} failed; the scheduler's repair sweep will publish it: ${(e as Error).message}`);
    }
  }

  private async dispatchOnce(rec: NewRecord, rev: number): Promise<void> {
    const e = envelopeOf(rec, rev);
    if (rec.scheduledTime > this.clock()) {
      await this.jsPublish(delayedMsg(this.names, e, rec.scheduledTime));
    } else {
      await this.jsPublish(runMessage(this.names, e));
    }
  }

  // ------------------------------------------------------------ reads

  /** api makes a JetStream API request and returns its JSON answer, or throws ApiError. */
  private async api(subject: string, body: unknown, timeout = ATTEMPT_MS): Promise<Record<string, unknown>> {
    const data = body === undefined ? undefined : enc.encode(JSON.stringify(body));
    const reply = await this.nc.request(subject, data, { timeout });
    const r = JSON.parse(dec.decode(reply.data) || "{}");
    if (r.error) throw new ApiError(r.error, subject);
    return r;
  }

  /**
   * leaderLast reads the last message on subject from the stream's leader
   * ($JS.API.STREAM.MSG.GET), not by a direct get that any replica may
   * answer; null when there is none.
   */
  private async leaderLast(stream: string, subject: string): Promise<StoredMsg | null> {
    const api = `$JS.API.STREAM.MSG.GET.${stream}`;
    try {
      const r = (await this.api(api, { last_by_subj: subject })) as { message?: { subject: string; seq: number; hdrs?: string; data?: string; time: string } };
      const m = r.message;
      if (!m) throw new ApiError({ description: "empty answer" }, api);
      return {
        subject: m.subject, seq: m.seq, header: parseHeaderBlock(m.hdrs),
        data: m.data ? Buffer.from(m.data, "base64").toString("utf8") : "", time: parseRFC3339(m.time),
      };
    } catch (e) {
      if (e instanceof ApiError && (e.errCode === NO_MESSAGE || e.status === 404)) return null;
      throw e;
    }
  }

  /** leaderRecordMsg is a record's last write from the runs leader (a marker included). */
  private async leaderRecordMsg(id: string): Promise<StoredMsg | null> {
    const stream = this.names.kvStream(this.names.runsBucket);
    const until = this.deniedLeaderReads.get(stream) ?? 0;
    if (Date.now() < until) return this.directRecordMsg(id);
    const api = `$JS.API.STREAM.MSG.GET.${stream}`;
    let fail: (e: PermissionDeniedError) => void = () => {};
    const denied = new Promise<never>((_, reject) => (fail = reject));
    denied.catch(() => {});
    let set = this.tolerant.get(api);
    if (!set) this.tolerant.set(api, (set = new Set()));
    set.add(fail);
    try {
      return await Promise.race([this.leaderLast(stream, this.names.kvSubject(this.names.runsBucket, id)), denied]);
    } catch (e) {
      if (asPermission(e)) {
        // A user without leader reads: the direct get's word, as Go's GetConfirmed.
        this.deniedLeaderReads.set(stream, Date.now() + 5 * 60_000);
        return this.directRecordMsg(id);
      }
      throw e;
    } finally {
      set.delete(fail);
    }
  }

  /** leaderRecord is a record from the runs leader, null when there is none (or a marker). */
  private async leaderRecord(id: string): Promise<StoredMsg | null> {
    const m = await this.leaderRecordMsg(id);
    return m && !isMarker(m.header) ? m : null;
  }

  /** directGet reads the last message of key in bucket with a direct get; null when there is none. */
  private async directGet(bucket: string, key: string): Promise<StoredMsg | null> {
    const subject = `$JS.API.DIRECT.GET.${this.names.kvStream(bucket)}.${this.names.kvSubject(bucket, key)}`;
    const reply: Msg = await this.nc.request(subject, undefined, { timeout: ATTEMPT_MS });
    const h = reply.headers;
    if (h && h.code && h.code >= 400) {
      if (h.code === 404) return null;
      throw new ApiError({ code: h.code, description: h.description }, subject);
    }
    const get = getter(h);
    return {
      subject: get("Nats-Subject"), seq: Number(get("Nats-Sequence") || 0), header: get,
      data: dec.decode(reply.data), time: get("Nats-Time-Stamp") ? parseRFC3339(get("Nats-Time-Stamp")) : 0n,
    };
  }

  private directRecordMsg(id: string): Promise<StoredMsg | null> {
    return this.directGet(this.names.runsBucket, id);
  }

  /** queuedMsg finds run id's waiting message (functions of up to 8 tokens). */
  private async queuedMsg(id: string, fn?: string): Promise<StoredMsg | null> {
    if (fn) return this.leaderLast(this.names.functionStream, this.names.functionSubject(fn, id));
    for (let depth = 1; depth <= 8; depth++) {
      const m = await this.leaderLast(this.names.functionStream, `${this.names.prefix}.fn.${"*.".repeat(depth)}${id}`);
      if (m) return m;
    }
    return null;
  }

  private queuedRunOf(m: StoredMsg): Run | null {
    return queuedRun(this.names, m.subject, m.header, m.data, m.time);
  }

  /**
   * get returns run id's record. A run published without a record that no
   * worker has taken yet is read from its waiting message, as pending
   * (revision 0). NotFoundError when there is neither.
   */
  async get(id: string): Promise<Run> {
    validateRunID(id);
    return this.guarded(async () => {
      const m = await this.directRecordMsg(id);
      if (m && !isMarker(m.header)) return decodeRecord(m.data, m.seq);
      const q = await this.queuedMsg(id);
      // A worker may have written the record and taken the message meanwhile.
      const again = await this.directRecordMsg(id);
      if (again && !isMarker(again.header)) return decodeRecord(again.data, again.seq);
      const run = q ? this.queuedRunOf(q) : null;
      if (!run) throw new NotFoundError(`run ${id}`);
      return run;
    });
  }

  /**
   * watch yields run id's record now and at each change (state, attempts,
   * progress), and ends after a terminal state. A run not yet written
   * starts with its waiting message (pending), if any; otherwise it is
   * awaited. Stop early with `break` or the signal.
   */
  async *watch(id: string, opts: WaitOptions = {}): AsyncGenerator<Run, void, undefined> {
    validateRunID(id);
    const kv = await this.guarded(() => this.kv());
    const w = await this.guarded(() => kv.watch({ key: id }));
    const stop = () => w.stop();
    opts.signal?.addEventListener("abort", stop, { once: true });
    const timer = opts.timeout ? setTimeout(stop, opts.timeout) : undefined;
    let last = -1;
    try {
      const first = await this.guarded(() => this.directRecordMsg(id));
      if (!first || isMarker(first.header)) {
        const q = await this.guarded(() => this.queuedMsg(id));
        const run = q ? this.queuedRunOf(q) : null;
        if (run) {
          last = 0;
          yield run;
        }
      }
      for await (const e of w) {
        if (e.operation !== "PUT") continue;
        if (e.revision <= last) continue;
        last = e.revision;
        const run = decodeRecord(dec.decode(e.value), e.revision);
        yield run;
        if (isTerminal(run.state)) return;
      }
      if (opts.signal?.aborted) throw opts.signal.reason ?? new TimeoutError(`watch of ${id} aborted`);
      if (opts.timeout) throw new TimeoutError(`watch of ${id}: not ended after ${opts.timeout} ms`);
    } finally {
      opts.signal?.removeEventListener("abort", stop);
      if (timer) clearTimeout(timer);
      w.stop();
    }
  }

  /**
   * wait returns run id's record once it has ended (success, failed or
   * canceled). A run not written yet is awaited, as watch does.
   */
  async wait(id: string, opts: WaitOptions = {}): Promise<Run> {
    let last: Run | undefined;
    for await (const r of this.watch(id, opts)) last = r;
    if (last && isTerminal(last.state)) return last;
    throw new TimeoutError(`wait for ${id}: ended before the run did`);
  }

  private kv(): Promise<KV> {
    if (!this.runsKV) {
      this.runsKV = new Kvm(this.js).open(this.names.runsBucket);
      this.runsKV.catch(() => {
        this.runsKV = undefined;
      });
    }
    return this.runsKV;
  }

  // ------------------------------------------------------------ cancel

  /**
   * cancel cancels run id and, recursively, the runs it scheduled. A
   * pending run never starts (its record is canceled, its delayed entry or
   * waiting message removed); a running one has its handler's context
   * canceled. A run that has ended is left as it is: canceled is false.
   * NotFoundError when there is no such run.
   */
  async cancel(id: string): Promise<CancelResult> {
    validateRunID(id);
    return this.guarded(() => this.cancelRun(id, 0));
  }

  private async cancelRun(id: string, depth: number): Promise<CancelResult> {
    const marked = await this.markCanceled(id);
    if (!marked.canceled) return { canceled: false, run: marked.run };
    const errs: string[] = [];
    if (marked.prev === "pending") {
      try {
        await this.unschedule(marked);
      } catch (e) {
        if (asPermission(e)) {
          errs.push(`run ${id} is canceled and will not start, but its waiting entry was not removed: ${(e as Error).message}`);
        } else throw e;
      }
    }
    this.nc.publish(this.names.cancelSubject, enc.encode(id));
    await this.nc.flush();
    if (depth < 64) {
      for (const child of marked.run.children ?? []) {
        try {
          await this.cancelRun(child, depth + 1);
        } catch (e) {
          if (!(e instanceof NotFoundError)) throw e;
        }
      }
    }
    if (errs.length > 0) throw new JetflowError("cancelIncomplete", "producer: cancel incomplete", errs.join("; "));
    return { canceled: true, run: marked.run };
  }

  private async markCanceled(id: string): Promise<{ canceled: boolean; run: Run; prev?: string; raw?: string; scheduled?: Nanos }> {
    let leader = false;
    for (let i = 0; i < 64; i++) {
      const m = leader ? await this.leaderRecordMsg(id) : await this.directRecordMsg(id);
      if (!m || isMarker(m.header)) {
        if (!leader) {
          leader = true;
          continue;
        }
        // No record: a run published without one, waiting in the stream?
        const q = await this.queuedMsg(id);
        const qrun = q ? this.queuedRunOf(q) : null;
        if (!q || !qrun) {
          if (await this.leaderRecord(id)) continue; // taken meanwhile: its record is there now
          throw new NotFoundError(`run ${id}`);
        }
        const now = this.clock();
        const body = this.canceledFromMessage(q, qrun, now);
        const scheduled = q.header(H.scheduled) ? parseRFC3339(q.header(H.scheduled)) : q.header(H.created) ? parseRFC3339(q.header(H.created)) : q.time;
        const expect = m ? m.seq : 0;
        try {
          const ack = await this.jsPublish({
            subject: this.names.kvSubject(this.names.runsBucket, id),
            headers: recordHeaders({ state: "canceled", name: qrun.name, scheduledTime: scheduled, expect, ttl: this.ttl, completedTime: now }),
            data: body,
          });
          const run = decodeRecord(body, ack.seq);
          return { canceled: true, run, prev: "pending", raw: body, scheduled };
        } catch (e) {
          if (isWrongSequence(e)) continue;
          throw e;
        }
      }
      const cur = decodeRecord(m.data, m.seq);
      if (isTerminal(cur.state)) return { canceled: false, run: cur };
      const now = this.clock();
      const raw = JSON.parse(m.data) as Record<string, unknown>;
      const body = reencodeRecord(m.data, {
        state: '"canceled"',
        completedTime: `"${formatRFC3339Nano(now)}"`,
        error: goJSON("jetflow: run canceled"),
      });
      const scheduled = parseRFC3339(String(raw.scheduledTime));
      try {
        const ack = await this.jsPublish({
          subject: this.names.kvSubject(this.names.runsBucket, id),
          headers: recordHeaders({
            state: "canceled", name: cur.name, scheduledTime: scheduled, expect: m.seq, from: cur.state,
            ttl: this.ttl, completedTime: now, onComplete: raw.onComplete != null,
          }),
          data: body,
        });
        return { canceled: true, run: decodeRecord(body, ack.seq), prev: cur.state, raw: body, scheduled };
      } catch (e) {
        if (isWrongSequence(e)) {
          leader = true;
          continue;
        }
        throw e;
      }
    }
    throw new JetflowError("conflict", "producer: cancel", `${id}: the run kept changing`);
  }

  /** canceledFromMessage is the canceled record of a run read from its waiting message. */
  private canceledFromMessage(q: StoredMsg, run: Run, now: Nanos): string {
    const created = q.header(H.created) ? parseRFC3339(q.header(H.created)) : q.time;
    const sched = q.header(H.scheduled) ? parseRFC3339(q.header(H.scheduled)) : created;
    let s = `{"id":${goJSON(run.id)},"name":${goJSON(run.name)},"args":${run.argsJSON ?? "null"},"state":"canceled"`;
    s += `,"scheduledTime":"${formatRFC3339Nano(sched)}","creationTime":"${formatRFC3339Nano(created)}"`;
    s += `,"completedTime":"${formatRFC3339Nano(now)}","attempts":${run.attempts}`;
    if (run.maxAttempts) s += `,"maxAttempts":${run.maxAttempts}`;
    if (run.timeoutNanos) s += `,"timeout":${run.timeoutNanos.toString()}`;
    s += `,"error":${goJSON("jetflow: run canceled")}`;
    if (run.parent) s += `,"parent":${goJSON(run.parent)}`;
    return s + "}";
  }

  /** unschedule removes a just-canceled pending run's delayed entry and waiting message. */
  private async unschedule(c: { run: Run; scheduled?: Nanos }): Promise<void> {
    if (c.scheduled !== undefined) {
      const key = delayedKey(c.scheduled, c.run.id);
      const d = await this.directGet(this.names.delayedBucket, key);
      if (d && !isMarker(d.header)) {
        await this.api(`$JS.API.STREAM.PURGE.${this.names.kvStream(this.names.delayedBucket)}`, {
          filter: this.names.kvSubject(this.names.delayedBucket, key), seq: d.seq + 1,
        });
      }
    }
    await this.api(`$JS.API.STREAM.PURGE.${this.names.functionStream}`, {
      filter: this.names.functionSubject(c.run.name, c.run.id),
    });
  }

  // ------------------------------------------------------------ workflows

  /**
   * startWorkflow starts durable workflow name (registered by a Go worker
   * with workflow.Register) with input, and returns its id once its record
   * is stored; its first segment is published, or stored for the
   * scheduler when it is due later. AlreadyExistsError for an id started
   * before; DefinitionInactiveError for a deprecated or deleted definition.
   */
  async startWorkflow(name: string, input: unknown, opts: StartOptions = {}): Promise<string> {
    validateName(name);
    const raw = encodeArgs(input, `workflow ${name}: input`);
    let id: string;
    if (opts.id === undefined || opts.id === "") id = this.newId();
    else {
      validateRunID(opts.id);
      id = opts.id;
    }
    const now = this.clock();
    let at: Nanos | undefined;
    if (opts.at !== undefined) at = fromDate(opts.at);
    else if (opts.after !== undefined) {
      const d = toNanos(opts.after, "after");
      if (d > 0n) at = now + d;
    }
    if (at !== undefined && !timeFits(at)) throw new BadArgsError("time: a run record holds years 0 through 9999");
    const sched = at === undefined || at < now ? now : at;
    const segArgs = segArgsJSON({ wf: id, n: 1, input: raw, scheduled: sched, created: now });
    const max = this.maxPayload;
    if (max > 0 && utf8Length(segArgs) > argsLimit(max)) {
      throw new ArgsTooLargeError(`workflow ${name}: ${utf8Length(raw)} bytes of input, ${utf8Length(segArgs)} with its first segment's args, more than a run holds (${argsLimit(max)})`);
    }
    return this.guarded(async () => {
      const def = await this.directGet(this.names.journalBucket, `=def.${name}`);
      if (def && !isMarker(def.header) && (def.data === "deprecated" || def.data === "deleted")) {
        throw new DefinitionInactiveError(`${name} is ${def.data}`);
      }
      const seg1 = segmentID(id, 1);
      const rec: NewRecord = {
        id, name, kind: "retryable", args: raw, state: "pending", scheduledTime: sched, creationTime: now, attempts: 0, children: [seg1],
      };
      await this.createRecord(rec);
      try {
        if (opts.id) {
          // What an earlier workflow of this id left in the journal goes.
          const step = await this.directGet(this.names.journalBucket, `${id}.s.1`);
          if (step && !isMarker(step.header)) {
            await this.api(`$JS.API.STREAM.PURGE.${this.names.kvStream(this.names.journalBucket)}`, {
              filter: this.names.kvSubject(this.names.journalBucket, `${id}.>`),
            });
          }
        }
        const seg: NewRecord = {
          id: seg1, name: segmentFunction(name), kind: "retryable", args: segArgs, state: "pending",
          scheduledTime: sched, creationTime: now, attempts: 0, parent: id,
        };
        const shallow = seg.name.split(".").length - 1 < 8;
        if (shallow && sched > this.clock()) {
          const e: Envelope = { ...envelopeOf(seg, 0), new: true };
          await this.ride(() => this.jsPublish(delayedMsg(this.names, e, sched)));
        } else if (shallow) {
          await this.publishDirect(seg);
        } else {
          const rev = await this.createRecord(seg);
          await this.dispatch(seg, rev);
        }
      } catch (e) {
        const err = e as Error & { id?: string };
        err.message = `workflow ${id} is recorded but its first segment was not published (the repair sweep will): ${err.message}`;
        err.id = id;
        throw err;
      }
      return id;
    });
  }

  /**
   * sendEvent sends event name with payload to durable workflow id: the
   * event is stored in the workflow's journal until an await consumes it,
   * and a run of the workflow's wake function resumes the workflow if it
   * waits. NotFoundError, NotAWorkflowError, EndedError,
   * InvalidEventNameError, ArgsTooLargeError.
   */
  async sendEvent(id: string, name: string, payload: unknown): Promise<void> {
    validateEventName(name);
    const raw = encodeArgs(payload, `event ${name}`);
    const limit = eventLimit(this.maxPayload);
    if (utf8Length(raw) > limit) {
      throw new ArgsTooLargeError(`event ${name}: ${utf8Length(raw)} bytes of payload, more than an await's journal entry holds (${limit})`);
    }
    const run = await this.get(id);
    if (!(run.children ?? []).includes(segmentID(id, 1))) throw new NotAWorkflowError(`run ${id} (${run.name})`);
    if (isTerminal(run.state)) throw new EndedError(`workflow ${id} is ${run.state}`);
    await this.guarded(async () => {
      const key = eventKey(id, name, this.newId());
      const body = eventJSON(name, raw, this.clock());
      const subject = this.names.kvSubject(this.names.journalBucket, key);
      await this.ride(async () => {
        try {
          await this.jsPublish({ subject, headers: [[H.expectLastSubjSeq, "0"]], data: body });
        } catch (e) {
          if (!isWrongSequence(e)) throw e;
          // The key is this call's alone: stored by an earlier try, if the leader has it.
          if (await this.leaderLast(this.names.kvStream(this.names.journalBucket), subject)) return;
          throw new Again(`event ${key}: refused, and nothing is stored`);
        }
      });
      try {
        await this.enqueue({ name: wakeFunction(run.name), kind: "retryable", args: new RawJSON(wakeArgsJSON(id)) });
      } catch (e) {
        const err = e as Error;
        err.message = `workflow ${id}: event ${name} stored, resume failed: ${err.message}`;
        throw err;
      }
    });
  }

  // ------------------------------------------------------------ permissions

  /**
   * guarded runs op and fails it at once with PermissionDeniedError when
   * the server reports a permissions violation for a subject the client
   * uses ($JS., $KV. and the prefix's), instead of waiting for a timeout:
   * NATS drops a denied publish and says so on the connection only.
   */
  private guarded<T>(op: () => Promise<T>): Promise<T> {
    let g: Guard | undefined;
    const denied = new Promise<never>((_, reject) => {
      g = { prefixes: ["$JS.", "$KV.", this.names.prefix + "."], fail: reject };
      this.guards.add(g);
    });
    denied.catch(() => {});
    const run = op().catch((e) => {
      throw asPermission(e) ?? e;
    });
    return Promise.race([run, denied]).finally(() => this.guards.delete(g!));
  }

  private watchStatus(): void {
    void (async () => {
      try {
        for await (const s of this.nc.status()) {
          if (s.type !== "error") continue;
          const err = (s as { error: Error & { operation?: string; subject?: string } }).error;
          if (err?.name !== "PermissionViolationError" || err.operation !== "publish") continue;
          const subject = err.subject ?? "";
          // A publish of the window: its caller fails at once (guards, below, too).
          this.window.denied(subject, new PermissionDeniedError(subject, err.message, { cause: err }));
          const t = this.tolerant.get(subject);
          if (t) {
            for (const f of t) f(new PermissionDeniedError(subject, err.message, { cause: err }));
            continue;
          }
          for (const g of this.guards) {
            if (g.prefixes.some((p) => subject.startsWith(p))) {
              g.fail(new PermissionDeniedError(subject, err.message, { cause: err }));
            }
          }
        }
      } catch {
        // the connection closed
      }
    })();
  }
}
