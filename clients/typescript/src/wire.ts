// The wire format (docs/wire-format.md) as pure functions: what each
// operation publishes (subject, headers, body) and how records and queued
// messages read back. No I/O here: the shared test vectors run these.

import { createHash } from "node:crypto";
import { BadRecordError } from "./errors.js";
import { goJSON, splitObject } from "./json.js";
import { formatGoDuration, formatRFC3339Nano, Nanos, parseGoDuration, parseRFC3339, toDate } from "./time.js";
import { isValidRunID } from "./validate.js";

/** Header names of the wire format. */
export const H = {
  msgID: "Nats-Msg-Id",
  expectLastSubjSeq: "Nats-Expected-Last-Subject-Sequence",
  ttl: "Nats-TTL",
  rev: "Jetflow-Rev",
  attempt: "Jetflow-Attempt",
  parent: "Jetflow-Parent",
  scheduled: "Jetflow-Scheduled",
  created: "Jetflow-Created",
  maxAttempts: "Jetflow-Max-Attempts",
  timeout: "Jetflow-Timeout",
  reload: "Jetflow-Reload",
  new: "Jetflow-New",
  state: "Jetflow-State",
  function: "Jetflow-Function",
  due: "Jetflow-Due",
  notify: "Jetflow-Notify",
  from: "Jetflow-From",
  prev: "Jetflow-Prev",
} as const;

/** Run states. success, failed and canceled are terminal. */
export type State = "pending" | "inProgress" | "success" | "failed" | "canceled";
export const STATES: readonly State[] = ["pending", "inProgress", "success", "failed", "canceled"];
export function isTerminal(s: string): boolean {
  return s === "success" || s === "failed" || s === "canceled";
}

/** How a function behaves on failure. */
export type Kind = "retryable" | "atMostOnce";

/** A message on the wire: headers in the order they are written. */
export interface WireMsg {
  subject: string;
  headers: [string, string][];
  /** The body as text (JSON, UTF-8). */
  data: string;
}

/** Names of one deployment (streams.Config's naming). */
export class Names {
  readonly prefix: string;
  constructor(prefix = "jetflow") {
    this.prefix = prefix;
  }
  get functionStream(): string {
    return this.prefix.toUpperCase() + "_FN";
  }
  functionSubject(fn: string, id: string): string {
    return `${this.prefix}.fn.${fn}.${id}`;
  }
  get cancelSubject(): string {
    return `${this.prefix}.cancel`;
  }
  get runsBucket(): string {
    return `${this.prefix}_runs`;
  }
  get delayedBucket(): string {
    return `${this.prefix}_delayed`;
  }
  get journalBucket(): string {
    return `${this.prefix}_journal`;
  }
  kvStream(bucket: string): string {
    return "KV_" + bucket;
  }
  kvSubject(bucket: string, key: string): string {
    return `$KV.${bucket}.${key}`;
  }
  /** parseFunctionSubject splits <prefix>.fn.<function>.<id>. */
  parseFunctionSubject(subject: string): { fn: string; id: string } | null {
    const pfx = this.prefix + ".fn.";
    if (!subject.startsWith(pfx)) return null;
    const rest = subject.slice(pfx.length);
    const i = rest.lastIndexOf(".");
    if (i <= 0 || i === rest.length - 1) return null;
    return { fn: rest.slice(0, i), id: rest.slice(i + 1) };
  }
}

/** The envelope that starts a run (streams.Envelope); times in nanoseconds. */
export interface Envelope {
  fn: string;
  id: string;
  rev?: number;
  attempt?: number;
  maxAttempts?: number;
  /** nanoseconds */
  timeout?: bigint;
  parent?: string;
  scheduled?: Nanos;
  created?: Nanos;
  trace?: Record<string, string>;
  /** JSON text */
  args?: string;
  reload?: boolean;
  new?: boolean;
}

