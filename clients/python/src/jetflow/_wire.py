"""The wire format of docs/wire-format.md: names, ids, times, durations, JSON
as Go writes it, run messages, run records and delayed entries.

Everything here is pure (no I/O), so that the shared test vectors
(streams/testdata/vectors) can check it byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._errors import (
    ArgsTooLarge,
    BadArgs,
    InvalidEventName,
    InvalidName,
    InvalidRunID,
    TooManyRuns,
)

# Limits of the Go producer (producer.MaxBatch, producer.MaxBatchArgs) and
# what a run record takes beside its args (kv.ArgsLimit, producer.checkSize).
MAX_BATCH = 1000
MAX_BATCH_ARGS = 8 << 20
RECORD_ROOM = 4096
# What an await's journal entry takes beside an event's payload (wfwire).
EVENT_ROOM = 1024
# Runs published without a record are found by their id for functions of
# fewer tokens than this (kv.QueuedMaxTokens).
QUEUED_MAX_TOKENS = 8

STATES = ("pending", "inProgress", "success", "failed", "canceled")
TERMINAL = frozenset(("success", "failed", "canceled"))
RETRYABLE = "retryable"
AT_MOST_ONCE = "atMostOnce"

# Headers (streams.Header*, kv.Header*).
H_MSG_ID = "Nats-Msg-Id"
H_EXPECT_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
H_TTL = "Nats-TTL"
H_REV = "Jetflow-Rev"
H_ATTEMPT = "Jetflow-Attempt"
H_MAX_ATTEMPTS = "Jetflow-Max-Attempts"
H_TIMEOUT = "Jetflow-Timeout"
H_PARENT = "Jetflow-Parent"
H_SCHEDULED = "Jetflow-Scheduled"
H_CREATED = "Jetflow-Created"
H_RELOAD = "Jetflow-Reload"
H_NEW = "Jetflow-New"
H_STATE = "Jetflow-State"
H_FUNCTION = "Jetflow-Function"
H_DUE = "Jetflow-Due"
H_NOTIFY = "Jetflow-Notify"
H_FROM = "Jetflow-From"
H_PREV = "Jetflow-Prev"
H_BATCH_ID = "Nats-Batch-Id"
H_BATCH_SEQ = "Nats-Batch-Sequence"
H_BATCH_COMMIT = "Nats-Batch-Commit"

# ---------------------------------------------------------------- names, ids

_TOKEN = re.compile(r"[A-Za-z0-9_-]+\Z")


def _valid_token(tok: str) -> bool:
    return bool(tok) and tok.isascii() and _TOKEN.match(tok) is not None


_VALID_NAMES: set[str] = set()


def validate_name(name: str) -> None:
    """Raises InvalidName unless name is what jetflow.ValidateName accepts:
    1-128 bytes of dot-separated tokens of ASCII letters, digits, '_', '-'."""
    if name in _VALID_NAMES:
        return
    _check_name(name)
    if len(_VALID_NAMES) < 4096:
        _VALID_NAMES.add(name)


def _check_name(name: str) -> None:
    if not isinstance(name, str):
        raise InvalidName(f"jetflow: invalid function name: {name!r} is not a string")
    if name == "" or len(name.encode()) > 128:
        raise InvalidName(f"jetflow: invalid function name: {name!r} must be 1-128 bytes")
    for tok in name.split("."):
        if not _valid_token(tok):
            raise InvalidName(
                f"jetflow: invalid function name: {name!r}: tokens are letters, digits, '_' and '-' "
                "separated by single dots"
            )


def valid_run_id(run_id: object) -> bool:
    return isinstance(run_id, str) and len(run_id) <= 200 and _valid_token(run_id)


def validate_run_id(run_id: str) -> None:
    """Raises InvalidRunID unless run_id is what jetflow.ValidateRunID
    accepts: 1-200 bytes of ASCII letters, digits, '_' and '-'."""
    if not valid_run_id(run_id):
        raise InvalidRunID(f"jetflow: invalid run id: {run_id!r}: ids are 1-200 letters, digits, '_' or '-'")


def validate_event_name(name: str) -> None:
    """Raises InvalidEventName unless name is 1-64 letters, digits, '_', '-'."""
    if not valid_run_id(name) or len(name) > 64:
        raise InvalidEventName(f"workflow: invalid event name: {name!r}: 1-64 letters, digits, '_' or '-'")


def derived_id(run_id: str) -> str:
    """jetflow.DerivedID: run_id when valid, else a stable 41-byte hash."""
    if valid_run_id(run_id):
        return run_id
    return "h" + hashlib.sha256(run_id.encode()).hexdigest()[:40]


def completion_id(run_id: str) -> str:
    """jetflow.CompletionID: the id of run_id's on-complete run."""
    if len(run_id) + 5 <= 200:
        return run_id + "-done"
    return "h" + hashlib.sha256(run_id.encode()).hexdigest()[:40] + "-done"


