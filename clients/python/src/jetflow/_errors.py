"""Errors: one base class, one subclass per Go sentinel."""

from __future__ import annotations


class JetflowError(Exception):
    """Base class of every error this package raises.

    ``kind`` is the error kind of the shared test vectors (limits.json's
    ``errorKinds``) and ``go`` the Go sentinel it matches. ``run_id`` is set
    where Go returns an id with the error (AlreadyExists, and a workflow
    recorded whose first segment was left to the repair sweep).
    """

    kind: str = "error"
    go: str = ""

    def __init__(self, message: str = "", *, run_id: str | None = None) -> None:
        super().__init__(message or self.go or self.kind)
        self.run_id = run_id


class InvalidName(JetflowError):
    """A function or workflow name jetflow.ValidateName refuses."""

    kind, go = "invalidName", "jetflow.ErrInvalidName"


class InvalidRunID(JetflowError):
    """A run id jetflow.ValidateRunID refuses."""

    kind, go = "invalidRunId", "jetflow.ErrInvalidRunID"


class InvalidEventName(JetflowError):
    """An event name that is not 1-64 letters, digits, '_' or '-'."""

    kind, go = "invalidEventName", "producer.ErrInvalidEventName"


class BadArgs(JetflowError):
    """Arguments (or a time, a duration) that cannot be encoded."""

    kind, go = "badArgs", "jetflow.ErrBadArgs"


class ArgsTooLarge(JetflowError):
    """Args larger than a run record holds (the server's max payload less
    4096 bytes), or more than 8 MB of args in one call."""

    kind, go = "argsTooLarge", "producer.ErrArgsTooLarge"


class TooManyRuns(JetflowError):
    """More than 1,000 runs in one batch."""

    kind, go = "tooManyRuns", "producer.ErrTooManyRuns"


class AlreadyExists(JetflowError):
    """A run (or workflow) with the requested id exists; ``run_id`` is it.
    Raised only once the existing record is known stored."""

    kind, go = "alreadyExists", "producer.ErrAlreadyExists"


class NotFound(JetflowError):
    """No run with that id."""

    kind, go = "notFound", "jetflow.ErrNotFound"


class NotAWorkflow(JetflowError):
    """An event sent to a run that is not a durable workflow."""

    kind, go = "notWorkflow", "producer.ErrNotWorkflow"


class Ended(JetflowError):
    """An event sent to a workflow that has ended (nothing was stored)."""

    kind, go = "workflowEnded", "producer.ErrWorkflowEnded"


WorkflowEnded = Ended


class BadRecord(JetflowError):
    """A stored record jetflow did not write (its JSON, a time or its state
    is unreadable)."""

    kind, go = "badRecord", "jetflow.ErrBadRecord"


class PermissionDenied(JetflowError):
    """The server refused a publish or subscription of this connection's
    user (its ``Permissions Violation``), reported as soon as the server
    says so rather than at a timeout. ``subject`` is the refused subject."""

    kind, go = "permissionDenied", "nats.ErrPermissionViolation"

    def __init__(self, message: str = "", *, subject: str = "", run_id: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.subject = subject


class BatchFailed(JetflowError):
    """The server refused a batch; none of it was written."""

    kind, go = "batchFailed", "producer.ErrBatchFailed"


class DefinitionInactive(JetflowError):
    """The workflow's definition is deprecated or deleted."""

    kind, go = "definitionInactive", "workflow.ErrDefinitionInactive"


class NotProvisioned(JetflowError):
    """jetflow's streams and buckets are missing: run ``jetflow provision``
    (or start any Go jetflow process once) against the server."""

    kind, go = "notProvisioned", "streams.ErrNotProvisioned"


class Timeout(JetflowError, TimeoutError):
    """The server did not answer in time (after retries), or a wait ended."""

    kind, go = "timeout", "context.DeadlineExceeded"


class ServerError(JetflowError):
    """Another error the server answered (a JetStream API error)."""

    kind = "server"

    def __init__(self, message: str = "", *, code: int = 0, err_code: int = 0, run_id: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.code = code
        self.err_code = err_code


ERROR_KINDS: dict[str, type[JetflowError]] = {
    c.kind: c
    for c in (InvalidName, InvalidRunID, InvalidEventName, BadArgs, ArgsTooLarge, TooManyRuns, AlreadyExists,
              NotFound, NotAWorkflow, Ended, BadRecord, PermissionDenied, BatchFailed, DefinitionInactive,
              NotProvisioned, Timeout)
}
