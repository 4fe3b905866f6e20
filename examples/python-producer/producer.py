"""A Python service feeding Go workers through jetflow.

It schedules runs of the functions the Go peer serves
(integration/internal/clientpeer: demo.echo, demo.sleep and the workflow
demo.flow), follows one as it runs, and starts a workflow that waits for an
event, then sends it the event.

    go run ./integration/internal/clientpeer -url nats://127.0.0.1:4222 &
    pip install ./clients/python        # or the built wheel
    python examples/python-producer/producer.py --url nats://127.0.0.1:4222

It prints one line per step and exits 0 once every run has ended as it
should.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from dataclasses import dataclass
from datetime import timedelta

import nats

import jetflow


@dataclass
class SleepArgs:
    ms: int


echo = jetflow.define("demo.echo")  # any JSON in, the same JSON as its result
sleep = jetflow.define("demo.sleep", SleepArgs)  # sleeps, reporting progress


async def main(url: str) -> int:
    nc = await nats.connect(url)
    producer = await jetflow.Producer.create(nc)
    try:
        # A run due now; wait for its outcome.
        run_id = await producer.enqueue(echo({"order": 42, "note": "hello from Python"}))
        run = await producer.wait(run_id, timeout=30)
        print(f"enqueue: {run_id} {run.state} result={run.result}")

        # An idempotency key: the second call schedules nothing.
        key = f"order-{uuid.uuid4().hex[:8]}-receipt"
        await producer.enqueue(echo("receipt"), id=key)
        try:
            await producer.enqueue(echo("receipt"), id=key)
        except jetflow.AlreadyExists as e:
            print(f"already exists: {e.run_id}")

        # A run due later (a scheduler publishes it when due), watched.
        later = await producer.run_after(timedelta(seconds=1), sleep(SleepArgs(ms=300)))
        async for r in producer.watch(later):
            pct = f" {r.progress.percent:.0f}%" if r.progress and not r.terminal else ""
            print(f"watch: {later} {r.state}{pct}")

        # A batch, all or none.
        ids = await producer.batch([jetflow.Item(echo(i)) for i in range(10)])
        results = [(await producer.wait(i, timeout=30)).result for i in ids]
        print(f"batch: {len(ids)} runs, results {results}")

        # A workflow that waits for the event "approve", then the event.
        wf = await producer.start_workflow("demo.flow", {"order": 42})
        await producer.send_event(wf, "approve", {"by": "ann"})
        done = await producer.wait(wf, timeout=30)
        print(f"workflow: {wf} {done.state} result={done.result}")

        ok = (run.result == {"order": 42, "note": "hello from Python"} and done.result == {"by": "ann"}
              and results == list(range(10)))
        return 0 if ok else 1
    finally:
        await producer.close()
        await nc.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="nats://127.0.0.1:4222")
    sys.exit(asyncio.run(main(ap.parse_args().url)))
