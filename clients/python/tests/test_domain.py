"""A JetStream domain (nats.go's jetstream.WithDomain): the producer's API
requests go to $JS.<domain>.API."""

from __future__ import annotations

import nats

import jetflow
from conftest import Server, provision
from jetflow import Producer


async def test_a_jetstream_domain() -> None:
    """A producer told the server's JetStream domain sends its API requests
    to $JS.<domain>.API."""
    s = Server(js="domain: hub")
    try:
        provision(s.url)
        nc = await nats.connect(s.url)
        p = await Producer.create(nc, domain="hub")
        assert p.api == "$JS.hub.API"
        rid = await p.run_after(60, jetflow.raw_call("dom.fn", 1), id="dom-1")
        assert (await p.get(rid)).state is jetflow.State.PENDING
        queued = await p.enqueue(jetflow.raw_call("dom.fn", 2))
        assert (await p.get(queued)).args == 2
        assert (await p.cancel(rid)).canceled
        await p.close()
        await nc.close()
    finally:
        s.stop()