/** runMessage is streams.Config.Message: the message that starts a run. */
export function runMessage(names: Names, e: Envelope): WireMsg {
  const h: [string, string][] = [];
  const attempt = e.attempt ?? 1;
  if (!e.new) h.push([H.msgID, attempt <= 1 ? e.id : `${e.id}/${attempt}`]);
  if (e.rev) h.push([H.rev, String(e.rev)]);
  if (attempt > 1) h.push([H.attempt, String(attempt)]);
  if (e.maxAttempts && e.maxAttempts > 0) h.push([H.maxAttempts, String(e.maxAttempts)]);
  if (e.timeout && e.timeout > 0n) h.push([H.timeout, formatGoDuration(e.timeout)]);
  if (e.parent) h.push([H.parent, e.parent]);
  if (e.scheduled !== undefined && e.scheduled !== e.created) h.push([H.scheduled, formatRFC3339Nano(e.scheduled)]);
  if (e.created !== undefined) h.push([H.created, formatRFC3339Nano(e.created)]);
  for (const k of Object.keys(e.trace ?? {}).sort()) h.push([k, e.trace![k]]);
  if (e.reload) h.push([H.reload, "1"]);
  if (e.new) h.push([H.new, "1"]);
  return { subject: names.functionSubject(e.fn, e.id), headers: h, data: e.args ?? "" };
}

/** directMessage is a run published without a record: it expects no message on its subject. */
export function directMessage(names: Names, e: Envelope): WireMsg {
  const m = runMessage(names, { ...e, new: true, rev: 0 });
  m.headers.push([H.expectLastSubjSeq, "0"]);
  return m;
}

/** The fields of a record this client writes (a new pending run). */
export interface NewRecord {
  id: string;
  name: string;
  kind?: Kind;
  /** JSON text */
  args?: string;
  state: State;
  scheduledTime: Nanos;
  creationTime: Nanos;
  attempts?: number;
  maxAttempts?: number;
  timeout?: bigint;
  parent?: string;
  children?: string[];
}

/** encodeNewRecord is kv.EncodeRun for the fields a new record has, in Go's order. */
export function encodeNewRecord(r: NewRecord): string {
  let s = `{"id":${goJSON(r.id)},"name":${goJSON(r.name)}`;
  if (r.kind) s += `,"kind":${goJSON(r.kind)}`;
  if (r.args !== undefined && r.args !== "") s += `,"args":${r.args}`;
  s += `,"state":${goJSON(r.state)}`;
  s += `,"scheduledTime":"${formatRFC3339Nano(r.scheduledTime)}","creationTime":"${formatRFC3339Nano(r.creationTime)}"`;
  s += `,"attempts":${r.attempts ?? 0}`;
  if (r.maxAttempts) s += `,"maxAttempts":${r.maxAttempts}`;
  if (r.timeout) s += `,"timeout":${r.timeout.toString()}`;
  if (r.parent) s += `,"parent":${goJSON(r.parent)}`;
  if (r.children && r.children.length > 0) s += `,"children":${goJSON(r.children)}`;
  return s + "}";
}

/** The order kv.EncodeRun writes a record's fields in. */
export const RECORD_FIELDS = [
  "id", "name", "kind", "args", "state", "scheduledTime", "creationTime", "startedTime", "owner",
  "heartbeat", "completedTime", "attempts", "maxAttempts", "timeout", "error", "permanent", "parent",
  "heldBy", "children", "progress", "result", "onComplete", "pool", "priority", "trace", "history",
] as const;

/**
 * reencodeRecord writes a stored record back with some fields changed
 * (undefined removes one): the others keep their stored text, in Go's
 * order; fields this client does not know follow, as stored.
 */
export function reencodeRecord(stored: string, changes: Record<string, string | undefined>): string {
  const m = splitObject(stored);
  for (const [k, v] of Object.entries(changes)) {
    if (v === undefined) m.delete(k);
    else m.set(k, v);
  }
  const parts: string[] = [];
  const known = new Set<string>(RECORD_FIELDS);
  for (const k of RECORD_FIELDS) if (m.has(k)) parts.push(`${goJSON(k)}:${m.get(k)}`);
  for (const [k, v] of m) if (!known.has(k)) parts.push(`${goJSON(k)}:${v}`);
  return "{" + parts.join(",") + "}";
}

