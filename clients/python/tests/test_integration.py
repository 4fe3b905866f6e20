"""The producer against a real nats-server and a Go worker and scheduler
(the peer, integration/internal/clientpeer): every call ends in real runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypedDict

import nats
import pytest

import jetflow
from conftest import Server
from jetflow import Item, Producer, State


@dataclass
class SleepArgs:
    ms: int


class FailArgs(TypedDict, total=False):
    message: str
    permanent: bool
    times: int


echo = jetflow.define("demo.echo")
sleep = jetflow.define("demo.sleep", SleepArgs)
fail = jetflow.define("demo.fail", FailArgs)


def uid(p: str = "py") -> str:
    return f"{p}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
async def producer(peer_server: Server) -> AsyncIterator[Producer]:
    nc = await nats.connect(peer_server.url)
    p = await Producer.create(nc)
    yield p
    await p.close()
    await nc.close()


async def test_enqueue_runs_and_returns_the_handlers_result(producer: Producer) -> None:
    args = {"hello": "world", "n": [1, 2.5, None], "nested": {"ok": True}}
    rid = await producer.enqueue(echo(args))
    assert jetflow.validate_run_id(rid) is None
    run = await producer.wait(rid, timeout=30)
    assert run.state is State.SUCCESS
    assert run.result == args
    assert run.args == args
    assert run.attempts == 1
    assert run.name == "demo.echo"
    got = await producer.get(rid)
    assert got.state is State.SUCCESS and got.revision == run.revision


async def test_enqueue_async_pipelines(producer: Producer) -> None:
    pend = [await producer.enqueue_async(echo({"i": i})) for i in range(200)]
    ids = await asyncio.gather(*pend)
    assert ids == [p.id for p in pend]
    runs = await asyncio.gather(*(producer.wait(i, timeout=30) for i in ids[:20]))
    assert [r.result for r in runs] == [{"i": i} for i in range(20)]


async def test_unicode_args(producer: Producer) -> None:
    args = {"to": "zoë@例え.jp", "subject": "Grüße 👋 <hi> & \"bye\" \u2028 \\ / \t", "rtl": "שלום",
            "n": -1.25e-07, "big": 12345678901234567}
    rid = await producer.enqueue(echo(args), id=uid("unicode"))
    run = await producer.wait(rid, timeout=30)
    assert run.state is State.SUCCESS
    assert run.result == args


async def test_run_after_fires(producer: Producer) -> None:
    t0 = time.time()
    rid = await producer.run_after(dt.timedelta(seconds=1), echo("later"))
    run = await producer.wait(rid, timeout=30)
    assert run.state is State.SUCCESS and run.result == "later"
    assert run.started_time is not None and run.scheduled_time is not None
    assert run.started_time >= run.scheduled_time
    late = (run.started_time - run.scheduled_time).total_seconds()
    assert run.scheduled_time.timestamp() - t0 >= 0.99
    # The Go producer's delayed runs start within the scheduler's tick of
    # their second (docs/scaling.md): a second and a half covers it.
    assert late < 1.5, f"started {late:.3f} s late"


async def test_run_at(producer: Producer) -> None:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1.5)
    rid = await producer.run_at(when, sleep(SleepArgs(ms=1)), id=uid("at"), max_attempts=2, timeout="5s")
    pending = await producer.get(rid)
    assert pending.state is State.PENDING and pending.max_attempts == 2
    assert pending.timeout == dt.timedelta(seconds=5)
    run = await producer.wait(rid, timeout=30)
    assert run.state is State.SUCCESS and run.result == {"slept": 1}
    assert run.started_time is not None and run.started_time >= when - dt.timedelta(milliseconds=1)
    assert (run.started_time - when).total_seconds() < 1.5


async def test_same_id_twice_already_exists(producer: Producer) -> None:
    rid = uid("twice")
    assert await producer.enqueue(echo(1), id=rid) == rid
    with pytest.raises(jetflow.AlreadyExists) as ei:
        await producer.enqueue(echo(2), id=rid)
    assert ei.value.run_id == rid
    assert isinstance(ei.value, jetflow.JetflowError)
    run = await producer.wait(rid, timeout=30)
    assert run.result == 1
    # Delayed too, and a workflow's id.
    later = uid("twice-later")
    await producer.run_after(60, echo(1), id=later)
    with pytest.raises(jetflow.AlreadyExists):
        await producer.run_after(60, echo(1), id=later)
    await producer.cancel(later)


async def test_batch_limits_refuse_the_whole_batch(producer: Producer) -> None:
    pfx = uid("b")
    items = [Item(echo(i), id=f"{pfx}-{i}") for i in range(1001)]
    with pytest.raises(jetflow.TooManyRuns):
        await producer.batch(items)
    with pytest.raises(jetflow.NotFound):
        await producer.get(f"{pfx}-0")
    # One bad item (an invalid id; then args over the limit) refuses all.
    bad = [Item(echo(0), id=f"{pfx}-ok-0"), Item(echo(1), id="not.valid"), Item(echo(2), id=f"{pfx}-ok-2")]
    with pytest.raises(jetflow.InvalidRunID):
        await producer.batch(bad)
    big = "x" * producer.max_payload
    with pytest.raises(jetflow.ArgsTooLarge):
        await producer.batch([Item(echo(0), id=f"{pfx}-ok-0"), Item(echo(big))])
    # An id that exists refuses all of it, and nothing else is written.
    exists = await producer.enqueue(echo("x"), id=f"{pfx}-exists")
    with pytest.raises(jetflow.AlreadyExists) as ei:
        await producer.batch([Item(echo(0), id=f"{pfx}-ok-0"), Item(echo(1), id=exists)])
    assert ei.value.run_id == exists
    for i in ("ok-0", "ok-2"):
        with pytest.raises(jetflow.NotFound):
            await producer.get(f"{pfx}-{i}")
    # A good batch of 1,000 (mixed: ids, generated, delayed).
    good = [Item(echo(i)) for i in range(997)] + [
        Item(echo("id"), id=f"{pfx}-good"), Item(echo("later"), after=1), Item(echo("at"), at=dt.datetime.now())]
    ids = await producer.batch(good)
    assert len(ids) == 1000 and ids[997] == f"{pfx}-good"
    for rid, want in ((ids[0], 0), (ids[996], 996), (ids[997], "id"), (ids[998], "later"), (ids[999], "at")):
        run = await producer.wait(rid, timeout=30)
        assert run.state is State.SUCCESS and run.result == want


async def test_cancel_pending_and_running(producer: Producer) -> None:
    rid = await producer.run_after(30, echo("never"), id=uid("cancel"))
    res = await producer.cancel(rid)
    assert res.canceled and res.run.state is State.CANCELED
    assert (await producer.get(rid)).state is State.CANCELED
    again = await producer.cancel(rid)
    assert not again.canceled and again.run.state is State.CANCELED
    # A running handler is stopped.
    rid = await producer.enqueue(sleep(SleepArgs(ms=20000)))
    async with producer.watch(rid) as changes:
        async for r in changes:
            if r.state is State.IN_PROGRESS:
                break
    t0 = time.monotonic()
    res = await producer.cancel(rid)
    assert res.canceled
    run = await producer.wait(rid, timeout=10)
    assert run.state is State.CANCELED and time.monotonic() - t0 < 5
    with pytest.raises(jetflow.NotFound):
        await producer.cancel(uid("nothing"))


async def test_cancel_a_waiting_message(producer: Producer, peer_server: Server) -> None:
    """A run published without a record, that no worker serves: canceled
    from its message."""
    rid = await producer.enqueue(jetflow.raw_call("nobody.serves.this", {"a": 1}))
    got = await producer.get(rid)
    assert got.state is State.PENDING and got.revision == 0 and got.args == {"a": 1}
    res = await producer.cancel(rid)
    assert res.canceled
    assert (await producer.get(rid)).state is State.CANCELED


async def test_wait_and_watch_see_every_state(producer: Producer) -> None:
    rid = uid("watch")
    seen: list[jetflow.Run] = []

    async def collect() -> None:
        async for r in producer.watch(rid):
            seen.append(r)

    task = asyncio.create_task(collect())
    await asyncio.sleep(0.2)  # the watch waits for a run not written yet
    await producer.enqueue(sleep(SleepArgs(ms=600)), id=rid)
    waited = await producer.wait(rid, timeout=30)
    await asyncio.wait_for(task, 10)
    states = [r.state for r in seen]
    assert states[0] is State.PENDING
    assert State.IN_PROGRESS in states
    assert states[-1] is State.SUCCESS and waited.state is State.SUCCESS
    revs = [r.revision for r in seen]
    assert revs == sorted(revs) and len(set(revs)) == len(revs)
    assert any(r.progress is not None and r.progress.percent == 50 for r in seen)
    # A retried run: failed attempts, then success, in its history.
    rid = await producer.enqueue(fail(FailArgs(times=1, message="first fails")), id=uid("retry"))
    states = [r.state async for r in producer.watch(rid)]
    assert states[-1] is State.SUCCESS and State.PENDING in states
    run = await producer.get(rid)
    assert run.result == {"attempts": 2} and run.attempts == 2
    assert [a.outcome for a in run.history][:1] == ["failed"] and run.history[0].error == "first fails"
    # A permanent failure.
    rid = await producer.enqueue(fail(FailArgs(permanent=True, message="no")))
    run = await producer.wait(rid, timeout=30)
    assert run.state is State.FAILED and run.permanent and run.error == "no"


async def test_wait_timeout(producer: Producer) -> None:
    with pytest.raises(jetflow.Timeout):
        await producer.wait(uid("never-written"), timeout=0.5)


async def test_workflow_start_and_event_resume_within_a_second(producer: Producer) -> None:
    wf = await producer.start_workflow("demo.flow", {"order": 42}, id=uid("wf"))
    with pytest.raises(jetflow.AlreadyExists):
        await producer.start_workflow("demo.flow", {"order": 42}, id=wf)
    # Parked at its await: its first segment has ended.
    seg = jetflow._wire.segment_id(wf, 1)
    seg_run = await producer.wait(seg, timeout=30)
    assert seg_run.state is State.SUCCESS
    assert not (await producer.get(wf)).terminal
    t0 = time.monotonic()
    await producer.send_event(wf, "approve", {"by": "ann", "ok": True})
    run = await producer.wait(wf, timeout=10)
    took = time.monotonic() - t0
    assert run.state is State.SUCCESS and run.result == {"by": "ann", "ok": True}
    assert took < 1.0, f"resumed after {took:.3f} s"
    with pytest.raises(jetflow.Ended):
        await producer.send_event(wf, "approve", 1)
    with pytest.raises(jetflow.NotFound):
        await producer.send_event(uid("no-wf"), "approve", 1)
    rid = await producer.enqueue(echo(1))
    await producer.wait(rid, timeout=30)
    with pytest.raises(jetflow.NotAWorkflow):
        await producer.send_event(rid, "approve", 1)
    with pytest.raises(jetflow.InvalidEventName):
        await producer.send_event(wf, "not.valid", 1)


async def test_workflow_event_sent_before_its_await_and_delayed_start(producer: Producer) -> None:
    wf = await producer.start_workflow("demo.flow", "in", after=dt.timedelta(seconds=1))
    await producer.send_event(wf, "approve", "early")  # stored until the await takes it
    run = await producer.wait(wf, timeout=30)
    assert run.state is State.SUCCESS and run.result == "early"
    assert run.started_time is not None and run.scheduled_time is not None
    assert run.started_time >= run.scheduled_time


async def test_args_over_the_limit_store_nothing(producer: Producer, peer_server: Server) -> None:
    limit = producer.max_payload - jetflow.RECORD_ROOM
    pad = '{"ms":1,"pad":"' + "p" * (limit - len('{"ms":1,"pad":""}')) + '"}'
    assert len(pad) == limit
    rid = uid("limit")
    with pytest.raises(jetflow.ArgsTooLarge):
        await producer.enqueue(jetflow.raw_call("demo.sleep", jetflow.RawJSON(pad + " ")), id=rid)
    with pytest.raises(jetflow.NotFound):
        await producer.get(rid)
    with pytest.raises(jetflow.ArgsTooLarge):  # a generated id: no message either
        await producer.enqueue(jetflow.raw_call("demo.sleep", jetflow.RawJSON(pad + " ")))
    with pytest.raises(jetflow.ArgsTooLarge):
        await producer.send_event(rid, "approve", "e" * limit)
    # At the limit: stored. (The Go worker then cannot add even a small
    # result beside args this large: its attempts fail with "result too
    # large", which is the worker's business; the run is canceled here.)
    ok = await producer.enqueue(jetflow.raw_call("demo.sleep", jetflow.RawJSON(pad)), id=rid)
    assert (await producer.get(ok)).args == {"ms": 1, "pad": "p" * (limit - len('{"ms":1,"pad":""}'))}
    await producer.cancel(ok)
    # Under the worker's own bound for a result beside the args (its max
    # payload less 8192 bytes), it succeeds.
    small = '{"ms":1,"pad":"' + "p" * (producer.max_payload - 8192 - 64) + '"}'
    run = await producer.wait(await producer.enqueue(jetflow.raw_call("demo.sleep", jetflow.RawJSON(small))),
                              timeout=30)
    assert run.state is State.SUCCESS and run.result == {"slept": 1}


async def test_bad_inputs_are_typed_errors(producer: Producer) -> None:
    with pytest.raises(jetflow.InvalidName):
        jetflow.define("emails.*")
    with pytest.raises(jetflow.InvalidName):
        await producer.enqueue(jetflow.raw_call("bad name", 1))
    with pytest.raises(jetflow.InvalidRunID):
        await producer.enqueue(echo(1), id="a.b")
    with pytest.raises(jetflow.InvalidRunID):
        await producer.enqueue(echo(1), parent="a b")
    with pytest.raises(jetflow.BadArgs):
        await producer.enqueue(echo(float("nan")))
    with pytest.raises(jetflow.BadArgs):
        await producer.enqueue(echo(object()))
    with pytest.raises(jetflow.BadArgs):
        await producer.enqueue(echo(1), timeout="soon")
    with pytest.raises(jetflow.InvalidRunID):
        await producer.get("x y")
    with pytest.raises(jetflow.NotFound):
        await producer.get(uid("missing"))
