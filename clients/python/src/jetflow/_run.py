"""Run records: what Get, Wait and Watch return (jetflow.Run)."""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _wire as w
from ._errors import BadRecord


class State(enum.StrEnum):
    """The state of a run. The last three are terminal."""

    PENDING = "pending"
    IN_PROGRESS = "inProgress"
    SUCCESS = "success"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        """True for success, failed and canceled: nothing changes it after."""
        return self.value in w.TERMINAL


@dataclass(frozen=True)
class Attempt:
    """One ended attempt of a run (Run.history)."""

    attempt: int
    outcome: str
    worker: str = ""
    started_time: dt.datetime | None = None
    completed_time: dt.datetime | None = None
    error: str = ""


@dataclass(frozen=True)
class Progress:
    """The last progress a handler reported."""

    percent: float = 0.0
    processed: int = 0
    total: int = 0
    message: str = ""
    updated: dt.datetime | None = None


@dataclass(frozen=True)
class Run:
    """The status record of one run (docs/wire-format.md, "The status
    record"). Times are UTC datetimes (microseconds; ``to_dict`` keeps the
    record's nanoseconds); ``args`` and ``result`` are decoded JSON."""

    id: str
    name: str
    state: State
    scheduled_time: dt.datetime | None
    creation_time: dt.datetime | None
    attempts: int = 0
    kind: str = ""
    args: Any = None
    started_time: dt.datetime | None = None
    owner: str = ""
    heartbeat: dt.datetime | None = None
    completed_time: dt.datetime | None = None
    max_attempts: int = 0
    timeout: dt.timedelta | None = None
    error: str = ""
    permanent: bool = False
    parent: str = ""
    held_by: str = ""
    children: tuple[str, ...] = ()
    progress: Progress | None = None
    result: Any = None
    on_complete: Mapping[str, Any] | None = None
    pool: str = ""
    priority: int = 0
    trace: Mapping[str, str] | None = None
    history: tuple[Attempt, ...] = ()
    revision: int = 0
    # The record under its JSON names, as Go decodes it (times normalised
    # to UTC with their nanoseconds; fields left out when Go omits them).
    _fields: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        """The run has ended: success, failed or canceled."""
        return self.state.terminal

    def to_dict(self) -> dict[str, Any]:
        """The record under its JSON names, with ``revision``: times as RFC
        3339 strings with nanoseconds, ``timeout`` in nanoseconds."""
        d = dict(self._fields)
        d["revision"] = self.revision
        return d


_TIME_FIELDS = ("scheduledTime", "creationTime", "startedTime", "heartbeat", "completedTime")
_GO_ZERO_TIME = "0001-01-01T00:00:00Z"


def _bad(rev: int, why: str) -> BadRecord:
    return BadRecord(f"jetflow: unreadable run record (revision {rev}): {why}")


def _norm_time(v: Any, rev: int, name: str) -> str | None:
    """A record's time, normalised as Go re-encodes it; None when zero."""
    if v is None:
        return None
    if not isinstance(v, str):
        raise _bad(rev, f"{name}: not a time")
    try:
        ns = w.parse_time(v)
    except ValueError as e:
        raise _bad(rev, f"{name}: {e}") from None
    s = w.format_time(ns)
    return None if s == _GO_ZERO_TIME else s