/** recordHeaders is what every record write carries (kv.Store.RecordMsg). */
export function recordHeaders(o: {
  state: string;
  name: string;
  scheduledTime: Nanos;
  expect: number;
  from?: string;
  ttl?: string;
  completedTime?: Nanos;
  onComplete?: boolean;
}): [string, string][] {
  const h: [string, string][] = [[H.expectLastSubjSeq, String(o.expect)]];
  if (isTerminal(o.state)) h.push([H.ttl, o.ttl ?? "168h0m0s"]);
  h.push([H.state, o.state], [H.function, o.name], [H.due, unixMilli(o.scheduledTime).toString()]);
  if (o.from) h.push([H.from, o.from]);
  if (o.expect !== 0) h.push([H.prev, String(o.expect)]);
  if (isTerminal(o.state) && o.onComplete && o.completedTime !== undefined) {
    h.push([H.notify, unixMilli(o.completedTime).toString()]);
  }
  return h;
}

function unixMilli(ns: Nanos): bigint {
  const q = ns / 1_000_000n;
  return ns % 1_000_000n < 0n ? q - 1n : q;
}

/** newRecordMsg is the create-only write of a new record (expect 0, or a marker's revision). */
export function newRecordMsg(names: Names, r: NewRecord, expect = 0): WireMsg {
  return {
    subject: names.kvSubject(names.runsBucket, r.id),
    headers: recordHeaders({ state: r.state, name: r.name, scheduledTime: r.scheduledTime, expect }),
    data: encodeNewRecord(r),
  };
}

/** compactGo is Go's json.Compact with HTML escaping: what json.Marshal makes of a json.RawMessage. */
export function compactGo(raw: string): string {
  let out = "";
  let inStr = false;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (inStr) {
      if (c === "\\") {
        out += c + raw[i + 1];
        i++;
        continue;
      }
      if (c === '"') inStr = false;
      if (c === "<") out += "\\u003c";
      else if (c === ">") out += "\\u003e";
      else if (c === "&") out += "\\u0026";
      else if (c === "\u2028") out += "\\u2028";
      else if (c === "\u2029") out += "\\u2029";
      else out += c;
      continue;
    }
    if (c === " " || c === "\n" || c === "\r" || c === "\t") continue;
    if (c === '"') inStr = true;
    out += c;
  }
  return out;
}

/** envelopeJSON is json.Marshal of an Envelope's fields, in Go's order (without the closing brace). */
function envelopeFields(e: Envelope): string {
  let s = `"fn":${goJSON(e.fn)},"id":${goJSON(e.id)}`;
  if (e.rev) s += `,"rev":${e.rev}`;
  if (e.attempt) s += `,"attempt":${e.attempt}`;
  if (e.maxAttempts) s += `,"maxAttempts":${e.maxAttempts}`;
  if (e.timeout) s += `,"timeout":${e.timeout.toString()}`;
  if (e.parent) s += `,"parent":${goJSON(e.parent)}`;
  if (e.scheduled !== undefined) s += `,"scheduled":"${formatRFC3339Nano(e.scheduled)}"`;
  if (e.created !== undefined) s += `,"created":"${formatRFC3339Nano(e.created)}"`;
  if (e.trace && Object.keys(e.trace).length > 0) {
    const t: Record<string, string> = {};
    for (const k of Object.keys(e.trace).sort()) t[k] = e.trace[k];
    s += `,"trace":${goJSON(t)}`;
  }
  if (e.args !== undefined && e.args !== "") s += `,"args":${compactGo(e.args)}`;
  if (e.reload) s += `,"reload":true`;
  if (e.new) s += `,"new":true`;
  return s;
}

