// Typed errors, one class per sentinel error of the Go producer. Each has a
// stable `code` and a `sentinel`, the Go error's text, which starts the
// message as Go's wrapped errors do ("producer: run already exists: ...").

/** The base class of every error this package throws on purpose. */
export class JetflowError extends Error {
  /** A stable, machine-readable code (e.g. "alreadyExists"). */
  readonly code: string;
  /** The text of the Go sentinel error this one matches. */
  readonly sentinel: string;
  constructor(code: string, sentinel: string, detail?: string, options?: { cause?: unknown }) {
    super(detail ? `${sentinel}: ${detail}` : sentinel, options);
    this.code = code;
    this.sentinel = sentinel;
    this.name = new.target.name;
  }
}

/**
 * A run (or workflow) with the requested id exists; nothing else was
 * scheduled. `id` is that run's id. Answered only once the existing record
 * or message was read from the stream's leader.
 */
export class AlreadyExistsError extends JetflowError {
  readonly id: string;
  constructor(id: string, detail?: string) {
    super("alreadyExists", "producer: run already exists", detail ?? `run ${id}`);
    this.id = id;
  }
}

/** Arguments above a limit: 8 MB per call, or one run's server limit. */
export class ArgsTooLargeError extends JetflowError {
  constructor(detail?: string) {
    super("argsTooLarge", "producer: arguments too large", detail);
  }
}

/** Arguments (or an event payload, or a time) that cannot be encoded. */
export class BadArgsError extends JetflowError {
  constructor(detail?: string, options?: { cause?: unknown }) {
    super("badArgs", "jetflow: bad arguments", detail, options);
  }
}

/** No run with that id. */
export class NotFoundError extends JetflowError {
  constructor(detail?: string) {
    super("notFound", "jetflow: not found", detail);
  }
}

/** sendEvent to a run that is not a durable workflow. */
export class NotAWorkflowError extends JetflowError {
  constructor(detail?: string) {
    super("notWorkflow", "workflow: not a workflow", detail);
  }
}

/** sendEvent to a workflow that has ended; the event was not stored. */
export class EndedError extends JetflowError {
  constructor(detail?: string) {
    super("workflowEnded", "workflow: workflow has ended", detail);
  }
}

/**
 * The NATS server refused a request for lack of permission (its
 * "Permissions Violation"), reported as soon as the server says so, not
 * after a timeout. `subject` is the subject refused.
 */
export class PermissionDeniedError extends JetflowError {
  readonly subject: string;
  constructor(subject: string, detail?: string, options?: { cause?: unknown }) {
    super("permissionDenied", "nats: permissions violation", detail ?? `Permissions Violation for Publish to "${subject}"`, options);
    this.subject = subject;
  }
}

/** A function (or workflow) name that is not 1-128 bytes of dot-separated tokens. */
export class InvalidNameError extends JetflowError {
  constructor(detail?: string) {
    super("invalidName", "jetflow: invalid function name", detail);
  }
}

/** A run id that is not 1-200 letters, digits, '_' or '-'. */
export class InvalidRunIDError extends JetflowError {
  constructor(detail?: string) {
    super("invalidRunId", "jetflow: invalid run id", detail);
  }
}

/** An event name that is not 1-64 letters, digits, '_' or '-'. */
export class InvalidEventNameError extends JetflowError {
  constructor(detail?: string) {
    super("invalidEventName", "workflow: invalid event name", detail);
  }
}

/** More than 1,000 runs in one batch. */
export class TooManyRunsError extends JetflowError {
  constructor(detail?: string) {
    super("tooManyRuns", "producer: too many runs in one call", detail);
  }
}

/** The server refused a batch; none of it was written. */
export class BatchFailedError extends JetflowError {
  constructor(detail?: string, options?: { cause?: unknown }) {
    super("batchFailed", "producer: batch not written", detail, options);
  }
}

/** A stored record that is not one jetflow wrote. */
export class BadRecordError extends JetflowError {
  constructor(detail?: string) {
    super("badRecord", "jetflow: unreadable run record", detail);
  }
}

/** startWorkflow of a definition that is deprecated or deleted. */
export class DefinitionInactiveError extends JetflowError {
  constructor(detail?: string) {
    super("definitionInactive", "workflow: definition not active", detail);
  }
}

/**
 * The server did not confirm an operation in time (no leader, no answer):
 * the outcome is unknown. Nothing is reported stored that was not confirmed.
 */
export class TimeoutError extends JetflowError {
  constructor(detail?: string, options?: { cause?: unknown }) {
    super("timeout", "jetflow: timed out", detail, options);
  }
}