def segment_id(workflow_id: str, n: int) -> str:
    """The run id of segment n of a workflow (wfwire.SegmentID)."""
    return derived_id(f"{workflow_id}-seg{n}")


class IDs:
    """Run ids: 22 characters of [0-9A-Za-z], unique without coordination
    (a random prefix and a sequence from a random start, as nuid makes them;
    cheaper than nats-py's NUID)."""

    _ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        import secrets

        self._prefix = "".join(secrets.choice(self._ALPHABET) for _ in range(10))
        self._seq = secrets.randbelow(16**12 // 2)
        self._inc = 33 + secrets.randbelow(333)

    def __call__(self) -> str:
        self._seq += self._inc
        if self._seq >= 16**12:
            self._reset()
        return f"{self._prefix}{self._seq:012x}"


# -------------------------------------------------------------------- times
# Times are integers: nanoseconds since the Unix epoch, UTC. They cover the
# years 0 through 9999, which Python's datetime does not (it starts at 1).

NS = 1_000_000_000


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return y + (m <= 2), m, d


_FIRST_NS: int = _days_from_civil(0, 1, 1) * 86400 * NS
_LAST_NS: int = (_days_from_civil(9999, 12, 31) * 86400 + 86399) * NS + NS - 1


def time_fits(ns: int) -> bool:
    """streams.TimeFits: a record holds years 0 through 9999 (UTC)."""
    return _FIRST_NS <= ns <= _LAST_NS


_last_sec = -1 << 80
_last_text = ""


def format_time(ns: int) -> str:
    """Go's time.RFC3339Nano of a UTC time: trailing zeros of the fraction
    removed, and the dot with them when nothing is left."""
    global _last_sec, _last_text
    secs, frac = divmod(ns, NS)
    if _last_sec == secs:
        out = _last_text
    else:
        days, sod = divmod(secs, 86400)
        y, m, d = _civil_from_days(days)
        hh, rem = divmod(sod, 3600)
        mm, ss = divmod(rem, 60)
        out = f"{y:04d}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}"
        _last_sec, _last_text = secs, out
    if frac:
        out += "." + f"{frac:09d}".rstrip("0")
    return out + "Z"


_TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))\Z"
)