/** delayedKey is <due unix second>.<run id>. */
export function delayedKey(due: Nanos, id: string): string {
  const q = due / 1_000_000_000n;
  const sec = due % 1_000_000_000n < 0n ? q - 1n : q;
  return `${sec}.${id}`;
}

/** delayedMsg is the write of a delayed entry (kv.Store.DelayedMsg). */
export function delayedMsg(names: Names, e: Envelope, due: Nanos): WireMsg {
  return {
    subject: names.kvSubject(names.delayedBucket, delayedKey(due, e.id)),
    headers: [],
    data: `{${envelopeFields(e)},"due":"${formatRFC3339Nano(due)}"}`,
  };
}

/** envelopeOf is engine.Envelope of a new pending run. */
export function envelopeOf(r: NewRecord, rev: number): Envelope {
  return {
    fn: r.name, id: r.id, rev, attempt: (r.attempts ?? 0) + 1, maxAttempts: r.maxAttempts,
    timeout: r.timeout, parent: r.parent, scheduled: r.scheduledTime, created: r.creationTime, args: r.args,
  };
}

// ---- workflows (internal/wfwire) ----

/** derivedID is jetflow.DerivedID: id when valid, else "h" + 40 hex of its SHA-256. */
export function derivedID(id: string): string {
  if (isValidRunID(id)) return id;
  return "h" + createHash("sha256").update(id, "utf8").digest("hex").slice(0, 40);
}

/** segmentID is the run id of segment n of workflow id. */
export function segmentID(id: string, n: number): string {
  return derivedID(`${id}-seg${n}`);
}

export function segmentFunction(name: string): string {
  return name + ".segment";
}
export function wakeFunction(name: string): string {
  return name + ".wake";
}

/** segArgsJSON is json.Marshal(wfwire.SegArgs) of a first segment. */
export function segArgsJSON(a: { wf: string; n: number; input?: string; scheduled?: Nanos; created?: Nanos; parent?: string }): string {
  let s = `{"wf":${goJSON(a.wf)},"n":${a.n}`;
  if (a.input !== undefined && a.input !== "") s += `,"input":${compactGo(a.input)}`;
  if (a.scheduled !== undefined) s += `,"scheduled":"${formatRFC3339Nano(a.scheduled)}"`;
  if (a.created !== undefined) s += `,"created":"${formatRFC3339Nano(a.created)}"`;
  if (a.parent) s += `,"parent":${goJSON(a.parent)}`;
  return s + "}";
}

/** wakeArgsJSON is the args of a wake run: a jetflow.Completion whose context is {"wf": id}. */
export function wakeArgsJSON(wf: string): string {
  return `{"run":null,"context":{"wf":${goJSON(wf)}}}`;
}

/** eventKey is the journal key of an event: <wf>.ev.<name>.<unique>. */
export function eventKey(wf: string, name: string, unique: string): string {
  return `${wf}.ev.${name}.${unique}`;
}

/** eventJSON is json.Marshal(wfwire.Event). */
export function eventJSON(name: string, payload: string, sent: Nanos): string {
  let s = `{"name":${goJSON(name)}`;
  if (payload !== "") s += `,"payload":${compactGo(payload)}`;
  return s + `,"sent":"${formatRFC3339Nano(sent)}"}`;
}

/** eventLimit is wfwire.EventLimit: the most payload bytes an event takes. */
export function eventLimit(maxPayload: number): number {
  if (maxPayload <= 0) return Number.MAX_SAFE_INTEGER;
  return (maxPayload > 8192 ? maxPayload - 4096 : 1 << 20) - 1024;
}

// ---- reading ----

/** Progress a handler reported. */
export interface Progress {
  percent?: number;
  processed?: number;
  total?: number;
  message?: string;
  updated?: Date;
}

/** One ended attempt of a run. */
export interface Attempt {
  attempt: number;
  worker?: string;
  startedTime?: Date;
  completedTime?: Date;
  outcome: string;
  error?: string;
}

