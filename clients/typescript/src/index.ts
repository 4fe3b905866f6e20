// jetflow's producer for Node.js: see README.md.
export { Client, defineFunction, rawCall } from "./client.js";
export type { BatchItem, Call, CancelResult, ClientOptions, Duration, JetflowFunction, RunOptions, StartOptions, WaitOptions } from "./client.js";
export {
  AlreadyExistsError,
  ArgsTooLargeError,
  BadArgsError,
  BadRecordError,
  BatchFailedError,
  DefinitionInactiveError,
  EndedError,
  InvalidEventNameError,
  InvalidNameError,
  InvalidRunIDError,
  JetflowError,
  NotAWorkflowError,
  NotFoundError,
  PermissionDeniedError,
  TimeoutError,
  TooManyRunsError,
} from "./errors.js";
export { RawJSON, rawJSON } from "./json.js";
export { checkBatchArgs, checkRunArgs, isValidName, isValidRunID, MAX_BATCH, MAX_CALL_ARGS, RECORD_ROOM, validateEventName, validateName, validateRunID } from "./validate.js";
export { isTerminal } from "./wire.js";
export type { Attempt, Kind, Progress, Run, State } from "./wire.js";
/** The wire format's pure encoders and decoders (what the shared test vectors check). */
export * as wire from "./wire.js";
export * as time from "./time.js";
