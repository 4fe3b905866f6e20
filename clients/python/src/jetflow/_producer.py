"""The producer: schedules runs and workflows, reads their status (the Go
package producer, and workflow.Start)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.nuid import NUID

from . import _wire as w
from ._conn import APIError, NoResponders, Transient, Wire, parse_ack, ride
from ._errors import (
    AlreadyExists,
    ArgsTooLarge,
    BadArgs,
    BadRecord,
    BatchFailed,
    DefinitionInactive,
    Ended,
    InvalidName,
    JetflowError,
    NotAWorkflow,
    NotFound,
    NotProvisioned,
    PermissionDenied,
    ServerError,
    Timeout,
)
from ._function import Call, Function
from ._run import BadMessage, Run, decode_message, decode_record

log = logging.getLogger("jetflow")

_CANCELED_ERROR = "jetflow: run canceled"
_LEADER_DENIED_FOR = 300.0  # seconds a denied leader read is not asked again


@dataclass(frozen=True)
class Item:
    """One run of a ``batch``: a call, when it starts (``at``, or ``after``
    a delay; neither: now) and its options."""

    call: Call
    at: dt.datetime | str | None = None
    after: dt.timedelta | float | str | None = None
    id: str | None = None
    max_attempts: int | None = None
    timeout: dt.timedelta | float | str | None = None
    parent: str | None = None


@dataclass(frozen=True)
class CancelResult:
    """What ``cancel`` did: ``canceled`` is True when this call canceled the
    run, False when it had already ended (``run.state`` says how)."""

    canceled: bool
    run: Run


class Pending:
    """A run scheduled by ``enqueue_async``: its id at once, durable once
    awaited (``await pending`` or ``await pending.wait()``) without error."""

    __slots__ = ("id", "_fut", "_slow", "_done", "_err")

    def __init__(self, run_id: str, fut: asyncio.Future[Msg] | None = None,
                 slow: Callable[[], Awaitable[None]] | None = None, err: BaseException | None = None) -> None:
        self.id = run_id
        self._fut = fut
        self._slow = slow
        self._done = fut is None and slow is None
        self._err = err

    async def wait(self) -> str:
        """Returns the id once the run is durable; raises what scheduling
        it raised (a run that failed was not scheduled)."""
        if not self._done:
            try:
                if self._fut is not None:
                    fut, self._fut = self._fut, None
                    try:
                        if ack_ok(await fut):
                            self._slow = None
                    except Transient:
                        pass
                if self._slow is not None:
                    await self._slow()
            except Exception as e:  # (a cancel of the waiter leaves it to wait again)
                self._err = e
            self._done = True
        if self._err is not None:
            raise self._err
        return self.id

    def __await__(self) -> Generator[Any, None, str]:
        return self.wait().__await__()


def ack_ok(msg: Msg) -> bool:
    """True for a plain acknowledgement of a stored message (read without a
    JSON decoder); anything else (an error, a duplicate, no responders) is
    for parse_ack and the confirming path."""
    d = msg.data
    return d[:11] == b'{"stream":"' and b'"error"' not in d and b'"duplicate"' not in d


@dataclass(slots=True)
class _Plan:
    """One run about to be scheduled: what prepare made of a call."""

    run_id: str
    name: str
    kind: str
    args: bytes
    sched: int
    created: int
    max_attempts: int
    timeout: int
    parent: str
    direct: bool
    trace: dict[str, str] | None = None

    def envelope(self, rev: int = 0, new: bool = False) -> w.Envelope:
        return w.Envelope(self.name, self.run_id, rev=rev, attempt=1, max_attempts=self.max_attempts,
                          timeout=self.timeout, parent=self.parent, scheduled=self.sched, created=self.created,
                          args=self.args, new=new)

    def record(self, children: Sequence[str] = ()) -> dict[str, Any]:
        return w.new_record(run_id=self.run_id, name=self.name, kind=self.kind, args=self.args,
                            scheduled=self.sched, created=self.created, max_attempts=self.max_attempts,
                            timeout=self.timeout, parent=self.parent, children=children)


def _parse_headers(block: bytes) -> dict[str, str]:
    """A raw header block ("NATS/1.0\\r\\nK: V\\r\\n\\r\\n"): first values."""
    out: dict[str, str] = {}
    lines = block.decode("utf-8", "replace").split("\r\n")
    first = lines[0] if lines else ""
    if first.startswith("NATS/1.0") and len(first) > 8:
        status = first[8:].strip().split(" ", 1)
        if status and status[0].isdigit():
            out["Status"] = status[0]
            if len(status) > 1:
                out["Description"] = status[1]
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(":")
        if sep:
            out.setdefault(k.strip(), v.strip())
    return out


def _is_marker(h: Mapping[str, str] | None) -> bool:
    """A KV delete, purge or TTL-expiry marker."""
    return bool(h) and bool(h.get("KV-Operation") or h.get("Nats-Marker-Reason"))  # type: ignore[union-attr]


class _Stored:
    __slots__ = ("seq", "headers", "data", "time", "subject")

    def __init__(self, seq: int, headers: dict[str, str], data: bytes, time_ns: int = 0, subject: str = "") -> None:
        self.seq, self.headers, self.data, self.time, self.subject = seq, headers, data, time_ns, subject


class Producer:
    """Schedules runs and workflows for Go workers, and reads their status,
    over a nats-py connection it does not own (Go's ``producer.Producer``).
    Make one with ``await Producer.create(nc)``; it is safe to share between
    tasks of one event loop.

    Every call that schedules something returns only once it is stored (its
    record or message acknowledged by the stream), and an id is returned or
    AlreadyExists raised only once a record or message is known stored: a
    refused retry is checked with a read only the stream's leader answers,
    and tried again when nothing is there.
    """

    def __init__(self, nc: NATS, *, prefix: str = "jetflow",
                 retention: dt.timedelta | float | str = dt.timedelta(days=7),
                 timeout: float = 30.0, now: Callable[[], int] | None = None,
                 new_id: Callable[[], str] | None = None, domain: str | None = None) -> None:
        if not w.valid_run_id(prefix) or len(prefix) > 32:
            raise InvalidName(f"jetflow: invalid prefix {prefix!r}: one token of letters, digits, '_' or '-'")
        if domain is not None and not w.valid_run_id(domain):
            raise InvalidName(f"jetflow: invalid JetStream domain {domain!r}")
        self.nc = nc
        # The JetStream API's prefix: $JS.API, or $JS.<domain>.API.
        self.api = f"$JS.{domain}.API" if domain else "$JS.API"
        self.prefix = prefix
        self.retention = w.format_duration(w.to_duration_ns(retention))
        self.timeout = timeout
        self._now = now or time.time_ns
        self._new_id: Callable[[], str] = new_id or w.IDs()
        self._wire = Wire(nc)
        up = prefix.upper()
        self.fn_stream = up + "_FN"
        self.runs_bucket = prefix + "_runs"
        self.delayed_bucket = prefix + "_delayed"
        self.journal_bucket = prefix + "_journal"
        self.runs_stream = "KV_" + self.runs_bucket
        self.delayed_stream = "KV_" + self.delayed_bucket
        self.journal_stream = "KV_" + self.journal_bucket
        self._leader_denied: dict[str, float] = {}
        self._started = False

    # ------------------------------------------------------------ lifecycle

    @classmethod
    async def create(cls, nc: NATS, *, prefix: str = "jetflow", check: bool = True,
                     retention: dt.timedelta | float | str = dt.timedelta(days=7), timeout: float = 30.0,
                     domain: str | None = None, now: Callable[[], int] | None = None,
                     new_id: Callable[[], str] | None = None) -> Producer:
        """A producer on nc (a connected ``nats.aio.client.Client``).

        prefix: the deployment's prefix (``streams.Config.Prefix``).
        check: look the streams and buckets up first (``$JS.API.STREAM.INFO``):
        NotProvisioned when one is missing (a Python producer never creates
        them: run ``jetflow provision``), PermissionDenied at once for a
        user without the producer role of docs/permissions.md.
        retention: ``streams.Config.Retention`` (the ``Nats-TTL`` of the
        records ``cancel`` ends). timeout: how long one call rides out an
        election or a reconnect before Timeout. domain: a JetStream domain
        (its API is $JS.<domain>.API), as nats.go's jetstream.WithDomain. now (nanoseconds since the
        epoch) and new_id (run ids) replace the clock and the id generator
        (tests).
        """
        p = cls(nc, prefix=prefix, retention=retention, timeout=timeout, now=now, new_id=new_id, domain=domain)
        await p._start()
        if check:
            await p.check()
        return p

    async def _start(self) -> None:
        if not self._started:
            await self._wire.start()
            self._started = True

    async def close(self) -> None:
        """Stops the producer's subscription (not the connection)."""
        await self._wire.close()

    async def __aenter__(self) -> Producer:
        await self._start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def max_payload(self) -> int:
        """The server's max payload (its INFO)."""
        return int(self.nc.max_payload or 0)

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.timeout

    async def check(self) -> None:
        """Looks up the function stream and the runs, delayed and journal
        buckets: NotProvisioned for one missing, PermissionDenied at once
        for a user who may not look them up."""

        async def info(stream: str) -> str | None:
            async def op(_: bool) -> str | None:
                try:
                    await self._wire.api(f"{self.api}.STREAM.INFO.{stream}")
                except APIError as e:
                    if e.err_code == 10059 or e.code == 404:
                        return stream
                    raise
                except NoResponders:
                    raise NotProvisioned("jetflow: the server has no JetStream (no responders)") from None
                return None

            return await ride(op, self._deadline())

        missing = [s for s in await asyncio.gather(*(info(s) for s in (
            self.fn_stream, self.runs_stream, self.delayed_stream, self.journal_stream))) if s]
        if missing:
            raise NotProvisioned(f"streams: not provisioned: {', '.join(missing)} missing; provision with a user "
                                 "allowed to create streams: jetflow provision, or streams.Provision")

    # ------------------------------------------------------------ scheduling

    async def enqueue(self, call: Call, *, id: str | None = None, max_attempts: int | None = None,
                      timeout: dt.timedelta | float | str | None = None, parent: str | None = None) -> str:
        """Schedules a run to start now and returns its id once it is
        stored (Go's ``Enqueue``).

        ``id`` is an idempotency key: a run with that id existing raises
        AlreadyExists (its ``run_id`` is the id) and schedules nothing.
        ``max_attempts`` and ``timeout`` (a timedelta, seconds, or a Go
        duration such as ``"30s"``) override the function's for this run;
        ``parent`` records the run that scheduled it.
        Raises InvalidName, InvalidRunID, BadArgs, ArgsTooLarge,
        AlreadyExists, PermissionDenied, Timeout."""
        return await self._run_at(None, call, id, max_attempts, timeout, parent)

    async def run_after(self, delay: dt.timedelta | float | str, call: Call, *, id: str | None = None,
                        max_attempts: int | None = None, timeout: dt.timedelta | float | str | None = None,
                        parent: str | None = None) -> str:
        """Schedules a run to start after delay (a timedelta, seconds, or a
        Go duration); a scheduler must run (Go's ``RunAfter``)."""
        d = w.to_duration_ns(delay)
        at = None if d <= 0 else self._now() + d
        return await self._run_at(at, call, id, max_attempts, timeout, parent)

    async def run_at(self, when: dt.datetime | str, call: Call, *, id: str | None = None,
                     max_attempts: int | None = None, timeout: dt.timedelta | float | str | None = None,
                     parent: str | None = None) -> str:
        """Schedules a run to start at ``when`` (a datetime, naive meaning
        local time, or an RFC 3339 string); a past time means now (Go's
        ``RunAt``)."""
        return await self._run_at(w.to_time_ns(when), call, id, max_attempts, timeout, parent)

    async def enqueue_async(self, call: Call, *, id: str | None = None, max_attempts: int | None = None,
                            timeout: dt.timedelta | float | str | None = None,
                            parent: str | None = None) -> Pending:
        """Schedules a run to start now without waiting for the server
        (Go's ``EnqueueAsync``): the returned Pending has the id at once and
        is durable once awaited. Publishes are pipelined (up to 4,096
        waiting; a call waits while the window is full), which is how a
        producer reaches JetStream's publish rate. A run that needs its
        record first (``id``, ``parent``) is scheduled as ``enqueue`` does
        before this returns; its Pending holds the outcome. Errors found
        before anything is sent are raised at once."""
        plan = self._prepare(call, None, id, max_attempts, timeout, parent)
        w.check_args_size(len(plan.args), self.max_payload)
        if not plan.direct:
            try:
                rid = await self._schedule(plan)
            except AlreadyExists as e:
                return Pending(plan.run_id, err=e)
            return Pending(rid)
        subject, headers, body = self._direct_message(plan)
        fut = await self._wire.send(subject, body, headers, window=True)
        deadline = self._deadline()

        async def slow() -> None:
            # The first try failed or was answered otherwise than stored:
            # confirmed with the leaders' reads, tried again if need be.
            await self._publish_direct(plan, subject, headers, body, deadline, first=None, retried=True)

        return Pending(plan.run_id, fut, slow)

    async def _run_at(self, at: int | None, call: Call, id: str | None, max_attempts: int | None,
                      timeout: Any, parent: str | None) -> str:
        plan = self._prepare(call, at, id, max_attempts, timeout, parent)
        w.check_args_size(len(plan.args), self.max_payload)
        return await self._schedule(plan)

    def _prepare(self, call: Call, at: int | None, run_id: str | None, max_attempts: int | None,
                 timeout: Any, parent: str | None) -> _Plan:
        if isinstance(call, Function):
            raise BadArgs(f"jetflow: bad arguments: give the call, {call.name}(args), not the function")
        if not isinstance(call, Call):
            raise BadArgs(f"jetflow: bad arguments: {call!r} is not a Call: use fn(args) or jetflow.raw_call")
        w.validate_name(call.name)
        kind = call.kind or w.RETRYABLE
        if kind not in (w.RETRYABLE, w.AT_MOST_ONCE):
            raise InvalidName(f"jetflow: invalid function name: {call.name}: unknown kind {kind!r}")
        args = w.encode_args(call.args)
        explicit = run_id is not None
        if run_id is None:
            run_id = self._new_id()
        else:
            w.validate_run_id(run_id)
        if at is not None and not w.time_fits(at):
            raise BadArgs(f"jetflow: bad arguments: time {at}: a run record holds years 0 through 9999")
        ma = 0
        if max_attempts is not None:
            if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
                raise BadArgs(f"jetflow: bad arguments: max_attempts {max_attempts!r}: an integer >= 1")
            ma = max_attempts
        to = 0
        if timeout is not None:
            to = w.to_duration_ns(timeout)
            if to <= 0:
                raise BadArgs(f"jetflow: bad arguments: timeout {timeout!r}: more than zero")
        par = ""
        if parent is not None:
            w.validate_run_id(parent)
            par = parent
        now = self._now()
        sched = now if at is None or at < now else at
        direct = (not explicit and not par and sched <= now and call.name.count(".") < w.QUEUED_MAX_TOKENS)
        return _Plan(run_id=run_id, name=call.name, kind=kind, args=args, sched=sched, created=now,
                     max_attempts=ma, timeout=to, parent=par, direct=direct, trace=None)

    async def _schedule(self, plan: _Plan, children: Sequence[str] = ()) -> str:
        deadline = self._deadline()
        if plan.direct:
            subject, headers, body = self._direct_message(plan)
            await self._publish_direct(plan, subject, headers, body, deadline)
            return plan.run_id
        rev = await self._create_record(plan, deadline, children)
        await self._dispatch(plan.envelope(rev=rev), deadline)
        return plan.run_id

    def _direct_message(self, plan: _Plan) -> tuple[str, dict[str, str], bytes]:
        if plan.max_attempts or plan.timeout or plan.parent or plan.trace or plan.sched != plan.created:
            subject, headers, body = w.message(self.prefix, plan.envelope(new=True))
        else:  # the common case, as w.message makes it
            subject = f"{self.prefix}.fn.{plan.name}.{plan.run_id}"
            headers, body = {w.H_CREATED: w.format_time(plan.created), w.H_NEW: "1"}, plan.args
        headers[w.H_EXPECT_SUBJ_SEQ] = "0"
        return subject, headers, body

    # ------------------------------------------------ stored, and confirmed

    async def _publish_direct(self, plan: _Plan, subject: str, headers: dict[str, str], body: bytes,
                              deadline: float, first: asyncio.Future[Msg] | None = None,
                              retried: bool = False) -> None:
        """Publishes a run due now without a record (its message is its
        pending record). Every try expects no message on the run's subject;
        one refused, or a later one answered "duplicate", is confirmed with
        the leaders' reads (the function stream, then the runs bucket: a
        worker writes the record before it takes the message) and tried
        again when nothing is stored."""

        async def op(retried: bool) -> None:
            nonlocal first
            h = headers
            if retried:
                if await self._stored_direct(plan):
                    return
                h = dict(headers)
                h[w.H_MSG_ID] = plan.run_id  # deduplicated from here on
            fut, first = first, None
            if fut is None:
                fut = await self._wire.send(subject, body, h, window=True)
            try:
                ack = parse_ack(await fut)
            except APIError as e:
                if not e.wrong_sequence:
                    raise
                if await self._stored_direct(plan):
                    return
                raise Transient(f"run {plan.run_id}: refused ({e}) and not stored: trying again") from None
            if ack.get("duplicate"):
                if await self._stored_direct(plan):
                    return
                raise Transient(f"run {plan.run_id}: answered duplicate and not stored: trying again")

        if first is None and not retried:
            # The common case without a coroutine per step: sent, stored.
            fut = await self._wire.send(subject, body, headers, window=True)
            try:
                if ack_ok(await fut):
                    return
            except Transient:
                retried = True
            first = fut if not retried else None
        await ride(op, deadline, retried=retried)

    async def _stored_direct(self, plan: _Plan) -> bool:
        if await self._leader_last(self.fn_stream, w.function_subject(self.prefix, plan.name, plan.run_id)) is not None:
            return True
        s = await self._confirm_last(self.runs_stream, f"$KV.{self.runs_bucket}.{plan.run_id}")
        return s is not None and not _is_marker(s.headers)

    async def _create_record(self, plan: _Plan, deadline: float, children: Sequence[str] = ()) -> int:
        """Writes a run's pending record create-only and returns its
        revision. A refused create is confirmed with the runs leader: this
        call's earlier try (the same name and creation time) is its
        revision, a marker of an expired record is written over, another
        record is AlreadyExists, and nothing at all means the refusal was a
        leader's that could not commit: the create is tried again."""
        rec = plan.record(children)
        subject = f"$KV.{self.runs_bucket}.{plan.run_id}"
        body = w.encode_record(rec)

        def headers(expect: int) -> dict[str, str]:
            return w.record_headers(state="pending", name=plan.name, scheduled=plan.sched, expect=expect,
                                    from_state="", retention=self.retention)

        return await self._create(self.runs_stream, subject, body, headers(0), lambda s: self._ours(s, plan),
                                  plan.run_id, deadline, over_marker=headers)

    @staticmethod
    def _ours(s: _Stored, plan: _Plan) -> bool:
        """The stored record is the one plan wrote (an earlier try)."""
        try:
            cur = decode_record(s.data, s.seq)
        except BadRecord:
            return False
        return cur.name == plan.name and cur.to_dict().get("creationTime") == w.format_time(plan.created)

    async def _create(self, stream: str, subject: str, body: bytes, headers: dict[str, str],
                      ours: Callable[[_Stored], bool], run_id: str, deadline: float,
                      over_marker: Callable[[int], dict[str, str]] | None = None) -> int:
        async def op(retried: bool) -> int:
            try:
                return int(parse_ack(await (await self._wire.send(subject, body, headers)))["seq"])
            except APIError as e:
                if not e.wrong_sequence:
                    raise
            s = await self._confirm_last(stream, subject)
            if s is None:
                raise Transient(f"{subject}: create refused and nothing stored: trying again")
            if _is_marker(s.headers):
                h = over_marker(s.seq) if over_marker else {**headers, w.H_EXPECT_SUBJ_SEQ: str(s.seq)}
                try:
                    return int(parse_ack(await (await self._wire.send(subject, body, h)))["seq"])
                except APIError as e:
                    if not e.wrong_sequence:
                        raise
                    raise Transient(f"{subject}: written meanwhile: reading again") from None
            if ours(s):
                return s.seq
            raise AlreadyExists(f"run {run_id}: producer: run already exists", run_id=run_id)

        return int(await ride(op, deadline))

    async def _dispatch(self, env: w.Envelope, deadline: float) -> None:
        """Makes a recorded pending run startable: its message, or its
        delayed entry. A failure is logged: the record is durable and the
        scheduler's repair sweep publishes it."""
        subject, headers, body = self._dispatch_message(env)

        async def op(_: bool) -> None:
            parse_ack(await (await self._wire.send(subject, body, headers)))

        try:
            await ride(op, deadline)
        except PermissionDenied:
            raise
        except JetflowError as e:
            log.warning("jetflow: dispatch of run %s failed; the repair sweep will publish it: %s", env.id, e)

    def _dispatch_message(self, env: w.Envelope) -> tuple[str, dict[str, str], bytes]:
        assert env.scheduled is not None
        if env.scheduled > self._now():
            key = w.delayed_key(env.scheduled, env.id)
            return f"$KV.{self.delayed_bucket}.{key}", {}, env.to_json(due=env.scheduled).encode()
        return w.message(self.prefix, env)

    # -------------------------------------------------------------- reads

    async def _direct_get(self, stream: str, subject: str) -> _Stored | None:
        """The last message on subject by a direct get (any replica)."""

        async def op(_: bool) -> _Stored | None:
            msg = await self._wire.request(f"{self.api}.DIRECT.GET.{stream}.{subject}")
            h = msg.headers or {}
            status = h.get("Status", "")
            if status == "404":
                return None
            if status and not msg.data:
                if status in ("408", "503"):
                    raise Transient(f"direct get {subject}: status {status}")
                raise ServerError(f"direct get {subject}: status {status} {h.get('Description', '')}")
            return _Stored(int(h.get("Nats-Sequence", "0") or 0), dict(h), msg.data or b"")

        return await ride(op, self._deadline())

    async def _leader_last(self, stream: str, subject: str) -> _Stored | None:
        """The last message on subject read from the stream's leader
        ($JS.API.STREAM.MSG.GET): it answers what the stream committed."""

        async def op(_: bool) -> _Stored | None:
            try:
                resp = await self._wire.api(f"{self.api}.STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
            except APIError as e:
                if e.err_code == w_ERR_NOT_FOUND or e.code == 404:
                    return None
                raise
            m = resp.get("message") or {}
            hdrs = _parse_headers(base64.b64decode(m["hdrs"])) if m.get("hdrs") else {}
            data = base64.b64decode(m["data"]) if m.get("data") else b""
            t = 0
            if m.get("time"):
                try:
                    t = w.parse_time(m["time"])
                except ValueError:
                    t = 0
            return _Stored(int(m.get("seq", 0)), hdrs, data, t, str(m.get("subject", subject)))

        return await ride(op, self._deadline())

    async def _confirm_last(self, stream: str, subject: str) -> _Stored | None:
        """The leader's read of a KV key, or a direct get where the user may
        not ask the leader (docs/permissions.md: leader reads are optional;
        a denied one is not asked again for 5 minutes)."""
        denied = self._leader_denied.get(stream)
        if denied is None or time.monotonic() - denied > _LEADER_DENIED_FOR:
            try:
                return await self._leader_last(stream, subject)
            except PermissionDenied:
                self._leader_denied[stream] = time.monotonic()
        return await self._direct_get(stream, subject)

    async def _queued(self, run_id: str, fn: str | None = None) -> Run | None:
        """The waiting message of run id (a run published without a record
        that no worker has taken), as its pending record."""
        found = await self._queued_msg(run_id, fn)
        return None if found is None else found[0]

    async def _queued_msg(self, run_id: str, fn: str | None = None) -> tuple[Run, _Stored] | None:
        """_queued with the message. Without the function, functions of up
        to 8 tokens are looked for (one '*' per token)."""
        if fn is not None:
            subjects = [w.function_subject(self.prefix, fn, run_id)]
        else:
            subjects = [f"{self.prefix}.fn.{'*.' * d}{run_id}" for d in range(1, w.QUEUED_MAX_TOKENS + 1)]
        found = await asyncio.gather(*(self._leader_last(self.fn_stream, s) for s in subjects))
        for m in found:
            if m is None:
                continue
            try:
                return decode_message(self.prefix, m.subject, m.headers, m.data, m.time), m
            except BadMessage:
                return None
        return None

    async def get(self, run_id: str) -> Run:
        """The record of run id (Go's ``Get``). A run published without a
        record that no worker has taken yet is read from its waiting
        message, as pending (revision 0). Raises NotFound, InvalidRunID,
        BadRecord."""
        w.validate_run_id(run_id)
        s = await self._get_record(run_id)
        if s is not None:
            return decode_record(s.data, s.seq)
        q = await self._queued(run_id)
        # A worker may have written the record and taken the message
        # meanwhile: the record again (written before the message goes).
        s = await self._get_record(run_id)
        if s is not None:
            return decode_record(s.data, s.seq)
        if q is not None:
            return q
        raise NotFound(f"run {run_id}: jetflow: not found")

    async def _get_record(self, run_id: str) -> _Stored | None:
        s = await self._direct_get(self.runs_stream, f"$KV.{self.runs_bucket}.{run_id}")
        if s is None or _is_marker(s.headers):
            return None
        return s

    # -------------------------------------------------------------- cancel

    async def cancel(self, run_id: str) -> CancelResult:
        """Cancels run id and, recursively, the runs it scheduled (Go's
        ``CancelRun``). A pending run never starts: its record becomes
        canceled, its delayed entry or waiting message is removed, and
        workers are told (``<prefix>.cancel``). A running run's handler has
        its context canceled. A run that had ended is left as it is:
        ``canceled`` is False. Raises NotFound, InvalidRunID,
        PermissionDenied."""
        return await self._cancel(run_id, 0)

    async def _cancel(self, run_id: str, depth: int) -> CancelResult:
        w.validate_run_id(run_id)
        rec, run, prev, ended = await self._mark_canceled(run_id)
        if ended:
            return CancelResult(False, run)
        if prev == "pending":
            await self._unschedule(run)
        await self._complete(rec, run)
        await self._wire.publish(f"{self.prefix}.cancel", run_id.encode())
        if depth < 64:
            for child in run.children:
                try:
                    await self._cancel(child, depth + 1)
                except NotFound:
                    pass
        return CancelResult(True, run)

    async def _mark_canceled(self, run_id: str) -> tuple[dict[str, Any], Run, str, bool]:
        """Writes run id's record canceled by compare-and-swap; returns the
        record written (its members' JSON), the run, the state it had and
        whether it had ended already. Members are written back as they
        were read (args and result byte for byte, as Go keeps them)."""
        subject = f"$KV.{self.runs_bucket}.{run_id}"
        leader = False
        deadline = self._deadline()
        tried: dict[str, str] = {}  # completedTime written -> the state it replaced
        for _ in range(64):
            if leader:
                s = await self._confirm_last(self.runs_stream, subject)
            else:
                s = await self._direct_get(self.runs_stream, subject)
            if s is not None and _is_marker(s.headers):
                s = None
            if s is None and not leader:
                leader = True  # a replica behind says there is none: ask the leader
                continue
            now = self._now()
            if s is None:
                found = await self._queued_msg(run_id)
                if found is None:
                    if await self._confirm_last(self.runs_stream, subject) is not None:
                        continue  # taken meanwhile: its record is written
                    raise NotFound(f"run {run_id}: jetflow: not found")
                q, m = found
                f = q.to_dict()
                args = m.data or b"null"
                try:
                    json.loads(args)
                except ValueError:
                    args = w.go_json(args.decode("utf-8", "replace")).encode()
                rec: dict[str, Any] = {"id": q.id, "name": q.name, "args": w.RawJSON(args),
                                       "state": "canceled", "scheduledTime": f["scheduledTime"],
                                       "creationTime": f["creationTime"], "completedTime": w.format_time(now),
                                       "attempts": q.attempts}
                for k in ("maxAttempts", "timeout"):
                    if k in f:
                        rec[k] = f[k]
                rec["error"] = _CANCELED_ERROR
                if q.parent:
                    rec["parent"] = q.parent
                tried[rec["completedTime"]] = "pending"
                try:
                    await self._write(rec, q, 0, "", now, deadline)
                except _Conflict:
                    continue
                return rec, decode_record(w.encode_record(rec), 0), "pending", False
            try:
                run = decode_record(s.data, s.seq)
                rec = dict(w.raw_fields(s.data))
            except ValueError as e:
                raise BadRecord(f"jetflow: unreadable run record {run_id} (revision {s.seq}): {e}") from None
            prev = run.state.value
            if run.terminal:
                mine = tried.get(run.to_dict().get("completedTime", ""))
                if run.state.value == "canceled" and run.error == _CANCELED_ERROR and mine is not None:
                    return rec, run, mine, False  # this call's write, whose answer was lost
                return rec, run, prev, True
            rec["state"] = "canceled"
            rec["completedTime"] = w.format_time(now)
            rec["error"] = _CANCELED_ERROR
            tried[rec["completedTime"]] = prev
            try:
                rev = await self._write(rec, run, s.seq, prev, now, deadline)
            except _Conflict:
                leader = True
                continue
            return rec, decode_record(w.encode_record(rec), rev), prev, False
        raise ServerError(f"producer: cancel {run_id}: the run kept changing")

    async def _write(self, rec: dict[str, Any], run: Run, expect: int, from_state: str, completed: int,
                     deadline: float) -> int:
        """Writes a terminal record by compare-and-swap (expect 0: create)."""
        subject = f"$KV.{self.runs_bucket}.{run.id}"
        body = w.encode_record(rec)
        sched = w.parse_time(run.to_dict()["scheduledTime"])
        headers = w.record_headers(state=str(rec["state"]), name=run.name, scheduled=sched, expect=expect,
                                   from_state=from_state, retention=self.retention,
                                   notify=completed if "onComplete" in rec else None)

        async def op(_: bool) -> int:
            try:
                return int(parse_ack(await (await self._wire.send(subject, body, headers)))["seq"])
            except APIError as e:
                if e.wrong_sequence:
                    raise _Conflict(str(e)) from None
                raise

        return int(await ride(op, deadline))

    async def _unschedule(self, run: Run) -> None:
        """Removes the delayed entry and the waiting message of a pending
        run just canceled (without them it would not start either)."""
        due = w.parse_time(run.to_dict()["scheduledTime"])
        key = w.delayed_key(due, run.id)
        try:
            s = await self._direct_get(self.delayed_stream, f"$KV.{self.delayed_bucket}.{key}")
            if s is not None and not _is_marker(s.headers):
                await self._purge(self.delayed_stream, f"$KV.{self.delayed_bucket}.{key}", s.seq + 1)
            await self._purge(self.fn_stream, w.function_subject(self.prefix, run.name, run.id))
        except JetflowError as e:
            err = type(e)(f"producer: run {run.id} is canceled and will not start, but its waiting entry was "
                          f"not removed: {e}")
            err.run_id = run.id
            raise err from e

    async def _purge(self, stream: str, subject: str, seq: int = 0) -> None:
        body: dict[str, Any] = {}
        if seq:
            body["seq"] = seq
        body["filter"] = subject

        async def op(_: bool) -> None:
            await self._wire.api(f"{self.api}.STREAM.PURGE.{stream}", body)

        await ride(op, self._deadline())

    async def _complete(self, rec: Mapping[str, Any], run: Run) -> None:
        """Schedules the on-complete run of a run just ended (Go's
        Dispatcher.Complete); the scheduler's repair sweep does it should
        this fail."""
        oc = run.on_complete
        if not oc or not oc.get("fn"):
            return
        body = w.encode_record({k: v for k, v in rec.items() if k != "onComplete"}).decode()
        args = '{"run":' + body
        raw_oc = w.raw_fields(w.dumps_exact(rec["onComplete"])) if isinstance(rec["onComplete"], w.RawJSON) else {}
        if "args" in raw_oc:
            args += ',"context":' + raw_oc["args"].data.decode()
        args += "}"
        try:
            await self.enqueue(Call(str(oc["fn"]), w.RawJSON(args)), id=w.completion_id(run.id), parent=run.id)
        except AlreadyExists:
            pass
        except JetflowError as e:
            log.warning("jetflow: on-complete of canceled run %s; the repair sweep will: %s", run.id, e)

    # ---------------------------------------------------------------- batch

    async def batch(self, items: Sequence[Item]) -> list[str]:
        """Schedules up to 1,000 runs at once, all or none (Go's ``Batch``):
        their records (or, when every run is due now with a generated id,
        their messages) are written in one atomic JetStream batch. Returns
        the ids in order. Limits are checked before anything is written
        (TooManyRuns, ArgsTooLarge: 8 MB of args in all, each run's within
        the server's max payload less 4096); any item that fails a check
        refuses the whole call, and an item whose id exists raises
        AlreadyExists naming it, nothing written."""
        items = list(items)
        if not items:
            return []
        w.check_batch(len(items))
        plans: list[_Plan] = []
        seen: set[str] = set()
        total = 0
        for i, it in enumerate(items):
            try:
                at = None
                if it.at is not None and it.after is not None:
                    raise BadArgs("jetflow: bad arguments: give at or after, not both")
                if it.at is not None:
                    at = w.to_time_ns(it.at)
                elif it.after is not None:
                    d = w.to_duration_ns(it.after)
                    at = None if d <= 0 else self._now() + d
                p = self._prepare(it.call, at, it.id, it.max_attempts, it.timeout, it.parent)
                if p.run_id in seen:
                    raise AlreadyExists(f"run {p.run_id} twice in one batch: producer: run already exists",
                                        run_id=p.run_id)
                seen.add(p.run_id)
                w.check_args_size(len(p.args), self.max_payload)
            except JetflowError as e:
                err = type(e)(f"item {i}: {e}")
                err.run_id = e.run_id
                raise err from None
            total += len(p.args)
            plans.append(p)
        w.check_batch_args(total)
        ids = [p.run_id for p in plans]
        deadline = self._deadline()
        if all(p.direct for p in plans):
            msgs = [self._batch_direct_message(p) for p in plans]
            await self._atomic(msgs, plans, direct=True, deadline=deadline)
            return ids
        msgs = [(f"$KV.{self.runs_bucket}.{p.run_id}",
                 w.record_headers(state="pending", name=p.name, scheduled=p.sched, expect=0, from_state="",
                                  retention=self.retention),
                 w.encode_record(p.record())) for p in plans]
        last = await self._atomic(msgs, plans, direct=False, deadline=deadline)
        first = last - (len(plans) - 1)
        futs = []
        for i, p in enumerate(plans):
            subject, headers, body = self._dispatch_message(p.envelope(rev=first + i))
            futs.append(await self._wire.send(subject, body, headers, window=True))
        errs = 0
        for f in futs:
            try:
                parse_ack(await f)
            except PermissionDenied:
                raise
            except JetflowError:
                errs += 1
        if errs:
            log.warning("jetflow: batch dispatch incomplete (%d failed); the repair sweep will publish", errs)
        return ids

    def _batch_direct_message(self, p: _Plan) -> tuple[str, dict[str, str], bytes]:
        return w.message(self.prefix, p.envelope(new=True))

    async def _atomic(self, msgs: list[tuple[str, dict[str, str], bytes]], plans: list[_Plan], *, direct: bool,
                      deadline: float) -> int:
        """Publishes msgs as one atomic batch and returns the stream sequence
        of the last. A refused or unanswered batch is confirmed with the
        leaders' reads before it is sent again."""
        batch_id = self._new_id()

        async def landed() -> int | None:
            # All or none: the first run tells.
            p = plans[0]
            if direct:
                return 0 if await self._stored_direct(p) else None
            s = await self._confirm_last(self.runs_stream, f"$KV.{self.runs_bucket}.{p.run_id}")
            if s is None or _is_marker(s.headers) or not self._ours(s, p):
                return None
            return s.seq + len(plans) - 1

        async def op(retried: bool) -> int:
            nonlocal batch_id
            if retried:
                seq = await landed()
                if seq is not None:
                    return seq
                batch_id = self._new_id()
            last = len(msgs) - 1
            fut = None
            for i, (subject, headers, body) in enumerate(msgs):
                h = dict(headers)
                if retried and direct:
                    # Never stored twice, should an earlier try land late.
                    h[w.H_EXPECT_SUBJ_SEQ] = "0"
                h[w.H_BATCH_ID] = batch_id
                h[w.H_BATCH_SEQ] = str(i + 1)
                if i == last:
                    h[w.H_BATCH_COMMIT] = "1"
                    fut = await self._wire.send(subject, body, h)
                else:
                    await self._wire.publish(subject, body, h)
            assert fut is not None
            try:
                ack = parse_ack(await fut)
            except APIError as e:
                if e.wrong_sequence:
                    await self._refused_batch(plans, direct)
                    raise Transient(f"batch refused ({e}) and none of it stored: trying again") from None
                raise BatchFailed(f"producer: batch not written: {e}") from None
            if int(ack.get("count", len(msgs))) != len(msgs):
                raise BatchFailed(f"producer: batch not written: stored {ack.get('count')} of {len(msgs)}")
            return int(ack["seq"])

        try:
            return int(await ride(op, deadline))
        except Timeout as e:
            raise BatchFailed(f"producer: batch not written: {e}") from e

    async def _refused_batch(self, plans: list[_Plan], direct: bool) -> None:
        """A batch refused on an expected sequence: AlreadyExists for a run
        whose record (or message) is stored, BatchFailed for a key that
        holds an expired record's marker; nothing stored returns (the batch
        is tried again)."""
        for p in plans:
            if direct:
                if await self._stored_direct(p):
                    raise AlreadyExists(f"run {p.run_id}: producer: run already exists", run_id=p.run_id)
                continue
            s = await self._confirm_last(self.runs_stream, f"$KV.{self.runs_bucket}.{p.run_id}")
            if s is None:
                continue
            if _is_marker(s.headers):
                raise BatchFailed(f"producer: batch not written: run {p.run_id}: an expired record's marker")
            raise AlreadyExists(f"run {p.run_id}: producer: run already exists", run_id=p.run_id)

    # ------------------------------------------------------- watch and wait

    def watch(self, run_id: str) -> RunWatch:
        """An async iterator of run id's record as it changes: the current
        record first (a run not taken by a worker yet: its waiting message,
        as pending), then every new revision; it ends after a terminal
        state. A run not written yet is awaited. Use ``async with`` or
        ``aclose()`` to stop it early::

            async for run in producer.watch(run_id):
                print(run.state, run.attempts)
        """
        w.validate_run_id(run_id)
        return RunWatch(self, run_id)

    async def wait(self, run_id: str, *, timeout: float | None = None) -> Run:
        """Waits until run id is terminal and returns its record (Go's
        ``Wait``). A run not written yet is awaited: for an id no run has,
        Timeout after timeout seconds (default: no limit)."""
        w.validate_run_id(run_id)
        last: Run | None = None
        try:
            async with asyncio.timeout(timeout):
                async with self.watch(run_id) as runs:
                    async for r in runs:
                        last = r
        except TimeoutError:
            raise Timeout(f"run {run_id}: not ended within {timeout} s (last state: "
                          f"{last.state if last else 'none'})") from None
        if last is None or not last.terminal:
            raise ServerError(f"producer: watch of {run_id} ended before the run did")
        return last

    # ----------------------------------------------------------- workflows

    async def start_workflow(self, name: str, input: Any = None, *, id: str | None = None,
                             at: dt.datetime | str | None = None,
                             after: dt.timedelta | float | str | None = None) -> str:
        """Starts durable workflow ``name`` (defined in Go with
        ``workflow.Define``) with ``input`` and returns its id once it is
        durable (Go's ``workflow.Start``): its record is written pending (the
        idempotency point: an ``id`` started before raises AlreadyExists),
        then its first segment published (or stored for later with ``at``
        or ``after``: a scheduler must run). Raises InvalidName,
        InvalidRunID, BadArgs, ArgsTooLarge, AlreadyExists,
        DefinitionInactive, PermissionDenied."""
        w.validate_name(name)
        raw = w.encode_args(input)
        explicit = id is not None
        if id is None:
            id = self._new_id()
        else:
            w.validate_run_id(id)
        if at is not None and after is not None:
            raise BadArgs("jetflow: bad arguments: give at or after, not both")
        now = self._now()
        when: int | None = None
        if at is not None:
            when = w.to_time_ns(at)
        elif after is not None:
            d = w.to_duration_ns(after)
            if d > 0:
                when = now + d
        if when is not None and not w.time_fits(when):
            raise BadArgs(f"jetflow: bad arguments: time {when}: a run record holds years 0 through 9999")
        sched = now if when is None or when < now else when
        seg_args = w.segment_args(id, raw, sched, now)
        try:
            w.check_workflow_args(len(raw), len(seg_args), self.max_payload)
        except ArgsTooLarge as e:
            raise ArgsTooLarge(f"workflow {name}: {e}") from None
        state = await self._direct_get(self.journal_stream, f"$KV.{self.journal_bucket}.=def.{name}")
        if state is not None and not _is_marker(state.headers) and state.data in (b"deprecated", b"deleted"):
            raise DefinitionInactive(f"workflow: definition not active: {name} is {state.data.decode()}")
        seg_id = w.segment_id(id, 1)
        wf = _Plan(run_id=id, name=name, kind=w.RETRYABLE, args=raw, sched=sched, created=now, max_attempts=0,
                   timeout=0, parent="", direct=False, trace=None)
        deadline = self._deadline()
        await self._create_record(wf, deadline, [seg_id])
        if explicit:
            try:
                s = await self._direct_get(self.journal_stream, f"$KV.{self.journal_bucket}.{id}.s.1")
                if s is not None and not _is_marker(s.headers):
                    await self._purge(self.journal_stream, f"$KV.{self.journal_bucket}.{id}.>")
            except JetflowError as e:
                raise type(e)(f"workflow {id} is recorded but its first segment was not published (the repair "
                              f"sweep will): {e}", run_id=id) from e
        seg = _Plan(run_id=seg_id, name=name + ".segment", kind=w.RETRYABLE, args=seg_args, sched=sched,
                    created=now, max_attempts=0, timeout=0, parent=id, direct=True, trace=None)
        try:
            if seg.name.count(".") < w.QUEUED_MAX_TOKENS and sched > self._now():
                env = seg.envelope(new=True)
                subject = f"$KV.{self.delayed_bucket}.{w.delayed_key(sched, seg_id)}"
                body = env.to_json(due=sched).encode()

                async def op(_: bool) -> None:
                    parse_ack(await (await self._wire.send(subject, body, {})))

                await ride(op, deadline)
            elif seg.name.count(".") < w.QUEUED_MAX_TOKENS:
                subject, headers, body = self._direct_message(seg)
                await self._publish_direct(seg, subject, headers, body, deadline)
            else:
                rev = await self._create_record(seg, deadline)
                await self._dispatch(seg.envelope(rev=rev), deadline)
        except PermissionDenied as e:
            raise PermissionDenied(f"workflow {id} is recorded but its first segment was not published (the "
                                   f"repair sweep will): {e}", subject=e.subject, run_id=id) from e
        except JetflowError as e:
            raise type(e)(f"workflow {id} is recorded but its first segment was not published (the repair sweep "
                          f"will): {e}", run_id=id) from e
        return id

    async def send_event(self, workflow_id: str, name: str, payload: Any = None) -> None:
        """Sends event ``name`` with ``payload`` (JSON) to durable workflow
        ``workflow_id`` (Go's ``SendEvent``): the event is stored in the
        workflow's journal until an await consumes it, and a run of the
        workflow's wake function resumes the workflow if it waits. Raises
        InvalidEventName, NotFound, NotAWorkflow, Ended, BadArgs,
        ArgsTooLarge, PermissionDenied."""
        w.validate_event_name(name)
        raw = w.encode_args(payload)
        try:
            w.check_event_size(len(raw), self.max_payload)
        except ArgsTooLarge as e:
            raise ArgsTooLarge(f"event {name}: {e}") from None
        r = await self.get(workflow_id)
        if w.segment_id(workflow_id, 1) not in r.children:
            raise NotAWorkflow(f"run {workflow_id} ({r.name}): workflow: not a workflow")
        if r.terminal:
            raise Ended(f"workflow {workflow_id} is {r.state}: workflow: workflow has ended")
        key = f"{workflow_id}.ev.{name}.{self._new_id()}"
        wake = self._prepare(Call(r.name + ".wake", w.RawJSON('{"run":null,"context":{"wf":' +
                                                              w.go_string(workflow_id) + '}}')),
                             None, None, None, None, None)
        subject = f"$KV.{self.journal_bucket}.{key}"
        body = ('{"name":' + w.go_string(name) + ',"payload":' + raw.decode() + ',"sent":"' +
                w.format_time(self._now()) + '"}').encode()
        await self._create(self.journal_stream, subject, body, {w.H_EXPECT_SUBJ_SEQ: "0"},
                           lambda s: s.data == body, workflow_id, self._deadline())
        try:
            await self._schedule(wake)
        except JetflowError as e:
            raise type(e)(f"workflow {workflow_id}: event {name} stored, resume failed: {e}",
                          run_id=workflow_id) from e


class _Conflict(Exception):
    pass


w_ERR_NOT_FOUND = 10037
_NUID = NUID()


class RunWatch:
    """The async iterator of ``Producer.watch``: a consumer on the runs
    bucket's stream, filtered to one key, delivering its last record and
    then every write (what a KV watch does, made with the consumer name in
    the subject as docs/permissions.md's producer role allows)."""

    HEARTBEAT = 5.0

    def __init__(self, p: Producer, run_id: str) -> None:
        self._p = p
        self._id = run_id
        self._q: asyncio.Queue[Msg | None] = asyncio.Queue()
        self._sub: Any = None
        self._consumer = ""
        self._last_sseq = 0
        self._last_cseq = 0
        self._started = False
        self._sent = False
        self._done = False

    def __aiter__(self) -> RunWatch:
        return self

    async def __aenter__(self) -> RunWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stops the watch (deletes its consumer)."""
        self._done = True
        await self._stop_consumer()
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass
            self._sub = None

    async def _stop_consumer(self) -> None:
        if self._consumer:
            name, self._consumer = self._consumer, ""
            try:
                await self._p._wire.api(f"{self._p.api}.CONSUMER.DELETE.{self._p.runs_stream}.{name}")
            except Exception:
                pass  # it expires on its own (inactive threshold)

    async def _on_msg(self, msg: Msg) -> None:
        self._q.put_nowait(msg)

    async def _consume(self) -> int:
        """Makes the consumer, from the last record or after the last seen;
        returns the records pending at its start."""
        p = self._p
        if self._sub is None:
            self._inbox = p.nc.new_inbox()
            self._sub = await p.nc.subscribe(self._inbox, cb=self._on_msg)
            await p._wire.check_subscription(self._inbox)
        await self._stop_consumer()
        name = "jfw" + _NUID.next().decode()
        filt = f"$KV.{p.runs_bucket}.{self._id}"
        cfg: dict[str, Any] = {
            "name": name, "deliver_subject": self._inbox, "ack_policy": "none", "filter_subject": filt,
            "replay_policy": "instant", "idle_heartbeat": int(self.HEARTBEAT * 1e9),
            "inactive_threshold": int(120e9), "mem_storage": True, "num_replicas": 1, "max_deliver": -1,
        }
        if self._last_sseq:
            cfg["deliver_policy"] = "by_start_sequence"
            cfg["opt_start_seq"] = self._last_sseq + 1
        else:
            cfg["deliver_policy"] = "last_per_subject"
        self._last_cseq = 0

        async def op(_: bool) -> dict[str, Any]:
            return await p._wire.api(f"{p.api}.CONSUMER.CREATE.{p.runs_stream}.{name}.{filt}",
                                     {"stream_name": p.runs_stream, "config": cfg, "action": "create"})

        info = await ride(op, p._deadline())
        self._consumer = name
        return int(info.get("num_pending", 0) or 0)

    async def __anext__(self) -> Run:
        if self._done:
            raise StopAsyncIteration
        try:
            return await self._next()
        except BaseException:
            await self.aclose()
            raise

    async def _next(self) -> Run:
        if not self._started:
            self._started = True
            pending = await self._consume()
            if pending == 0 and not self._sent:
                q = await self._p._queued(self._id)
                if q is not None:
                    self._sent = True
                    return q
        while True:
            try:
                msg = await asyncio.wait_for(self._q.get(), timeout=self.HEARTBEAT * 2.5)
            except TimeoutError:
                await self._consume()  # heartbeats stopped: the consumer is gone
                continue
            assert msg is not None
            h = msg.headers or {}
            if not msg.data and h.get("Status"):
                if msg.reply:  # flow control
                    await self._p._wire.publish(msg.reply, b"")
                continue
            meta = msg.reply.split(".") if msg.reply else []
            if len(meta) >= 9 and meta[0] == "$JS" and meta[1] == "ACK":
                # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
                off = len(meta) - 9
                sseq, cseq = int(meta[5 + off]), int(meta[6 + off])
                if cseq != self._last_cseq + 1:
                    await self._consume()  # a gap: start again after the last seen
                    continue
                self._last_cseq, self._last_sseq = cseq, sseq
            else:
                sseq = 0
            if _is_marker(h) or not msg.data:
                continue
            r = decode_record(msg.data, sseq)
            self._sent = True
            if r.terminal:
                self._done = True
                await self.aclose()
            return r

