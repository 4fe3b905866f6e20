// Times as jetflow's records and headers carry them: RFC 3339 with up to
// nanoseconds (Go's time.RFC3339Nano, trailing zeros dropped), and Go
// durations (time.Duration.String) for the Jetflow-Timeout header.

import { BadArgsError } from "./errors.js";

/** Nanoseconds since the Unix epoch. */
export type Nanos = bigint;

const NS_PER_MS = 1_000_000n;
const NS_PER_S = 1_000_000_000n;

// The first and last instants a record holds (years 0 through 9999, UTC).
const FIRST = -62167219200n * NS_PER_S; // 0000-01-01T00:00:00Z
const LAST = 253402300799n * NS_PER_S + 999_999_999n; // 9999-12-31T23:59:59.999999999Z

let lastSub = 0n;
/**
 * nowNanos is the wall clock in nanoseconds: Date.now()'s milliseconds and
 * a sub-millisecond part from the monotonic clock, as Go's time.Now has.
 */
export function nowNanos(): Nanos {
  const ms = BigInt(Date.now());
  let sub = process.hrtime.bigint() % NS_PER_MS;
  if (sub === lastSub) sub = (sub + 1n) % NS_PER_MS;
  lastSub = sub;
  return ms * NS_PER_MS + sub;
}

/** fromDate converts a Date (or epoch milliseconds) to nanoseconds. */
export function fromDate(d: Date | number): Nanos {
  const ms = typeof d === "number" ? d : d.getTime();
  if (!Number.isFinite(ms)) throw new BadArgsError("time: invalid date");
  return BigInt(Math.trunc(ms)) * NS_PER_MS + BigInt(Math.round((ms - Math.trunc(ms)) * 1e6));
}

/** toDate converts nanoseconds to a Date (millisecond precision). */
export function toDate(ns: Nanos): Date {
  return new Date(Number(floorDiv(ns, NS_PER_MS)));
}

/** timeFits reports whether a record can hold ns (years 0 through 9999 in UTC). */
export function timeFits(ns: Nanos): boolean {
  return ns >= FIRST && ns <= LAST;
}

function floorDiv(a: bigint, b: bigint): bigint {
  const q = a / b;
  return a % b !== 0n && (a < 0n) !== (b < 0n) ? q - 1n : q;
}

function pad(n: number, w: number): string {
  return String(n).padStart(w, "0");
}

let lastSec = -1n;
let lastHead = "";

/** formatRFC3339Nano formats ns in UTC as Go's time.RFC3339Nano does. */
export function formatRFC3339Nano(ns: Nanos): string {
  if (!timeFits(ns)) throw new BadArgsError("time outside years 0 through 9999");
  if (ns >= 0n) {
    // The common case, by the native formatter: the whole seconds from
    // Date (kept for the next call of the same second), the fraction
    // from ns.
    const sec = ns / NS_PER_S;
    if (sec !== lastSec) {
      lastSec = sec;
      lastHead = new Date(Number(sec) * 1000).toISOString().slice(0, 19); // YYYY-MM-DDTHH:MM:SS
    }
    const frac = Number(ns - sec * NS_PER_S);
    if (frac === 0) return lastHead + "Z";
    let f = String(frac).padStart(9, "0");
    let end = 9;
    while (f.charCodeAt(end - 1) === 48) end--;
    if (end < 9) f = f.slice(0, end);
    return lastHead + "." + f + "Z";
  }
  const secs = floorDiv(ns, NS_PER_S);
  const frac = Number(ns - secs * NS_PER_S);
  let days = Number(floorDiv(secs, 86400n));
  let rem = Number(secs - BigInt(days) * 86400n);
  const hh = Math.floor(rem / 3600);
  rem -= hh * 3600;
  const mm = Math.floor(rem / 60);
  const ss = rem - mm * 60;
  // civil from days (Howard Hinnant's algorithm)
  days += 719468;
  const era = Math.floor(days / 146097);
  const doe = days - era * 146097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365);
  let y = yoe + era * 400;
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const d = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const m = mp < 10 ? mp + 3 : mp - 9;
  if (m <= 2) y++;
  let s = `${pad(y, 4)}-${pad(m, 2)}-${pad(d, 2)}T${pad(hh, 2)}:${pad(mm, 2)}:${pad(ss, 2)}`;
  if (frac !== 0) s += "." + pad(frac, 9).replace(/0+$/, "");
  return s + "Z";
}

