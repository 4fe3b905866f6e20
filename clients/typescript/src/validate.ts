// Names and ids as jetflow.ValidateName, ValidateRunID and the workflow
// package's event names accept them.

import { InvalidEventNameError, InvalidNameError, InvalidRunIDError } from "./errors.js";

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