def parse_time(s: str) -> int:
    """Parses RFC 3339 (fraction of 1-9 digits allowed) into nanoseconds.
    Raises ValueError for anything else, as Go's time.Parse would."""
    mt = _TIME_RE.match(s) if isinstance(s, str) else None
    if mt is None:
        raise ValueError(f"not an RFC 3339 time: {s!r}")
    y, mo, d, hh, mi, ss = (int(mt.group(i)) for i in range(1, 7))
    if not (1 <= mo <= 12) or hh > 23 or mi > 59 or ss > 59:
        raise ValueError(f"time out of range: {s!r}")
    mdays = [31, 29 if (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    if not (1 <= d <= mdays[mo - 1]):
        raise ValueError(f"day out of range: {s!r}")
    frac = mt.group(7) or ""
    ns = (_days_from_civil(y, mo, d) * 86400 + hh * 3600 + mi * 60 + ss) * NS
    if frac:
        ns += int(frac.ljust(9, "0"))
    if mt.group(8) is None:
        oh, om = int(mt.group(10)), int(mt.group(11))
        if oh > 23 or om > 59:
            raise ValueError(f"offset out of range: {s!r}")
        off = (oh * 3600 + om * 60) * NS
        ns = ns - off if mt.group(9) == "+" else ns + off
    return ns


# ---------------------------------------------------------------- durations

_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # µs, micro sign
    "\u03bcs": 1_000,  # μs, Greek mu
    "ms": 1_000_000,
    "s": NS,
    "m": 60 * NS,
    "h": 3600 * NS,
}
_MAX_DURATION = (1 << 63) - 1


def _frac(v: int, prec: int) -> tuple[str, int]:
    """Go's fmtFrac: the fraction of v/10^prec without trailing zeros (no dot
    when it is zero), and v/10^prec."""
    if prec == 0:
        return "", v
    q, r = divmod(v, 10**prec)
    digits = f"{r:0{prec}d}".rstrip("0")
    return ("." + digits if digits else ""), q


def format_duration(ns: int) -> str:
    """Go's time.Duration.String: 30s, 1.5s, 500ms, 1m30s, 2h0m0s."""
    if ns == 0:
        return "0s"
    neg, u = ns < 0, abs(ns)
    if u < NS:
        if u < 1_000:
            prec, unit = 0, "ns"
        elif u < 1_000_000:
            prec, unit = 3, "\u00b5s"
        else:
            prec, unit = 6, "ms"
        fr, q = _frac(u, prec)
        out = f"{q}{fr}{unit}"
    else:
        fr, secs = _frac(u, 9)
        out = f"{secs % 60}{fr}s"
        mins = secs // 60
        if mins > 0:
            out = f"{mins % 60}m" + out
            hours = mins // 60
            if hours > 0:
                out = f"{hours}h" + out
    return "-" + out if neg else out


_DUR_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([a-zA-Z\u00b5\u03bc]+)")


def parse_duration(s: str) -> int:
    """Go's time.ParseDuration into nanoseconds; ValueError otherwise."""
    if not isinstance(s, str) or s == "":
        raise ValueError(f"invalid duration {s!r}")
    orig, neg = s, False
    if s[0] in "+-":
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if s == "":
        raise ValueError(f"invalid duration {orig!r}")
    total = 0
    pos = 0
    while pos < len(s):
        mt = _DUR_PART.match(s, pos)
        if mt is None or mt.end() == pos:
            raise ValueError(f"invalid duration {orig!r}")
        whole, frac, unit = mt.group(1), mt.group(2), mt.group(3)
        if whole == "" and not frac:
            raise ValueError(f"invalid duration {orig!r}")
        if unit not in _UNITS:
            raise ValueError(f"unknown unit {unit!r} in duration {orig!r}")
        scale = _UNITS[unit]
        v = int(whole or "0") * scale
        if frac:
            v += int(frac) * scale // 10 ** len(frac)
        total += v
        if total > _MAX_DURATION + (1 if neg else 0):
            raise ValueError(f"invalid duration {orig!r}")
        pos = mt.end()
    return -total if neg else total


# --------------------------------------------------------------------- JSON


def _go_escape(c: str) -> str:
    o = ord(c)
    if c == '"':
        return '\\"'
    if c == "\\":
        return "\\\\"
    if c == "\n":
        return "\\n"
    if c == "\r":
        return "\\r"
    if c == "\t":
        return "\\t"
    if c == "\b":
        return "\\b"
    if c == "\f":
        return "\\f"
    if 0xD800 <= o <= 0xDFFF:  # a lone surrogate is invalid UTF-8 in Go
        return "\\ufffd"
    return f"\\u{o:04x}"


_GO_ESCAPED = re.compile('["\\\\\x00-\x1f<>&\u2028\u2029\ud800-\udfff]')


def go_string(s: str) -> str:
    """A string as Go's encoding/json writes it: UTF-8 kept, control
    characters, '<', '>', '&', U+2028 and U+2029 escaped."""
    return '"' + _GO_ESCAPED.sub(lambda m: _go_escape(m.group(0)), s) + '"'


class RawJSON:
    """JSON already encoded, passed through as is (Go's json.RawMessage)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | str) -> None:
        self.data = data.encode() if isinstance(data, str) else bytes(data)

    def __repr__(self) -> str:
        return f"RawJSON({self.data!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawJSON) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)


class _Number(str):
    """A JSON number kept as its text (records are written back unchanged)."""


def _to_jsonable(v: Any) -> Any:
    """Dataclasses, enums, datetimes and the like as plain JSON values."""
    import dataclasses
    import datetime
    import enum

    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _to_jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, enum.Enum):
        return _to_jsonable(v.value)
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.astimezone()
        return format_time(datetime_to_ns(v))
    if isinstance(v, datetime.timedelta):
        return timedelta_to_ns(v)
    if hasattr(v, "model_dump") and callable(v.model_dump):  # pydantic v2
        return _to_jsonable(v.model_dump(mode="json"))
    if isinstance(v, Mapping):
        return {str(k): _to_jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_to_jsonable(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return [_to_jsonable(x) for x in v]
    return v


def go_json(v: Any) -> str:
    """v as compact JSON (JSON.stringify's text: no whitespace, UTF-8 kept,
    nothing escaped that need not be), with numbers as Go writes them (1
    for 1.0, 0.00001 for 1e-05). Raises BadArgs for what is not JSON (NaN,
    infinities, unknown types)."""
    if isinstance(v, RawJSON):
        return v.data.decode()
    fast = v is None or isinstance(v, (str, int, float, bool, dict, list))
    try:
        if fast:
            try:
                out = json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            except TypeError:
                out = json.dumps(_to_jsonable(v), separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                                 default=_default)
        else:
            out = json.dumps(_to_jsonable(v), separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                             default=_default)
    except (TypeError, ValueError, RecursionError) as e:
        raise BadArgs(f"jetflow: bad arguments: {e}") from None
    if _MAYBE_FLOAT.search(out):
        out = _TOKENS.sub(_go_number, out)
    return out


# A float as Python writes it (1.0, 1e-05, 1e+16) where Go writes another
# text (1, 0.00001, 10000000000000000): the same number, Go's bytes.
_MAYBE_FLOAT = re.compile(r"[0-9][.eE]")
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)')


def _go_number(m: re.Match[str]) -> str:
    tok = m.group(1)
    if tok is None or ("." not in tok and "e" not in tok and "E" not in tok):
        return m.group(0)
    return go_float(float(tok))


def go_float(f: float) -> str:
    """A float64 as Go's encoding/json writes it."""
    import decimal
    import math

    if f != f or f in (math.inf, -math.inf):
        raise ValueError(f"json: unsupported value: {f}")
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    a = abs(f)
    r = repr(f)
    if 1e-6 <= a < 1e21:
        s = format(decimal.Decimal(r), "f")
        if "." in s:
            s = s.rstrip("0").rstrip(".")
        return s
    mant, _, exp = r.partition("e")
    if not exp:  # repr chose a fixed form: rewrite it as an exponent
        d = decimal.Decimal(r).normalize()
        sign, digits, e = d.as_tuple()
        ds = "".join(map(str, digits))
        ex = e + len(ds) - 1  # type: ignore[operator]
        mant = ("-" if sign else "") + ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        exp = f"{'-' if ex < 0 else '+'}{abs(ex):02d}"
    if exp[0] not in "+-":
        exp = "+" + exp
    if exp[0] == "-" and len(exp) == 3 and exp[1] == "0":
        exp = "-" + exp[2]
    return f"{mant}e{exp}"




def _default(o: Any) -> Any:
    if isinstance(o, RawJSON):
        raise TypeError("RawJSON nested in a value: give the whole value as RawJSON")
    if isinstance(o, _Number):
        return float(o)
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def encode_args(args: Any) -> bytes:
    """The JSON body of a run's arguments (Call.Encode): RawJSON as is (it
    must be valid JSON; empty is null), anything else encoded."""
    if isinstance(args, RawJSON):
        if not args.data:
            return b"null"
        try:
            json.loads(args.data)
        except ValueError:
            raise BadArgs("jetflow: bad arguments: invalid JSON") from None
        return args.data
    if isinstance(args, (bytes, bytearray, memoryview)):
        return encode_args(RawJSON(bytes(args)))
    try:
        return go_json(args).encode()
    except UnicodeEncodeError as e:
        raise BadArgs(f"jetflow: bad arguments: {e}") from None


# ------------------------------------------------------ ordered JSON values
# Records are read with their numbers kept as text and written back with
# the keys in Go's order, so that a cancel changes nothing else.


def raw_fields(data: bytes | str) -> dict[str, RawJSON]:
    """The members of a JSON object, each value as its exact text (Go's
    json.RawMessage of it). ValueError for anything but an object."""
    text = data.decode() if isinstance(data, (bytes, bytearray)) else data
    dec = json.JSONDecoder()
    ws = " \t\n\r"
    i, n = 0, len(text)
    while i < n and text[i] in ws:
        i += 1
    if i >= n or text[i] != "{":
        raise ValueError("not a JSON object")
    i += 1
    out: dict[str, RawJSON] = {}
    while True:
        while i < n and text[i] in ws:
            i += 1
        if i < n and text[i] == "}" and not out:
            i += 1
            break
        key, i = dec.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError("object key is not a string")
        while i < n and text[i] in ws:
            i += 1
        if i >= n or text[i] != ":":
            raise ValueError("expected ':'")
        i += 1
        while i < n and text[i] in ws:
            i += 1
        _, end = dec.raw_decode(text, i)
        out[key] = RawJSON(text[i:end])
        i = end
        while i < n and text[i] in ws:
            i += 1
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == "}":
            i += 1
            break
        raise ValueError("expected ',' or '}'")
    if text[i:].strip(ws):
        raise ValueError("data after the object")
    return out


def loads_exact(data: bytes | str) -> Any:
    return json.loads(data, parse_float=_Number, parse_int=_Number, parse_constant=_bad_constant)


def _bad_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


def dumps_exact(v: Any) -> str:
    if isinstance(v, RawJSON):
        return v.data.decode()
    if isinstance(v, _Number):
        return str.__str__(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return go_string(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_json(v)
    if isinstance(v, Mapping):
        return "{" + ",".join(go_string(str(k)) + ":" + dumps_exact(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dumps_exact(x) for x in v) + "]"
    return go_json(v)


def plain(v: Any) -> Any:
    """A value read with loads_exact, as ordinary Python JSON values."""
    if isinstance(v, _Number):
        s = str.__str__(v)
        try:
            return int(s)
        except ValueError:
            return float(s)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


# -------------------------------------------------------------- datetimes

import datetime as _dt  # noqa: E402

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def datetime_to_ns(t: _dt.datetime) -> int:
    if t.tzinfo is None:
        t = t.astimezone()  # a naive datetime is local time, as in Python
    d = t - _EPOCH
    return (d.days * 86400 + d.seconds) * NS + d.microseconds * 1000


def ns_to_datetime(ns: int) -> _dt.datetime | None:
    try:
        return _EPOCH + _dt.timedelta(microseconds=ns // 1000)
    except OverflowError:
        return None


def timedelta_to_ns(d: _dt.timedelta) -> int:
    return (d.days * 86400 + d.seconds) * NS + d.microseconds * 1000


def to_duration_ns(v: Any) -> int:
    """A run option's duration: timedelta, seconds (int or float) or a Go
    duration string, in nanoseconds."""
    if isinstance(v, _dt.timedelta):
        return timedelta_to_ns(v)
    if isinstance(v, bool):
        raise BadArgs(f"jetflow: bad arguments: duration {v!r}")
    if isinstance(v, int):
        return v * NS
    if isinstance(v, float):
        return round(v * NS)
    if isinstance(v, str):
        try:
            return parse_duration(v)
        except ValueError as e:
            raise BadArgs(f"jetflow: bad arguments: {e}") from None
    raise BadArgs(f"jetflow: bad arguments: duration {v!r}: give a timedelta, seconds or a Go duration")


def to_time_ns(v: Any) -> int:
    """A point in time: datetime, or an RFC 3339 string, in nanoseconds."""
    if isinstance(v, _dt.datetime):
        return datetime_to_ns(v)
    if isinstance(v, str):
        try:
            return parse_time(v)
        except ValueError as e:
            raise BadArgs(f"jetflow: bad arguments: {e}") from None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return round(v * NS)  # Unix seconds
    raise BadArgs(f"jetflow: bad arguments: time {v!r}: give a datetime or an RFC 3339 string")


# ------------------------------------------------------------ envelopes


class Envelope:
    """One run as it travels to a worker (streams.Envelope): the message on
    <prefix>.fn.<function>.<id> carries the args as its body and the rest as
    headers; its JSON is a delayed entry."""

    __slots__ = ("fn", "id", "rev", "attempt", "max_attempts", "timeout", "parent",
                 "scheduled", "created", "trace", "args", "reload", "new")

    def __init__(self, fn: str, id: str, *, rev: int = 0, attempt: int = 0, max_attempts: int = 0,
                 timeout: int = 0, parent: str = "", scheduled: int | None = None,
                 created: int | None = None, trace: Mapping[str, str] | None = None,
                 args: bytes | None = None, reload: bool = False, new: bool = False) -> None:
        self.fn, self.id, self.rev, self.attempt = fn, id, rev, attempt
        self.max_attempts, self.timeout, self.parent = max_attempts, timeout, parent
        self.scheduled, self.created, self.trace = scheduled, created, trace
        self.args, self.reload, self.new = args, reload, new

    def msg_id(self) -> str:
        return self.id if self.attempt <= 1 else f"{self.id}/{self.attempt}"

    def to_json(self, due: int | None = None) -> str:
        """The JSON of the envelope (and of a delayed entry with due)."""
        parts = ['"fn":' + go_string(self.fn), '"id":' + go_string(self.id)]
        if self.rev:
            parts.append(f'"rev":{self.rev}')
        if self.attempt:
            parts.append(f'"attempt":{self.attempt}')
        if self.max_attempts:
            parts.append(f'"maxAttempts":{self.max_attempts}')
        if self.timeout:
            parts.append(f'"timeout":{self.timeout}')
        if self.parent:
            parts.append('"parent":' + go_string(self.parent))
        if self.scheduled is not None:
            parts.append('"scheduled":"' + format_time(self.scheduled) + '"')
        if self.created is not None:
            parts.append('"created":"' + format_time(self.created) + '"')
        if self.trace:
            parts.append('"trace":' + dumps_exact(dict(sorted(self.trace.items()))))
        if self.args:
            parts.append('"args":' + self.args.decode())
        if self.reload:
            parts.append('"reload":true')
        if self.new:
            parts.append('"new":true')
        if due is not None:
            parts.append('"due":"' + format_time(due) + '"')
        return "{" + ",".join(parts) + "}"


def function_subject(prefix: str, fn: str, run_id: str) -> str:
    return f"{prefix}.fn.{fn}.{run_id}"


def message(prefix: str, e: Envelope) -> tuple[str, dict[str, str], bytes]:
    """streams.Config.Message: the subject, headers and body of the message
    that starts run e."""
    h: dict[str, str] = {}
    if not e.new:
        h[H_MSG_ID] = e.msg_id()
    if e.rev:
        h[H_REV] = str(e.rev)
    if e.attempt > 1:
        h[H_ATTEMPT] = str(e.attempt)
    if e.max_attempts > 0:
        h[H_MAX_ATTEMPTS] = str(e.max_attempts)
    if e.timeout > 0:
        h[H_TIMEOUT] = format_duration(e.timeout)
    if e.parent:
        h[H_PARENT] = e.parent
    if e.scheduled is not None and e.scheduled != e.created:
        h[H_SCHEDULED] = format_time(e.scheduled)
    if e.created is not None:
        h[H_CREATED] = format_time(e.created)
    if e.trace:
        for k, v in e.trace.items():
            h[k[:1].upper() + k[1:].lower()] = v  # Go's Header.Set canonicalises
    if e.reload:
        h[H_RELOAD] = "1"
    if e.new:
        h[H_NEW] = "1"
    return function_subject(prefix, e.fn, e.id), h, e.args or b""


# --------------------------------------------------------------- records

# The keys of a record in the order Go writes them (kv.EncodeRun).
RECORD_KEYS = ("id", "name", "kind", "args", "state", "scheduledTime", "creationTime", "startedTime",
               "owner", "heartbeat", "completedTime", "attempts", "maxAttempts", "timeout", "error",
               "permanent", "parent", "heldBy", "children", "progress", "result", "onComplete", "pool",
               "priority", "trace", "history")


def new_record(*, run_id: str, name: str, kind: str, args: bytes, scheduled: int, created: int,
               max_attempts: int = 0, timeout: int = 0, parent: str = "",
               children: Iterable[str] = (), trace: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pending record as the producer writes it (as a dict in Go's key
    order, values ready for encode_record)."""
    r: dict[str, Any] = {"id": run_id, "name": name}
    if kind:
        r["kind"] = kind
    if args:
        r["args"] = RawJSON(args)
    r["state"] = "pending"
    r["scheduledTime"] = format_time(scheduled)
    r["creationTime"] = format_time(created)
    r["attempts"] = 0
    if max_attempts:
        r["maxAttempts"] = max_attempts
    if timeout:
        r["timeout"] = timeout
    if parent:
        r["parent"] = parent
    kids = list(children)
    if kids:
        r["children"] = kids
    if trace:
        r["trace"] = dict(sorted(trace.items()))
    return r


def encode_record(r: Mapping[str, Any]) -> bytes:
    """A record's JSON, keys in Go's order (unknown keys after them)."""
    keys = [k for k in RECORD_KEYS if k in r] + [k for k in r if k not in RECORD_KEYS]
    return ("{" + ",".join(go_string(k) + ":" + dumps_exact(r[k]) for k in keys) + "}").encode()


def record_headers(*, state: str, name: str, scheduled: int, expect: int, from_state: str, retention: str,
                   notify: int | None = None) -> dict[str, str]:
    """kv.Store.RecordMsg's headers of a record write expecting revision
    expect (0: create) over a record in state from_state ("" for none).
    scheduled is the record's scheduledTime; notify the completedTime of a
    terminal record with an on-complete callback."""
    h = {H_EXPECT_SUBJ_SEQ: str(expect)}
    if state in TERMINAL:
        h[H_TTL] = retention
    h[H_STATE] = state
    h[H_FUNCTION] = name
    h[H_DUE] = str(scheduled // 1_000_000)
    if from_state:
        h[H_FROM] = from_state
    if expect:
        h[H_PREV] = str(expect)
    if state in TERMINAL and notify is not None:
        h[H_NOTIFY] = str(notify // 1_000_000)
    return h


def delayed_key(due: int, run_id: str) -> str:
    return f"{due // NS}.{run_id}"


# ----------------------------------------------------------------- limits


def check_args_size(n: int, max_payload: int) -> None:
    """producer.checkSize: one run's args must leave a record room for its
    other fields within the server's max payload."""
    if max_payload > 0 and n + RECORD_ROOM > max_payload:
        raise ArgsTooLarge(f"producer: arguments too large: {n} bytes of args, server max payload {max_payload}")


def args_limit(max_payload: int) -> int:
    """kv.ArgsLimit: the most bytes of args a run record holds."""
    if max_payload > 8192:
        return max_payload - RECORD_ROOM
    return 1 << 20


def event_limit(max_payload: int) -> int | None:
    """wfwire.EventLimit: the most bytes of an event's payload."""
    if max_payload <= 0:
        return None
    return args_limit(max_payload) - EVENT_ROOM


def check_batch(count: int) -> None:
    if count > MAX_BATCH:
        raise TooManyRuns(f"producer: too many runs in one call: {count} > {MAX_BATCH}")


def check_batch_args(total: int) -> None:
    if total > MAX_BATCH_ARGS:
        raise ArgsTooLarge(f"producer: arguments too large: {total} bytes in one call, limit {MAX_BATCH_ARGS}")


def check_event_size(n: int, max_payload: int) -> None:
    """An event's payload must fit the journal entry of the await that
    consumes it (wfwire.EventLimit)."""
    limit = event_limit(max_payload)
    if limit is not None and n > limit:
        raise ArgsTooLarge(f"producer: arguments too large: {n} bytes of payload, more than an await's "
                           f"journal entry holds ({limit})")


def segment_args(workflow_id: str, input_json: bytes, scheduled: int, created: int) -> bytes:
    """The args of a workflow's first segment (wfwire.SegArgs): what the
    worker needs to start it, the input among them."""
    return ('{"wf":' + go_string(workflow_id) + ',"n":1,"input":' + input_json.decode() + ',"scheduled":"' +
            format_time(scheduled) + '","created":"' + format_time(created) + '"}').encode()


def check_workflow_args(input_len: int, seg_args_len: int, max_payload: int) -> None:
    """A workflow's input must fit its first segment's args within a run's
    args limit."""
    if max_payload > 0 and seg_args_len > args_limit(max_payload):
        raise ArgsTooLarge(f"producer: arguments too large (jetflow: bad arguments): {input_len} bytes of input, "
                           f"{seg_args_len} with its first segment's args, more than a run holds "
                           f"({args_limit(max_payload)})")