const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

function daysFromCivil(y: number, m: number, d: number): number {
  y -= m <= 2 ? 1 : 0;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/** parseRFC3339 reads an RFC 3339 time (fractional seconds allowed) to nanoseconds. */
export function parseRFC3339(s: string): Nanos {
  const m = rfc3339.exec(s);
  if (!m) throw new BadArgsError(`time ${JSON.stringify(s)} is not RFC 3339`);
  const [y, mo, d, h, mi, se] = [1, 2, 3, 4, 5, 6].map((i) => Number(m[i]));
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 59) {
    throw new BadArgsError(`time ${JSON.stringify(s)} is out of range`);
  }
  let secs = BigInt(daysFromCivil(y, mo, d)) * 86400n + BigInt(h * 3600 + mi * 60 + se);
  if (!m[8]) {
    const off = Number(m[10]) * 3600 + Number(m[11]) * 60;
    secs -= BigInt(m[9] === "-" ? -off : off);
  }
  const frac = m[7] ? BigInt(m[7].padEnd(9, "0")) : 0n;
  return secs * NS_PER_S + frac;
}

/** formatGoDuration is Go's time.Duration.String of ns nanoseconds. */
export function formatGoDuration(ns: bigint): string {
  if (ns === 0n) return "0s";
  const neg = ns < 0n;
  let u = neg ? -ns : ns;
  let out: string;
  if (u < NS_PER_S) {
    // ns, µs or ms, with a fraction
    let unit: string;
    let prec: number;
    if (u < 1000n) return (neg ? "-" : "") + u.toString() + "ns";
    if (u < 1_000_000n) {
      unit = "µs";
      prec = 3;
    } else {
      unit = "ms";
      prec = 6;
    }
    out = fmtFrac(u, prec) + unit;
  } else {
    const frac = u % NS_PER_S;
    u /= NS_PER_S;
    let s = (u % 60n).toString();
    if (frac !== 0n) s += "." + frac.toString().padStart(9, "0").replace(/0+$/, "");
    out = s + "s";
    u /= 60n;
    if (u > 0n) {
      out = (u % 60n).toString() + "m" + out;
      u /= 60n;
      if (u > 0n) out = u.toString() + "h" + out;
    }
  }
  return (neg ? "-" : "") + out;
}

function fmtFrac(v: bigint, prec: number): string {
  const p = 10n ** BigInt(prec);
  const whole = v / p;
  const frac = v % p;
  if (frac === 0n) return whole.toString();
  return whole.toString() + "." + frac.toString().padStart(prec, "0").replace(/0+$/, "");
}

const durUnits: Record<string, bigint> = {
  ns: 1n,
  us: 1000n,
  "µs": 1000n,
  "μs": 1000n,
  ms: NS_PER_MS,
  s: NS_PER_S,
  m: 60n * NS_PER_S,
  h: 3600n * NS_PER_S,
};

/** parseGoDuration reads a Go duration ("1m30s", "500ms", "1.5h") to nanoseconds. */
export function parseGoDuration(s: string): bigint {
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/y;
  let str = s;
  let neg = false;
  if (str.startsWith("-") || str.startsWith("+")) {
    neg = str[0] === "-";
    str = str.slice(1);
  }
  if (str === "0") return 0n;
  if (str === "") throw new BadArgsError(`duration ${JSON.stringify(s)}`);
  let total = 0n;
  re.lastIndex = 0;
  let at = 0;
  while (at < str.length) {
    re.lastIndex = at;
    const m = re.exec(str);
    if (!m) throw new BadArgsError(`duration ${JSON.stringify(s)} is not a Go duration`);
    const [whole, frac = ""] = m[1].split(".");
    const unit = durUnits[m[2]];
    total += BigInt(whole || "0") * unit;
    if (frac) total += (BigInt(frac) * unit) / 10n ** BigInt(frac.length);
    at = re.lastIndex;
  }
  return neg ? -total : total;
}