def _int(v: Any, rev: int, name: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise _bad(rev, f"{name}: not an integer")
    s = str.__str__(v) if isinstance(v, str) else str(v)
    try:
        n = int(s)
    except ValueError:
        raise _bad(rev, f"{name}: {s} is not an integer") from None
    if not -(1 << 63) <= n < (1 << 63):
        raise _bad(rev, f"{name}: {s} overflows")
    return n


def _str(v: Any, rev: int, name: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str) or isinstance(v, w._Number):
        raise _bad(rev, f"{name}: not a string")
    return v


def _dtime(s: str | None) -> dt.datetime | None:
    return None if s is None else w.ns_to_datetime(w.parse_time(s))


def decode_record(data: bytes, revision: int = 0) -> Run:
    """Reads a record body (kv.Decode). Raises BadRecord for a body that is
    not a record jetflow wrote: not JSON, a time that does not parse, a
    field of the wrong type, or a state it does not know."""
    try:
        raw = w.loads_exact(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(revision, str(e)) from None
    if not isinstance(raw, dict):
        raise _bad(revision, "not a JSON object")
    return _from_fields(raw, revision)


def _from_fields(raw: Mapping[str, Any], rev: int) -> Run:
    f: dict[str, Any] = {}
    for k in ("id", "name", "kind"):
        s = _str(raw.get(k), rev, k)
        if s or k != "kind":
            f[k] = s
    if "args" in raw:
        f["args"] = w.plain(raw["args"])
    state = _str(raw.get("state"), rev, "state")
    if state not in w.STATES:
        raise _bad(rev, f"state {state[:64]!r}")
    f["state"] = state
    for k in _TIME_FIELDS:
        t = _norm_time(raw.get(k), rev, k)
        if t is not None or k in ("scheduledTime", "creationTime"):
            f[k] = t if t is not None else _GO_ZERO_TIME
    for k in ("owner",):
        s = _str(raw.get(k), rev, k)
        if s:
            f[k] = s
    f["attempts"] = _int(raw.get("attempts"), rev, "attempts")
    for k in ("maxAttempts", "timeout"):
        n = _int(raw.get(k), rev, k)
        if n:
            f[k] = n
    for k in ("error",):
        s = _str(raw.get(k), rev, k)
        if s:
            f[k] = s
    perm = raw.get("permanent")
    if perm is not None and not isinstance(perm, bool):
        raise _bad(rev, "permanent: not a boolean")
    if perm:
        f["permanent"] = True
    for k in ("parent", "heldBy"):
        s = _str(raw.get(k), rev, k)
        if s:
            f[k] = s
    kids = raw.get("children")
    if kids is not None:
        if not isinstance(kids, list):
            raise _bad(rev, "children: not an array")
        kids = [_str(c, rev, "children") for c in kids]
        if kids:
            f["children"] = kids
    prog = raw.get("progress")
    if prog is not None:
        if not isinstance(prog, dict):
            raise _bad(rev, "progress: not an object")
        p: dict[str, Any] = {}
        pct = prog.get("percent")
        if pct is not None:
            try:
                pv = float(str.__str__(pct)) if isinstance(pct, w._Number) else None
            except ValueError:
                pv = None
            if pv is None:
                raise _bad(rev, "progress.percent: not a number")
            if pv:
                p["percent"] = w.plain(pct)
        for k in ("processed", "total"):
            n = _int(prog.get(k), rev, "progress." + k)
            if n:
                p[k] = n
        m = _str(prog.get("message"), rev, "progress.message")
        if m:
            p["message"] = m
        u = _norm_time(prog.get("updated"), rev, "progress.updated")
        if u is not None:
            p["updated"] = u
        f["progress"] = p
    if "result" in raw:  # a null result is kept, as Go's json.RawMessage keeps it
        f["result"] = w.plain(raw["result"])
    oc = raw.get("onComplete")
    if oc is not None:
        if not isinstance(oc, dict):
            raise _bad(rev, "onComplete: not an object")
        f["onComplete"] = w.plain(oc)
    s = _str(raw.get("pool"), rev, "pool")
    if s:
        f["pool"] = s
    n = _int(raw.get("priority"), rev, "priority")
    if n:
        f["priority"] = n
    tr = raw.get("trace")
    if tr is not None:
        if not isinstance(tr, dict) or not all(isinstance(v, str) for v in tr.values()):
            raise _bad(rev, "trace: not an object of strings")
        if tr:
            f["trace"] = dict(tr)
    hist = raw.get("history")
    if hist is not None:
        if not isinstance(hist, list):
            raise _bad(rev, "history: not an array")
        hs = []
        for a in hist:
            if a is None:
                a = {}
            if not isinstance(a, dict):
                raise _bad(rev, "history: not an object")
            h: dict[str, Any] = {"attempt": _int(a.get("attempt"), rev, "history.attempt")}
            s = _str(a.get("worker"), rev, "history.worker")
            if s:
                h["worker"] = s
            for k in ("startedTime", "completedTime"):
                t = _norm_time(a.get(k), rev, "history." + k)
                if t is not None:
                    h[k] = t
            h["outcome"] = _str(a.get("outcome"), rev, "history.outcome")
            s = _str(a.get("error"), rev, "history.error")
            if s:
                h["error"] = s
            hs.append(h)
        if hs:
            f["history"] = hs
    return _make(f, rev)


def _make(f: Mapping[str, Any], rev: int) -> Run:
    prog = f.get("progress")
    return Run(
        id=f.get("id", ""),
        name=f.get("name", ""),
        state=State(f["state"]),
        scheduled_time=_dtime(f.get("scheduledTime")),
        creation_time=_dtime(f.get("creationTime")),
        attempts=f.get("attempts", 0),
        kind=f.get("kind", ""),
        args=f.get("args"),
        started_time=_dtime(f.get("startedTime")),
        owner=f.get("owner", ""),
        heartbeat=_dtime(f.get("heartbeat")),
        completed_time=_dtime(f.get("completedTime")),
        max_attempts=f.get("maxAttempts", 0),
        timeout=dt.timedelta(microseconds=f["timeout"] // 1000) if f.get("timeout") else None,
        error=f.get("error", ""),
        permanent=f.get("permanent", False),
        parent=f.get("parent", ""),
        held_by=f.get("heldBy", ""),
        children=tuple(f.get("children", ())),
        progress=None if prog is None else Progress(
            percent=float(prog.get("percent", 0)), processed=prog.get("processed", 0),
            total=prog.get("total", 0), message=prog.get("message", ""), updated=_dtime(prog.get("updated"))),
        result=f.get("result"),
        on_complete=f.get("onComplete"),
        pool=f.get("pool", ""),
        priority=f.get("priority", 0),
        trace=f.get("trace"),
        history=tuple(Attempt(attempt=a["attempt"], outcome=a.get("outcome", ""), worker=a.get("worker", ""),
                              started_time=_dtime(a.get("startedTime")), completed_time=_dtime(a.get("completedTime")),
                              error=a.get("error", "")) for a in f.get("history", ())),
        revision=rev,
        _fields=f,
    )


class BadMessage(ValueError):
    """A message on a function subject that is no run (a bad header)."""


def decode_message(prefix: str, subject: str, headers: Mapping[str, str] | None, body: bytes | None,
                   stream_time_ns: int) -> Run:
    """A run waiting in the function stream, read as its pending record
    (kv.Store.QueuedRun): function and id from the subject, args from the
    body, the rest from the headers. Raises BadMessage for a message that
    is no run."""
    pfx = prefix + ".fn."
    if not subject.startswith(pfx):
        raise BadMessage(f"subject {subject!r} is not {prefix}.fn.<function>.<id>")
    rest = subject[len(pfx):]
    i = rest.rfind(".")
    if i <= 0 or i == len(rest) - 1:
        raise BadMessage(f"subject {subject!r} is not {prefix}.fn.<function>.<id>")
    fn, run_id = rest[:i], rest[i + 1:]
    h = _canon(headers or {})

    def get(name: str) -> str:
        return h.get(name.lower(), "")

    attempt, max_attempts, timeout = 1, 0, 0
    parent = ""
    if v := get(w.H_REV):
        if not v.isdigit() or not v.isascii() or int(v) >= 1 << 64:
            raise BadMessage(f"bad header {w.H_REV}: {v!r}")
    if v := get(w.H_ATTEMPT):
        attempt = _pos_int(v, w.H_ATTEMPT)
    if v := get(w.H_MAX_ATTEMPTS):
        max_attempts = _pos_int(v, w.H_MAX_ATTEMPTS)
    if v := get(w.H_TIMEOUT):
        try:
            timeout = w.parse_duration(v)
        except ValueError:
            raise BadMessage(f"bad header {w.H_TIMEOUT}: {v!r}") from None
        if timeout <= 0:
            raise BadMessage(f"bad header {w.H_TIMEOUT}: {v!r}")
    if v := get(w.H_PARENT):
        if not w.valid_run_id(v):
            raise BadMessage(f"bad header {w.H_PARENT}: {v!r}")
        parent = v
    sched = _hdr_time(get(w.H_SCHEDULED), w.H_SCHEDULED)
    created = _hdr_time(get(w.H_CREATED), w.H_CREATED)
    if created is None:
        created = stream_time_ns
    if sched is None:
        sched = created
    args = body if body else b"null"
    f: dict[str, Any] = {"id": run_id, "name": fn}
    try:
        f["args"] = json.loads(args)
    except (ValueError, UnicodeDecodeError):
        f["args"] = args.decode("utf-8", "replace")
    f["state"] = "pending"
    f["scheduledTime"] = w.format_time(sched)
    f["creationTime"] = w.format_time(created)
    f["attempts"] = attempt - 1
    if max_attempts:
        f["maxAttempts"] = max_attempts
    if timeout:
        f["timeout"] = timeout
    if parent:
        f["parent"] = parent
    return _make(f, 0)


def _canon(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers by lower-cased name; the first value of a repeated one."""
    out: dict[str, str] = {}
    for k, v in headers.items():
        if isinstance(v, (list, tuple)):
            v = v[0] if v else ""
        out.setdefault(k.lower(), v)
    return out


def _pos_int(v: str, name: str) -> int:
    try:
        n = int(v, 10)
    except ValueError:
        raise BadMessage(f"bad header {name}: {v!r}") from None
    if n < 1 or not v.lstrip("+-").isdigit() or n >= 1 << 63:
        raise BadMessage(f"bad header {name}: {v!r}")
    return n


def _hdr_time(v: str, name: str) -> int | None:
    if not v:
        return None
    try:
        ns = w.parse_time(v)
    except ValueError:
        raise BadMessage(f"bad header {name}: {v!r}") from None
    if not w.time_fits(ns):
        raise BadMessage(f"bad header {name}: {v!r}")
    return ns