/** A run's status record (jetflow.Run), as this client reads it. */
export interface Run {
  id: string;
  name: string;
  kind?: Kind;
  /** The arguments, decoded. argsJSON has them as stored. */
  args: unknown;
  argsJSON?: string;
  state: State;
  scheduledTime: Date;
  creationTime: Date;
  startedTime?: Date;
  owner?: string;
  heartbeat?: Date;
  completedTime?: Date;
  attempts: number;
  maxAttempts?: number;
  /** The timeout override in milliseconds (the record stores nanoseconds: timeoutNanos). */
  timeout?: number;
  timeoutNanos?: bigint;
  error?: string;
  permanent?: boolean;
  parent?: string;
  heldBy?: string;
  children?: string[];
  progress?: Progress;
  /** What the handler stored with SetResult, decoded. resultJSON has it as stored. */
  result?: unknown;
  resultJSON?: string;
  onComplete?: { fn: string; args?: unknown };
  pool?: string;
  priority?: number;
  trace?: Record<string, string>;
  history?: Attempt[];
  /** The record's revision (its stream sequence); 0 for a run read from its waiting message. */
  revision: number;
}

const recordTimes = ["scheduledTime", "creationTime", "startedTime", "heartbeat", "completedTime"] as const;

function timeField(v: unknown, what: string, rev: number): Date | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "string") throw new BadRecordError(`(revision ${rev}): ${what} is not a time`);
  try {
    return toDate(parseRFC3339(v));
  } catch {
    throw new BadRecordError(`(revision ${rev}): ${what} ${JSON.stringify(v)} is not RFC 3339`);
  }
}

/** decodeRecord reads a record body (kv.Decode): BadRecordError for one jetflow did not write. */
export function decodeRecord(text: string, rev: number): Run {
  let o: Record<string, unknown>;
  let raw: Map<string, string>;
  try {
    o = JSON.parse(text);
    raw = splitObject(text);
  } catch (e) {
    throw new BadRecordError(`(revision ${rev}): ${(e as Error).message}`);
  }
  if (o === null || typeof o !== "object" || Array.isArray(o)) throw new BadRecordError(`(revision ${rev}): not an object`);
  if (typeof o.state !== "string" || !STATES.includes(o.state as State)) {
    throw new BadRecordError(`(revision ${rev}): state ${JSON.stringify(o.state)}`);
  }
  const r: Run = {
    id: String(o.id ?? ""),
    name: String(o.name ?? ""),
    args: undefined,
    state: o.state as State,
    scheduledTime: new Date(0),
    creationTime: new Date(0),
    attempts: typeof o.attempts === "number" ? o.attempts : 0,
    revision: rev,
  };
  for (const f of recordTimes) {
    const d = timeField(o[f], f, rev);
    if (d) (r as unknown as Record<string, Date>)[f] = d;
    else if (f === "scheduledTime" || f === "creationTime") {
      (r as unknown as Record<string, Date>)[f] = new Date("0001-01-01T00:00:00Z"); // Go's zero time
    }
  }
  if (raw.has("args")) {
    r.args = o.args;
    r.argsJSON = raw.get("args");
  } else delete r.args;
  if (o.kind !== undefined) r.kind = o.kind as Kind;
  if (o.owner) r.owner = String(o.owner);
  if (o.maxAttempts) r.maxAttempts = Number(o.maxAttempts);
  if (o.timeout) {
    r.timeoutNanos = BigInt(raw.get("timeout")!);
    r.timeout = Number(r.timeoutNanos / 1_000_000n);
  }
  if (o.error) r.error = String(o.error);
  if (o.permanent) r.permanent = true;
  if (o.parent) r.parent = String(o.parent);
  if (o.heldBy) r.heldBy = String(o.heldBy);
  if (Array.isArray(o.children) && o.children.length) r.children = o.children.map(String);
  if (o.progress && typeof o.progress === "object") {
    const p = o.progress as Record<string, unknown>;
    r.progress = {};
    if (p.percent !== undefined) r.progress.percent = Number(p.percent);
    if (p.processed !== undefined) r.progress.processed = Number(p.processed);
    if (p.total !== undefined) r.progress.total = Number(p.total);
    if (p.message !== undefined) r.progress.message = String(p.message);
    if (p.updated !== undefined) r.progress.updated = timeField(p.updated, "progress.updated", rev);
  }
  if (raw.has("result")) {
    r.result = o.result;
    r.resultJSON = raw.get("result");
  }
  if (o.onComplete && typeof o.onComplete === "object") {
    const c = o.onComplete as Record<string, unknown>;
    r.onComplete = { fn: String(c.fn ?? "") };
    if (c.args !== undefined) r.onComplete.args = c.args;
  }
  if (o.pool) r.pool = String(o.pool);
  if (o.priority) r.priority = Number(o.priority);
  if (o.trace && typeof o.trace === "object") r.trace = o.trace as Record<string, string>;
  if (Array.isArray(o.history) && o.history.length) {
    r.history = o.history.map((a: Record<string, unknown>, i: number) => {
      const h: Attempt = { attempt: Number(a.attempt ?? 0), outcome: String(a.outcome ?? "") };
      if (a.worker) h.worker = String(a.worker);
      const st = timeField(a.startedTime, `history[${i}].startedTime`, rev);
      if (st) h.startedTime = st;
      const ct = timeField(a.completedTime, `history[${i}].completedTime`, rev);
      if (ct) h.completedTime = ct;
      if (a.error) h.error = String(a.error);
      return h;
    });
  }
  return r;
}

