// JSON as Go's encoding/json writes it, and a reader that keeps a record's
// values as the bytes they were stored with (so that a record read and
// written back, as cancel does, changes only the fields it means to).

import { BadArgsError } from "./errors.js";

const goEscapes = /[<>&\u2028\u2029]/g;
const goEscape: Record<string, string> = {
  "<": "\\u003c",
  ">": "\\u003e",
  "&": "\\u0026",
  "\u2028": "\\u2028",
  "\u2029": "\\u2029",
};

/**
 * goJSON returns JSON.stringify(v) with the escapes Go's json.Marshal
 * makes (<, >, & and U+2028/U+2029 inside strings; outside strings JSON
 * text never holds them), so that the bytes match a Go producer's.
 */
export function goJSON(v: unknown): string {
  const s = JSON.stringify(v);
  if (s === undefined) return "null";
  return s.replace(goEscapes, (c) => goEscape[c]);
}

/** A value already encoded as JSON text, sent as is (after a validity check). */
export class RawJSON {
  readonly json: string;
  constructor(json: string) {
    this.json = json;
  }
  toJSON(): unknown {
    return JSON.parse(this.json);
  }
}

/** rawJSON marks text that is JSON already: it is sent byte for byte. */
export function rawJSON(json: string | Uint8Array): RawJSON {
  return new RawJSON(typeof json === "string" ? json : new TextDecoder().decode(json));
}

/**
 * encodeArgs is Go's Call.Encode: JSON of the arguments (JSON null for
 * undefined), RawJSON as given once checked, and BadArgsError for what
 * cannot be encoded (a BigInt, a cycle) or RawJSON that is not JSON.
 */
export function encodeArgs(args: unknown, what = "arguments"): string {
  if (args instanceof RawJSON) {
    const t = args.json.trim();
    if (t === "") return "null";
    try {
      JSON.parse(t);
    } catch (e) {
      throw new BadArgsError(`${what}: raw JSON is not valid: ${(e as Error).message}`);
    }
    return args.json;
  }
  if (args instanceof Uint8Array) {
    throw new BadArgsError(`${what}: bytes are not JSON; wrap JSON text with rawJSON()`);
  }
  try {
    return goJSON(args === undefined ? null : args);
  } catch (e) {
    throw new BadArgsError(`${what}: ${(e as Error).message}`);
  }
}

/** utf8Length is the number of bytes of s in UTF-8. */
export function utf8Length(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

/**
 * splitObject reads a JSON object's members without decoding their values:
 * key -> the value's text, in order. It throws on text that is not an
 * object.
 */
export function splitObject(text: string): Map<string, string> {
  const out = new Map<string, string>();
  let i = skipWS(text, 0);
  if (text[i] !== "{") throw new SyntaxError("not a JSON object");
  i = skipWS(text, i + 1);
  if (text[i] === "}") return out;
  for (;;) {
    if (text[i] !== '"') throw new SyntaxError(`expected a key at ${i}`);
    const kEnd = skipString(text, i);
    const key = JSON.parse(text.slice(i, kEnd)) as string;
    i = skipWS(text, kEnd);
    if (text[i] !== ":") throw new SyntaxError(`expected ':' at ${i}`);
    i = skipWS(text, i + 1);
    const vEnd = skipValue(text, i);
    out.set(key, text.slice(i, vEnd));
    i = skipWS(text, vEnd);
    if (text[i] === ",") {
      i = skipWS(text, i + 1);
      continue;
    }
    if (text[i] === "}") break;
    throw new SyntaxError(`expected ',' or '}' at ${i}`);
  }
  if (skipWS(text, i + 1) !== text.length) throw new SyntaxError("text after the object");
  return out;
}

function skipWS(s: string, i: number): number {
  while (i < s.length && (s[i] === " " || s[i] === "\n" || s[i] === "\r" || s[i] === "\t")) i++;
  return i;
}

function skipString(s: string, i: number): number {
  // s[i] is the opening quote
  for (let j = i + 1; j < s.length; j++) {
    const c = s[j];
    if (c === "\\") {
      j++;
      continue;
    }
    if (c === '"') return j + 1;
  }
  throw new SyntaxError("unterminated string");
}

function skipValue(s: string, i: number): number {
  const c = s[i];
  if (c === '"') return skipString(s, i);
  if (c === "{" || c === "[") {
    let depth = 0;
    for (let j = i; j < s.length; j++) {
      const d = s[j];
      if (d === '"') {
        j = skipString(s, j) - 1;
        continue;
      }
      if (d === "{" || d === "[") depth++;
      else if (d === "}" || d === "]") {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    throw new SyntaxError("unterminated value");
  }
  let j = i;
  while (j < s.length && !",}] \n\r\t".includes(s[j])) j++;
  if (j === i) throw new SyntaxError(`expected a value at ${i}`);
  return j;
}
