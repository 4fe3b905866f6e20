"""Bench: the producer's async enqueue against a raw JetStream publish of
the same size, from the same nats-py client in the same run.

    python bench/bench_enqueue.py                    # starts its own nats-server
    python bench/bench_enqueue.py --url nats://...   # a provisioned server

Prints, per payload size, runs/s of ``enqueue_async`` (pipelined, each run
awaited until stored) and of ``js.publish_async`` (pipelined, each ack
awaited) of the same bytes on the function stream, and their ratio, then of
``enqueue`` called concurrently against ``js.publish`` likewise. Each round
is a pair run back to back (raw then client, then client then raw, ...);
the medians of the rates and of the pairs' ratios are printed.
Target (issue 28): a ratio of at least 0.5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats

import jetflow

HERE = Path(__file__).resolve().parent


async def rate(n: int, f: Callable[[int], Awaitable[None]]) -> float:
    t0 = time.perf_counter()
    await f(n)
    return n / (time.perf_counter() - t0)


async def bench(url: str, n: int, sizes: list[int], rounds: int, concurrency: int) -> list[dict[str, Any]]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    p = await jetflow.Producer.create(nc)
    fn = jetflow.define("bench.enqueue")
    out = []
    try:
        for size in sizes:
            args = {"pad": "x" * max(0, size - len('{"pad":""}'))}
            body = json.dumps(args, separators=(",", ":")).encode()
            assert len(body) == size
            raw_args = jetflow.RawJSON(body)
            seq = [0]

            async def raw_async(k: int) -> None:
                futs = []
                for _ in range(k):
                    seq[0] += 1
                    futs.append(await js.publish_async(f"jetflow.fn.bench.raw.r{seq[0]}", body))
                for f in futs:
                    await f

            async def client_async(k: int) -> None:
                pend = [await p.enqueue_async(fn(raw_args)) for _ in range(k)]
                for f in pend:
                    await f

            async def raw_conc(k: int) -> None:
                sem = asyncio.Semaphore(concurrency)

                async def one() -> None:
                    async with sem:
                        seq[0] += 1
                        await js.publish(f"jetflow.fn.bench.raw.r{seq[0]}", body)

                await asyncio.gather(*(one() for _ in range(k)))

            async def client_conc(k: int) -> None:
                sem = asyncio.Semaphore(concurrency)

                async def one() -> None:
                    async with sem:
                        await p.enqueue(fn(raw_args))

                await asyncio.gather(*(one() for _ in range(k)))

            for label, raw, cli in (("async", raw_async, client_async), ("concurrent", raw_conc, client_conc)):
                await raw(min(n, 2000))  # warm up
                await cli(min(n, 2000))
                raws, clis, ratios = [], [], []
                for i in range(rounds):
                    # Pairs run back to back, in alternating order: the ratio
                    # of each pair sees the same machine load.
                    if i % 2 == 0:
                        r, c = await rate(n, raw), await rate(n, cli)
                    else:
                        c, r = await rate(n, cli), await rate(n, raw)
                    raws.append(r)
                    clis.append(c)
                    ratios.append(c / r)
                    await purge(nc)
                row = {"size": size, "mode": label, "raw": statistics.median(raws),
                       "enqueue": statistics.median(clis), "ratio": statistics.median(ratios),
                       "ratios": [round(x, 2) for x in ratios]}
                out.append(row)
                print(f"{size:>6} B  {label:<10}  raw JetStream publish {row['raw']:>9.0f}/s   "
                      f"jetflow enqueue {row['enqueue']:>9.0f}/s   ratio {row['ratio']:.2f} "
                      f"(median of {rounds} pairs: {' '.join(f'{x:.2f}' for x in ratios)})", flush=True)
    finally:
        await p.close()
        await nc.close()
    return out


async def purge(nc: Any) -> None:
    """Empties the function stream between rounds (no worker takes these)."""
    await nc.request("$JS.API.STREAM.PURGE.JETFLOW_FN", b"{}", timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="", help="a provisioned NATS server (default: start one)")
    ap.add_argument("-n", type=int, default=10000, help="runs per round")
    ap.add_argument("--sizes", default="128,1024", help="payload sizes in bytes, comma separated")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=1000, help="callers at once in the concurrent mode")
    ap.add_argument("--min-ratio", type=float, default=0.0, help="exit 1 if an async ratio is below this")
    a = ap.parse_args()
    server = None
    url = a.url
    if not url:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from conftest import Server, provision  # the tests' harness

        server = Server()
        provision(server.url)
        url = server.url
    try:
        rows = asyncio.run(bench(url, a.n, [int(s) for s in a.sizes.split(",")], a.rounds, a.concurrency))
    finally:
        if server is not None:
            server.stop()
    low = [r for r in rows if r["mode"] == "async" and r["ratio"] < a.min_ratio]
    if low:
        print(f"ratio below {a.min_ratio}: {low}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
