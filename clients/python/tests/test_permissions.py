"""docs/permissions.md's roles on a real nats-server started with that
file's configuration: the producer role is enough for every call of this
client, and a user without it gets the server's permission error at once,
not a timeout."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import nats
import pytest

import jetflow
from conftest import REPO, Peer, Server, provision
from jetflow import Item, Producer, State

PASSWORDS = {r: f"{r}-pass-0123" for r in ("admin", "producer", "worker", "scheduler", "dashboard", "cli", "nobody",
                                            "deaf")}


def permissions_conf() -> str:
    """The configuration block of docs/permissions.md, with one more user
    who may publish nothing jetflow uses."""
    doc = (REPO / "docs" / "permissions.md").read_text()
    m = re.search(r"<!-- permissions.conf[^>]*-->\s*```[a-z]*\n(.*?)```\s*<!-- end permissions.conf -->", doc, re.S)
    assert m, "docs/permissions.md has no permissions.conf block"
    conf = m.group(1)
    i = conf.rstrip().rfind("]")
    nobody = ('    { user: nobody, password: $NOBODY_PASSWORD, permissions: {\n'
              '      publish: { allow: ["nothing.here"] }, subscribe: { allow: ["_INBOX.>"] } } }\n'
              '    { user: deaf, password: $DEAF_PASSWORD, permissions: {\n'
              '      publish: { allow: [">"] }, subscribe: { allow: ["nothing.here"] } } }\n  ')
    return conf[:i] + nobody + conf[i:]


@pytest.fixture(scope="module")
def secured() -> Iterator[Server]:
    env = {f"{r.upper()}_PASSWORD": pw for r, pw in PASSWORDS.items()}
    s = Server(conf=permissions_conf(), max_payload=1 << 20, env=env)
    peer = None
    try:
        provision(s.url, "--user", "admin", "--password", PASSWORDS["admin"])
        peer = Peer(s.url, "-user", "admin", "-password", PASSWORDS["admin"], "-provision=false")
        yield s
    finally:
        if peer is not None:
            peer.stop()
        s.stop()


class Errors:
    def __init__(self) -> None:
        self.seen: list[str] = []

        async def cb(e: Exception) -> None:
            self.seen.append(str(e))

        self.cb = cb


async def connect(s: Server, role: str, errors: Errors | None = None) -> Any:
    return await nats.connect(s.url, user=role, password=PASSWORDS[role], error_cb=(errors or Errors()).cb,
                              max_reconnect_attempts=0)


async def test_producer_role_is_enough(secured: Server) -> None:
    errs = Errors()
    nc = await connect(secured, "producer", errs)
    p = await Producer.create(nc)
    try:
        echo = jetflow.define("demo.echo")
        run = await p.wait(await p.enqueue(echo({"role": "producer"})), timeout=30)
        assert run.state is State.SUCCESS and run.result == {"role": "producer"}
        rid = await p.enqueue(echo(2), id=f"perm-{time.time_ns()}", max_attempts=2, timeout=5)
        with pytest.raises(jetflow.AlreadyExists):
            await p.enqueue(echo(2), id=rid)
        assert (await p.wait(rid, timeout=30)).result == 2
        later = await p.run_after(1, echo("later"))
        states = [r.state async for r in p.watch(later)]
        assert states[0] is State.PENDING and states[-1] is State.SUCCESS
        ids = await p.batch([Item(echo(i)) for i in range(5)])
        ids += await p.batch([Item(echo("a"), id=f"perm-b-{time.time_ns()}"), Item(echo("b"), after=0.5)])
        for r in await asyncio.gather(*(p.wait(i, timeout=30) for i in ids)):
            assert r.state is State.SUCCESS
        pending = await p.run_after(60, echo("never"))
        res = await p.cancel(pending)
        assert res.canceled and (await p.get(pending)).state is State.CANCELED
        queued = await p.enqueue(jetflow.raw_call("nobody.serves.this", 1))
        assert (await p.get(queued)).state is State.PENDING
        assert (await p.cancel(queued)).canceled
        wf = await p.start_workflow("demo.flow", {"x": 1})
        await p.wait(jetflow._wire.segment_id(wf, 1), timeout=30)
        await p.send_event(wf, "approve", "yes")
        assert (await p.wait(wf, timeout=30)).result == "yes"
        wf2 = await p.start_workflow("demo.flow", None, id=f"perm-wf-{time.time_ns()}", after=0.5)
        await p.send_event(wf2, "approve", 2)
        assert (await p.wait(wf2, timeout=30)).result == 2
        assert not [e for e in errs.seen if "permissions violation" in e.lower()], errs.seen
    finally:
        await p.close()
        await nc.close()


async def test_without_the_role_the_error_comes_at_once(secured: Server) -> None:
    # The read-only CLI user may look runs up, not schedule or cancel them.
    nc = await connect(secured, "cli")
    p = await Producer.create(nc)
    try:
        echo = jetflow.define("demo.echo")
        for call in (lambda: p.enqueue(echo(1)), lambda: p.enqueue(echo(1), id="perm-denied"),
                     lambda: p.run_after(5, echo(1)), lambda: p.batch([Item(echo(1)), Item(echo(2))]),
                     lambda: p.start_workflow("demo.flow", 1)):
            t0 = time.monotonic()
            with pytest.raises(jetflow.PermissionDenied) as ei:
                await call()
            took = time.monotonic() - t0
            assert took < 1.0, f"permission error after {took:.2f} s"
            assert ei.value.subject, ei.value
            assert isinstance(ei.value, jetflow.JetflowError)
        with pytest.raises(jetflow.NotFound):
            await p.get("perm-denied")  # reads are allowed: nothing was stored
    finally:
        await p.close()
        await nc.close()
    # A user who may not even look the streams up fails at create.
    nc = await connect(secured, "nobody")
    try:
        t0 = time.monotonic()
        with pytest.raises(jetflow.PermissionDenied):
            await Producer.create(nc)
        assert time.monotonic() - t0 < 1.0
    finally:
        await nc.close()

    # A user who may not subscribe to its inbox gets no answers at all.
    nc = await connect(secured, "deaf")
    try:
        t0 = time.monotonic()
        with pytest.raises(jetflow.PermissionDenied) as ei:
            await Producer.create(nc)
        assert time.monotonic() - t0 < 1.0 and ei.value.subject.startswith("_inbox."), ei.value
    finally:
        await nc.close()
