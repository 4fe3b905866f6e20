// Names and ids as jetflow.ValidateName, ValidateRunID and the workflow
// package's event names accept them.

import { ArgsTooLargeError, InvalidEventNameError, InvalidNameError, InvalidRunIDError, TooManyRunsError } from "./errors.js";

/** The most runs one batch holds (producer.MaxBatch). */
export const MAX_BATCH = 1000;
/** The most argument bytes one call carries (producer.MaxBatchArgs). */
export const MAX_CALL_ARGS = 8 << 20;
/** What a run's record needs beside its args: a run's args are at most max payload less this. */
export const RECORD_ROOM = 4096;

function validToken(t: string): boolean {
  if (t.length === 0) return false;
  for (let i = 0; i < t.length; i++) {
    const c = t.charCodeAt(i);
    const ok =
      (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 95 || c === 45;
    if (!ok) return false;
  }
  return true;
}

/** isValidName reports whether jetflow.ValidateName accepts name. */
export function isValidName(name: string): boolean {
  if (typeof name !== "string" || name.length === 0 || name.length > 128) return false;
  return name.split(".").every(validToken);
}

/** validateName throws InvalidNameError unless name is a valid function name. */
export function validateName(name: string): void {
  if (typeof name !== "string" || name.length === 0 || name.length > 128) {
    throw new InvalidNameError(`${JSON.stringify(name)} must be 1-128 bytes`);
  }
  if (!isValidName(name)) {
    throw new InvalidNameError(`${JSON.stringify(name)}: tokens are letters, digits, '_' and '-' separated by single dots`);
  }
}

/** isValidRunID reports whether jetflow.ValidateRunID accepts id. */
export function isValidRunID(id: string): boolean {
  return typeof id === "string" && id.length <= 200 && validToken(id);
}

/** validateRunID throws InvalidRunIDError unless id is 1-200 letters, digits, '_' or '-'. */
export function validateRunID(id: string): void {
  if (!isValidRunID(id)) {
    throw new InvalidRunIDError(`${JSON.stringify(id)}: ids are 1-200 letters, digits, '_' or '-'`);
  }
}

/** validateEventName throws InvalidEventNameError unless name is 1-64 letters, digits, '_' or '-'. */
export function validateEventName(name: string): void {
  if (!isValidRunID(name) || name.length > 64) {
    throw new InvalidEventNameError(`${JSON.stringify(name)}: 1-64 letters, digits, '_' or '-'`);
  }
}

/** argsLimit is kv.ArgsLimit: the most bytes of args one run's record holds. */
export function argsLimit(maxPayload: number): number {
  return maxPayload > 8192 ? maxPayload - RECORD_ROOM : 1 << 20;
}

/**
 * checkRunArgs is producer.checkSize: one run's args (n bytes of JSON)
 * fit a record on a server whose max payload is maxPayload (0: unknown).
 */
export function checkRunArgs(n: number, maxPayload: number): void {
  if (maxPayload > 0 && n + RECORD_ROOM > maxPayload) {
    throw new ArgsTooLargeError(`${n} bytes of args, server max payload ${maxPayload}`);
  }
}

/**
 * checkBatchArgs checks a batch's args sizes as producer.Batch does before
 * anything is written: at most 1,000 runs, each within checkRunArgs, and
 * at most 8 MB in total.
 */
export function checkBatchArgs(sizes: number[], maxPayload: number): void {
  if (sizes.length > MAX_BATCH) throw new TooManyRunsError(`${sizes.length} > ${MAX_BATCH}`);
  let total = 0;
  sizes.forEach((n, i) => {
    try {
      checkRunArgs(n, maxPayload);
    } catch (e) {
      (e as { message: string }).message = `item ${i}: ${(e as Error).message}`;
      throw e;
    }
    total += n;
  });
  if (total > MAX_CALL_ARGS) throw new ArgsTooLargeError(`${total} bytes in one call, limit ${MAX_CALL_ARGS}`);
}
