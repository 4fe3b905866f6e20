"""Requests over one NATS connection, with the server's permission errors
reported at once.

NATS drops a publish its user may not make and says so on the connection
only (``-ERR 'Permissions Violation for Publish to "<subject>"'``); a
request would wait for its timeout. The Wire here sends every request with
a reply subject of its own inbox and fails the requests waiting on a
subject the server refused with PermissionDenied as soon as the error
arrives (docs/permissions.md: "A request the server denies fails at once").
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError

from ._errors import JetflowError, PermissionDenied, ServerError, Timeout

T = TypeVar("T")

_PERM_RE = re.compile(r'permissions violation for (publish|subscription) to "([^"]*)"', re.IGNORECASE)

# JetStream API error codes.
ERR_WRONG_LAST_SEQ = 10071
ERR_WRONG_LAST_SEQ_CONST = 10164
ERR_NOT_AVAILABLE = 10008
ERR_MSG_NOT_FOUND = 10037
ERR_STREAM_NOT_FOUND = 10059


class Transient(JetflowError):
    """An error after which the same request may succeed (no responders, a
    timeout, an election): a call tries again within its deadline."""

    kind = "transient"


class NoResponders(Transient):
    pass


class APIError(ServerError):
    """A JetStream API error answer."""

    @property
    def wrong_sequence(self) -> bool:
        return self.err_code in (ERR_WRONG_LAST_SEQ, ERR_WRONG_LAST_SEQ_CONST)


def api_error(err: dict[str, Any]) -> APIError:
    return APIError(f"nats: API error: code={err.get('code', 0)} err_code={err.get('err_code', 0)} "
                    f"description={err.get('description', '')}",
                    code=int(err.get("code", 0) or 0), err_code=int(err.get("err_code", 0) or 0))


def transient_api(e: APIError) -> bool:
    return e.err_code == ERR_NOT_AVAILABLE or "temporarily unavailable" in str(e)


class _Hook:
    """The connection's error callback, chained: every Wire on the
    connection hears the permission errors, then the user's callback runs."""

    def __init__(self, nc: NATS) -> None:
        self.listeners: list[Callable[[str, str], None]] = []
        self.orig = nc._error_cb

        async def cb(e: Exception) -> None:
            m = _PERM_RE.search(str(e))
            if m is not None:
                for f in list(self.listeners):
                    f(m.group(1).lower(), m.group(2).lower())
            await self.orig(e)

        nc._error_cb = cb


def _hook(nc: NATS) -> _Hook:
    h = getattr(nc, "_jetflow_hook", None)
    if h is None:
        h = _Hook(nc)
        nc._jetflow_hook = h  # type: ignore[attr-defined]
    return h


class _Pending:
    __slots__ = ("fut", "subject", "sent", "release")

    def __init__(self, fut: asyncio.Future[Msg], subject: str, sent: float, release: bool) -> None:
        self.fut, self.subject, self.sent, self.release = fut, subject, sent, release


