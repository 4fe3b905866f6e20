"""Typed references to functions (jetflow.Function, jetflow.Call)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from . import _wire as w
from ._errors import InvalidName

A = TypeVar("A")

RETRYABLE = w.RETRYABLE
AT_MOST_ONCE = w.AT_MOST_ONCE


@dataclass(frozen=True)
class Call:
    """One invocation of a function with its arguments (jetflow.Call):
    what ``enqueue``, ``run_after``, ``run_at`` and ``batch`` schedule."""

    name: str
    args: Any = None
    kind: str = RETRYABLE


class Function(Generic[A]):
    """A typed reference to a function a Go worker serves
    (``jetflow.Define[Args]("emails.send")``). Calling it with the arguments
    makes a Call; a type checker pairs the argument type with ``A``::

        @dataclass
        class EmailArgs:
            to: str

        send_email = jetflow.define("emails.send", EmailArgs)
        run_id = await producer.enqueue(send_email(EmailArgs(to="a@b.c")))

    Arguments are encoded as JSON: dataclasses by field name, TypedDicts and
    dicts as they are, ``jetflow.RawJSON`` as given.
    """

    __slots__ = ("name", "kind", "args_type")

    def __init__(self, name: str, args_type: type[A] | None = None, *, kind: str = RETRYABLE) -> None:
        w.validate_name(name)
        if kind not in (RETRYABLE, AT_MOST_ONCE):
            raise InvalidName(f"jetflow: invalid function name: unknown kind {kind!r}")
        self.name = name
        self.kind = kind
        self.args_type = args_type

    def __call__(self, args: A) -> Call:
        """The call of this function with args (Go's ``fn.With(args)``)."""
        return Call(self.name, args, self.kind)

    def with_args(self, args: A) -> Call:
        """Same as calling the function: Go's ``fn.With(args)``."""
        return Call(self.name, args, self.kind)

    def __repr__(self) -> str:
        t = getattr(self.args_type, "__name__", None)
        return f"Function({self.name!r}{', ' + t if t else ''}, kind={self.kind!r})"


def define(name: str, args_type: type[A] | None = None, *, kind: str = RETRYABLE) -> Function[A]:
    """A typed function reference; raises InvalidName for a name
    ``jetflow.ValidateName`` refuses. kind is ``"retryable"`` (default) or
    ``"atMostOnce"``, as the Go definition's."""
    return Function(name, args_type, kind=kind)


def raw_call(name: str, args: Any = None) -> Call:
    """A call by name with any JSON arguments (Go's ``jetflow.RawCall``)."""
    return Call(name, args, RETRYABLE)