/** isMarker reports a KV delete, purge or TTL-expiry marker's headers. */
export function isMarker(get: (k: string) => string): boolean {
  return get("KV-Operation") !== "" || get("Nats-Marker-Reason") !== "";
}

/**
 * queuedRun reads a run from its waiting message (kv.Store.queuedRun): a
 * pending run, revision 0; null for a message that is not a run.
 * storedAt is when the stream stored it (the default creation time).
 */
export function queuedRun(names: Names, subject: string, get: (k: string) => string, data: string, storedAt: Nanos): Run | null {
  const p = names.parseFunctionSubject(subject);
  if (!p) return null;
  const num = (k: string, min: number): number | null | undefined => {
    const v = get(k);
    if (v === "") return undefined;
    if (!/^[+-]?\d+$/.test(v) || Number(v) < min) return null;
    return Number(v);
  };
  const attempt = num(H.attempt, 1);
  const maxAttempts = num(H.maxAttempts, 1);
  if (attempt === null || maxAttempts === null) return null;
  if (num(H.rev, 0) === null) return null;
  let timeoutNs: bigint | undefined;
  const tv = get(H.timeout);
  if (tv !== "") {
    try {
      timeoutNs = parseGoDuration(tv);
    } catch {
      return null;
    }
    if (timeoutNs <= 0n) return null;
  }
  const parent = get(H.parent);
  if (parent !== "" && !isValidRunID(parent)) return null;
  let created = storedAt;
  let scheduled: Nanos | undefined;
  try {
    if (get(H.created) !== "") created = parseRFC3339(get(H.created));
    if (get(H.scheduled) !== "") scheduled = parseRFC3339(get(H.scheduled));
  } catch {
    return null;
  }
  const args = data.length === 0 ? "null" : data;
  const run: Run = {
    id: p.id, name: p.fn, args: safeParse(args), argsJSON: args, state: "pending",
    scheduledTime: toDate(scheduled ?? created), creationTime: toDate(created),
    attempts: (attempt ?? 1) - 1, revision: 0,
  };
  if (maxAttempts) run.maxAttempts = maxAttempts;
  if (timeoutNs) {
    run.timeoutNanos = timeoutNs;
    run.timeout = Number(timeoutNs / 1_000_000n);
  }
  if (parent) run.parent = parent;
  return run;
}

function safeParse(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}