class Wire:
    """Requests with replies on an inbox of its own."""

    # Pipelined publishes waiting for their acknowledgement at most (the
    # Go producer's window); a caller that finds them all taken waits.
    WINDOW = 4096

    def __init__(self, nc: NATS, attempt_timeout: float = 2.0) -> None:
        self.nc = nc
        self.attempt_timeout = attempt_timeout
        self._pending: dict[str, _Pending] = {}
        self._next = 0
        self._prefix = ""
        self._sub: Any = None
        self._sweeper: asyncio.Task[None] | None = None
        self._window = asyncio.Semaphore(self.WINDOW)
        self._closed = False
        self._hook = _hook(nc)
        self._listener = self._on_permission
        # nats-py's internals the fast publish uses (_hpub); without them,
        # its public publish.
        self._fast = all(hasattr(nc, a) for a in ("_send_command", "_flush_pending", "_flush_queue", "stats",
                                                   "_max_payload"))
        # Subscriptions the server refused (lower-cased subjects): replies
        # on them never come, so what needs them fails at once.
        self.denied_subs: dict[str, PermissionDenied] = {}

    async def start(self) -> None:
        self._prefix = self.nc.new_inbox()
        self._plen = len(self._prefix) + 1
        self._hook.listeners.append(self._listener)
        self._sub = await self.nc.subscribe(self._prefix + ".*", cb=self._on_reply)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        await self.check_subscription(self._prefix + ".*")

    async def check_subscription(self, subject: str) -> None:
        """Raises PermissionDenied if the server refused the subscription to
        subject (its error comes before the answer to a flush)."""
        try:
            await self.nc.flush(timeout=max(1, int(self.attempt_timeout * 2)))
        except Exception:
            return  # no answer yet: a refusal would still be heard later
        err = self.denied_subs.get(subject.lower())
        if err is not None:
            raise err

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener in self._hook.listeners:
            self._hook.listeners.remove(self._listener)
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._sub is not None and not self.nc.is_closed:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass
        for p in self._pending.values():
            if not p.fut.done():
                p.fut.set_exception(JetflowError("jetflow: producer closed"))
        self._pending.clear()

    # ------------------------------------------------------------ replies

    async def _on_reply(self, msg: Msg) -> None:
        p = self._pending.pop(msg.subject[self._plen:], None)
        if p is None:
            return
        if p.release:
            self._window.release()
        if not p.fut.done():
            p.fut.set_result(msg)

    def _on_permission(self, op: str, subject: str) -> None:
        # A refused subscription to our inbox fails everything waiting; a
        # refused publish fails the requests sent on that subject.
        if op == "subscription":
            self.denied_subs[subject] = PermissionDenied(
                f"nats: permissions violation: Permissions Violation for Subscription to {subject!r}", subject=subject)
        every = op == "subscription" and subject.startswith(self._prefix.lower())
        for tok, p in list(self._pending.items()):
            if every or p.subject == subject:
                self._pending.pop(tok, None)
                if p.release:
                    self._window.release()
                if not p.fut.done():
                    p.fut.set_exception(PermissionDenied(
                        f"nats: permissions violation: Permissions Violation for {op.capitalize()} to {subject!r}",
                        subject=subject))

    async def _sweep(self) -> None:
        """Fails the requests unanswered for attempt_timeout (one timer for
        all of them, not one per request)."""
        try:
            while True:
                await asyncio.sleep(0.1)
                cutoff = time.monotonic() - self.attempt_timeout
                late = [t for t, p in self._pending.items() if p.sent < cutoff]
                for t in late:
                    p = self._pending.pop(t, None)
                    if p is None:
                        continue
                    if p.release:
                        self._window.release()
                    if not p.fut.done():
                        p.fut.set_exception(Transient(f"nats: timeout: no answer on {p.subject}"))
        except asyncio.CancelledError:
            pass

    # ------------------------------------------------------------ sending

    async def send(self, subject: str, payload: bytes, headers: dict[str, str] | None = None,
                   window: bool = False) -> asyncio.Future[Msg]:
        """Publishes with a reply subject and returns the future of the
        reply. window: count it in the pipelined window (waits when full)."""
        if self._closed:
            raise JetflowError("jetflow: producer closed")
        if self.denied_subs:
            err = self.denied_subs.get(self._prefix.lower() + ".*")
            if err is not None:
                raise err
        if window:
            await self._window.acquire()
        self._next += 1
        tok = str(self._next)
        fut: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._pending[tok] = _Pending(fut, subject.lower(), time.monotonic(), window)
        try:
            nc = self.nc
            if headers and self._fast and nc.is_connected and not nc.is_draining_pubs:
                await self._hpub(subject, self._prefix + "." + tok, headers, payload)
            else:
                await nc.publish(subject, payload, reply=self._prefix + "." + tok, headers=headers or None)
        except Exception as e:
            if self._pending.pop(tok, None) is not None and window:
                self._window.release()
            raise _conn_error(e) from e
        return fut

    async def _hpub(self, subject: str, reply: str, headers: dict[str, str], payload: bytes) -> None:
        """nats-py's publish with headers, without its per-header checks
        (the headers here are jetflow's own: names and values without line
        breaks), which cost a publish about a third of its time."""
        nc = self.nc
        if len(payload) > nc._max_payload:
            raise MaxPayloadError
        hdr = ("NATS/1.0\r\n" + "".join([f"{k}: {v}\r\n" for k, v in headers.items()]) + "\r\n").encode()
        n = len(hdr)
        cmd = b"".join((b"HPUB ", subject.encode(), b" ", reply.encode(), b" %d %d\r\n" % (n, n + len(payload)),
                        hdr, payload, b"\r\n"))
        nc.stats["out_msgs"] += 1
        nc.stats["out_bytes"] += len(payload)
        await nc._send_command(cmd)
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()

    async def request(self, subject: str, payload: bytes = b"", headers: dict[str, str] | None = None) -> Msg:
        """A request: its reply, PermissionDenied at once, NoResponders, or
        Transient after attempt_timeout."""
        fut = await self.send(subject, payload, headers)
        msg = await fut
        if _status(msg) == "503":
            raise NoResponders(f"nats: no responders available for request on {subject}")
        return msg

    async def api(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A JetStream API request: the answer, or its APIError."""
        msg = await self.request(subject, json.dumps(body, separators=(",", ":")).encode() if body is not None else b"")
        resp = json.loads(msg.data) if msg.data else {}
        if isinstance(resp, dict) and resp.get("error"):
            e = api_error(resp["error"])
            if transient_api(e):
                raise Transient(str(e))
            raise e
        return resp

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> None:
        """A core NATS publish (no reply)."""
        try:
            await self.nc.publish(subject, payload, headers=headers or None)
        except Exception as e:
            raise _conn_error(e) from e


def _status(msg: Msg) -> str:
    if msg.headers and not msg.data:
        return msg.headers.get("Status", "")
    return ""


def _conn_error(e: Exception) -> Exception:
    """A connection error as ours: transient while it reconnects."""
    import nats.errors as ne

    if isinstance(e, JetflowError):
        return e
    if isinstance(e, ne.MaxPayloadError):
        from ._errors import ArgsTooLarge

        return ArgsTooLarge(f"producer: arguments too large: {e}")
    if isinstance(e, (ne.ConnectionReconnectingError, ne.OutboundBufferLimitError, ne.TimeoutError)):
        return Transient(str(e) or type(e).__name__)
    return JetflowError(f"nats: {e!r}")


def parse_ack(msg: Msg) -> dict[str, Any]:
    """A JetStream publish acknowledgement, or its error raised."""
    if _status(msg) == "503":
        raise NoResponders("nats: no response from stream")
    try:
        resp = json.loads(msg.data)
    except ValueError:
        raise ServerError(f"nats: bad acknowledgement {msg.data[:200]!r}") from None
    if resp.get("error"):
        e = api_error(resp["error"])
        if transient_api(e):
            raise Transient(str(e))
        raise e
    out: dict[str, Any] = resp
    return out


async def ride(op: Callable[[bool], Awaitable[T]], deadline: float, retried: bool = False) -> T:
    """Runs op until it succeeds, fails for good, or the deadline (a
    loop.time()) passes, trying again after Transient errors; op is told
    whether an earlier try may have landed (producer.ride)."""
    loop = asyncio.get_running_loop()
    delay = 0.025
    while True:
        try:
            return await op(retried)
        except Transient as e:
            left = deadline - loop.time()
            if left <= 0:
                raise Timeout(f"{e} (gave up retrying: deadline exceeded)") from e
            await asyncio.sleep(min(delay, left))
            delay = min(2 * delay, 0.5)
            retried = True
