"""jetflow: a producer of jetflow runs and workflows for Python (asyncio),
on nats-py. Go workers run what it schedules.

    import nats, jetflow

    nc = await nats.connect("nats://127.0.0.1:4222")
    producer = await jetflow.Producer.create(nc)
    send_email = jetflow.define("emails.send", EmailArgs)
    run_id = await producer.enqueue(send_email(EmailArgs(to="a@b.c")))
    run = await producer.wait(run_id)

See README.md for every function, and docs/wire-format.md in the jetflow
repository for what goes over the wire.
"""

from ._errors import (
    AlreadyExists,
    ArgsTooLarge,
    BadArgs,
    BadRecord,
    BatchFailed,
    DefinitionInactive,
    Ended,
    InvalidEventName,
    InvalidName,
    InvalidRunID,
    JetflowError,
    NotAWorkflow,
    NotFound,
    NotProvisioned,
    PermissionDenied,
    ServerError,
    Timeout,
    TooManyRuns,
    WorkflowEnded,
)
from ._function import AT_MOST_ONCE, RETRYABLE, Call, Function, define, raw_call
from ._producer import CancelResult, Item, Pending, Producer, RunWatch
from ._run import Attempt, Progress, Run, State
from ._wire import (
    MAX_BATCH,
    MAX_BATCH_ARGS,
    RECORD_ROOM,
    RawJSON,
    validate_event_name,
    validate_name,
    validate_run_id,
)

__version__ = "0.1.0"

__all__ = [
    "AT_MOST_ONCE",
    "AlreadyExists",
    "ArgsTooLarge",
    "Attempt",
    "BadArgs",
    "BadRecord",
    "BatchFailed",
    "Call",
    "CancelResult",
    "DefinitionInactive",
    "Ended",
    "Function",
    "InvalidEventName",
    "InvalidName",
    "InvalidRunID",
    "Item",
    "JetflowError",
    "MAX_BATCH",
    "MAX_BATCH_ARGS",
    "NotAWorkflow",
    "NotFound",
    "NotProvisioned",
    "Pending",
    "PermissionDenied",
    "Producer",
    "Progress",
    "RECORD_ROOM",
    "RETRYABLE",
    "RawJSON",
    "Run",
    "RunWatch",
    "ServerError",
    "State",
    "Timeout",
    "TooManyRuns",
    "WorkflowEnded",
    "define",
    "raw_call",
    "validate_event_name",
    "validate_name",
    "validate_run_id",
]
