"""Writes whose acknowledgement is lost (issue 26's rule): the connection is
cut, by a proxy between the producer and a real nats-server, right after
the server received a write and before its acknowledgement comes back. The
producer tries again after a reconnect, and its refused (or repeated) try
is confirmed with a read the stream's leader answers: the call returns the
id, not AlreadyExists, and the run is stored once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest

import jetflow
from conftest import Server, free_port
from jetflow import Item, Producer


class CutProxy:
    """Forwards a NATS connection; armed with a subject, it passes on the
    client's bytes that publish on it and then cuts the connection before
    anything the server says afterwards reaches the client."""

    def __init__(self, upstream_port: int) -> None:
        self.up = upstream_port
        self.port = free_port()
        self.armed: bytes | None = None
        self.cuts = 0
        self.conns: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []

    async def start(self) -> None:
        self.srv = await asyncio.start_server(self._conn, "127.0.0.1", self.port)

    async def stop(self) -> None:
        self.srv.close()
        for a, b in self.conns:
            a.close()
            b.close()

    def arm(self, subject: str) -> None:
        self.armed = b"PUB " + subject.encode() + b" "

    async def _conn(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.up)
        self.conns.append((cw, sw))
        cut = asyncio.Event()

        async def client_to_server() -> None:
            try:
                while data := await cr.read(65536):
                    sw.write(data)
                    await sw.drain()
                    if self.armed and self.armed in data:
                        self.armed = None
                        self.cuts += 1
                        cut.set()  # stored, and the answer never comes
                        cw.close()
                        return
            except (ConnectionError, OSError):
                pass

        async def server_to_client() -> None:
            try:
                while data := await sr.read(65536):
                    if cut.is_set():
                        return
                    cw.write(data)
                    await cw.drain()
            except (ConnectionError, OSError):
                pass

        await asyncio.wait([asyncio.create_task(client_to_server()), asyncio.create_task(server_to_client())],
                           return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(0.05)  # the server takes what was sent first
        sw.close()
        cw.close()


@pytest.fixture
async def proxied(server: Server) -> AsyncIterator[tuple[Producer, CutProxy, Any]]:
    proxy = CutProxy(server.port)
    await proxy.start()
    nc = await nats.connect(f"nats://127.0.0.1:{proxy.port}", reconnect_time_wait=0.05,
                            max_reconnect_attempts=-1)
    admin = await nats.connect(server.url)
    p = await Producer.create(nc, timeout=20)
    yield p, proxy, admin
    await p.close()
    await nc.close()
    await admin.close()
    await proxy.stop()


async def count(admin: Any, stream: str, subject: str) -> int:
    r = await admin.request(f"$JS.API.STREAM.INFO.{stream}", json.dumps({"subjects_filter": subject}).encode(),
                            timeout=5)
    return int((json.loads(r.data)["state"].get("subjects") or {}).get(subject, 0))


async def revisions(admin: Any, bucket: str, key: str) -> int:
    """The key's messages in the bucket's stream: 1 for a record (a bucket
    keeps one per key; a second create could only have been refused)."""
    r = await admin.request(f"$JS.API.STREAM.INFO.KV_{bucket}",
                            json.dumps({"subjects_filter": f"$KV.{bucket}.{key}"}).encode(), timeout=5)
    return int((json.loads(r.data)["state"].get("subjects") or {}).get(f"$KV.{bucket}.{key}", 0))


async def test_direct_run_whose_ack_is_lost(proxied: tuple[Producer, CutProxy, Any]) -> None:
    p, proxy, admin = proxied
    proxy.armed = b"PUB jetflow.fn.lost.direct."  # any run of lost.direct
    rid = await p.enqueue(jetflow.raw_call("lost.direct", {"a": 1}))
    assert proxy.cuts == 1
    assert await count(admin, "JETFLOW_FN", f"jetflow.fn.lost.direct.{rid}") == 1
    assert (await p.get(rid)).args == {"a": 1}


async def test_record_whose_ack_is_lost_is_ours_not_already_exists(proxied: tuple[Producer, CutProxy, Any]) -> None:
    p, proxy, admin = proxied
    proxy.arm("$KV.jetflow_runs.lost-rec-1")
    rid = await p.enqueue(jetflow.raw_call("lost.rec", 1), id="lost-rec-1")
    assert rid == "lost-rec-1" and proxy.cuts == 1
    assert await revisions(admin, "jetflow_runs", rid) == 1
    assert await count(admin, "JETFLOW_FN", f"jetflow.fn.lost.rec.{rid}") == 1
    with pytest.raises(jetflow.AlreadyExists):  # a second call is another matter
        await p.enqueue(jetflow.raw_call("lost.rec", 1), id=rid)


async def test_batch_whose_commit_ack_is_lost(proxied: tuple[Producer, CutProxy, Any]) -> None:
    p, proxy, admin = proxied
    proxy.arm("$KV.jetflow_runs.lost-b-3")  # the commit: the last message
    ids = await p.batch([Item(jetflow.raw_call("lost.batch", i), id=f"lost-b-{i}") for i in range(1, 4)])
    assert ids == ["lost-b-1", "lost-b-2", "lost-b-3"] and proxy.cuts == 1
    for rid in ids:
        assert await revisions(admin, "jetflow_runs", rid) == 1
        assert await count(admin, "JETFLOW_FN", f"jetflow.fn.lost.batch.{rid}") == 1


async def test_direct_batch_whose_commit_ack_is_lost(proxied: tuple[Producer, CutProxy, Any]) -> None:
    p, proxy, admin = proxied
    proxy.armed = b"Nats-Batch-Commit: 1"
    ids = await p.batch([Item(jetflow.raw_call("lost.dbatch", i)) for i in range(3)])
    assert proxy.cuts == 1
    for rid in ids:
        assert await count(admin, "JETFLOW_FN", f"jetflow.fn.lost.dbatch.{rid}") == 1


async def test_event_whose_ack_is_lost(proxied: tuple[Producer, CutProxy, Any]) -> None:
    p, proxy, admin = proxied
    wf = await p.start_workflow("lost.flow", {"x": 1}, id="lost-wf-1")
    proxy.armed = b"PUB $KV.jetflow_journal.lost-wf-1.ev.go."
    await p.send_event(wf, "go", {"y": 2})
    assert proxy.cuts == 1
    r = await admin.request("$JS.API.STREAM.INFO.KV_jetflow_journal",
                            json.dumps({"subjects_filter": "$KV.jetflow_journal.lost-wf-1.ev.>"}).encode(), timeout=5)
    subjects = json.loads(r.data)["state"].get("subjects") or {}
    assert list(subjects.values()) == [1]


async def test_a_deleted_records_marker_is_written_over(proxied: tuple[Producer, CutProxy, Any]) -> None:
    """An id whose record expired (or was deleted) leaves a marker: the
    create-only write is refused, the leader's read finds the marker, and
    the record is written over it (as Go's kv.Store.Create does)."""
    p, _, admin = proxied
    rid = await p.run_after(3600, jetflow.raw_call("lost.marker", 1), id="lost-marker-1")
    await p.cancel(rid)
    await admin.request("$KV.jetflow_runs.lost-marker-1", b"", headers={"KV-Operation": "DEL"}, timeout=5)
    with pytest.raises(jetflow.NotFound):
        await p.get(rid)
    assert await p.enqueue(jetflow.raw_call("lost.marker", 2), id=rid) == rid
    run = await p.get(rid)
    assert run.args == 2 and run.revision > 0


async def test_cancel_whose_ack_is_lost_is_this_calls(proxied: tuple[Producer, CutProxy, Any]) -> None:
    """The canceled record stored, its answer lost: the call finds its own
    write (not a run that had ended) and goes on to remove the delayed
    entry and tell the workers."""
    p, proxy, admin = proxied
    rid = await p.run_after(3600, jetflow.raw_call("lost.cancel", 1), id="lost-cancel-1")
    proxy.armed = b"PUB $KV.jetflow_runs.lost-cancel-1 "
    res = await p.cancel(rid)
    assert proxy.cuts == 1
    assert res.canceled and res.run.state is jetflow.State.CANCELED
    assert (await p.get(rid)).state is jetflow.State.CANCELED
    r = await admin.request("$JS.API.STREAM.INFO.KV_jetflow_delayed",
                            json.dumps({"subjects_filter": f"$KV.jetflow_delayed.*.{rid}"}).encode(), timeout=5)
    assert not json.loads(r.data)["state"].get("subjects"), "the delayed entry was removed"

