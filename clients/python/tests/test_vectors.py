"""The shared test vectors (streams/testdata/vectors, README.md there): the
Go producer passes them, and so must this client.

produce.json runs against a real nats-server: before each vector its
streams and buckets are made again, empty (sequences start at 1), the
vector's setup is published, and a second connection taps every subject a
producer writes ($KV.>, <prefix>.fn.>, <prefix>.cancel, stream purges) and
every reply, while the Producer (its clock and id generator set to the
vector's) performs the operation. What it wrote must be the vector's writes,
in order: kind, subject, headers and body (byte for byte), and the ack.
decode.json and limits.json need no server.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

import jetflow
from conftest import Server, load_vectors, provision
from jetflow import _wire as w
from jetflow._run import BadMessage, decode_message, decode_record


def _ids(vec: dict[str, Any]) -> list[str]:
    return [v["name"] for v in vec["vectors"]]


def _produce() -> dict[str, Any]:
    try:
        return load_vectors("produce.json")
    except BaseException:
        return {"vectors": []}


def _decode() -> dict[str, Any]:
    try:
        return load_vectors("decode.json")
    except BaseException:
        return {"vectors": []}


PRODUCE = _produce()
DECODE = _decode()


# ------------------------------------------------------------------ produce


class Fresh:
    """A server whose jetflow streams are made again, empty, for each vector."""

    def __init__(self) -> None:
        self.server = Server(max_payload=8388608)
        provision(self.server.url)
        self.configs: list[dict[str, Any]] = []

    async def snapshot(self, nc: Any) -> None:
        names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=5)).data)["streams"]
        for n in sorted(names):
            cfg = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{n}", b"", timeout=5)).data)["config"]
            cfg.pop("metadata", None)
            self.configs.append(cfg)

    async def reset(self, nc: Any) -> None:
        # A loaded server may still be removing a deleted stream's store
        # when the create comes ("error creating store for stream"): the
        # create is made again for a while, and a stream a failed reset
        # left deleted is no error.
        for cfg in self.configs:
            r = json.loads((await nc.request(f"$JS.API.STREAM.DELETE.{cfg['name']}", b"", timeout=5)).data)
            assert r.get("success") or r.get("error", {}).get("err_code") == 10059, r
        for cfg in self.configs:
            for _ in range(50):
                r = json.loads((await nc.request(f"$JS.API.STREAM.CREATE.{cfg['name']}",
                                                 json.dumps(cfg).encode(), timeout=5)).data)
                if not r.get("error"):
                    break
                await asyncio.sleep(0.2)
            assert not r.get("error"), r


@pytest.fixture(scope="module")
def fresh() -> Any:
    if not PRODUCE["vectors"]:
        load_vectors("produce.json")  # skips (or fails) with the reason
    f = Fresh()
    yield f
    f.server.stop()


class Tap:
    """Records what the producer writes, and the replies to it."""

    SUBJECTS = ("$KV.>", "jetflow.fn.>", "jetflow.cancel", "$JS.API.STREAM.PURGE.>")

    def __init__(self) -> None:
        self.writes: list[Any] = []
        self.replies: dict[str, Any] = {}

    async def start(self, url: str) -> None:
        self.nc = await nats.connect(url)

        async def on_write(m: Any) -> None:
            self.writes.append(m)

        async def on_reply(m: Any) -> None:
            self.replies.setdefault(m.subject, m)

        for s in self.SUBJECTS:
            await self.nc.subscribe(s, cb=on_write)
        await self.nc.subscribe("_INBOX.>", cb=on_reply)
        await self.nc.flush()

    async def stop(self) -> None:
        await self.nc.close()


def _numbers(text: str) -> str:
    return w._TOKENS.sub(w._go_number, text)


def _kind(m: Any) -> str:
    if m.subject.startswith("$JS.API."):
        return "request"
    if m.reply or (m.headers and w.H_BATCH_ID in m.headers):
        return "publish"
    return "core"


async def _apply_setup(nc: Any, writes: list[dict[str, Any]]) -> None:
    for wr in writes:
        hdrs = wr.get("headers") or None
        body = wr.get("bodyText", "").encode()
        if wr["kind"] == "core":
            await nc.publish(wr["subject"], body, headers=hdrs)
            continue
        resp = json.loads((await nc.request(wr["subject"], body, headers=hdrs, timeout=5)).data)
        ack = wr.get("ack")
        if ack and "error" not in ack and wr["kind"] == "publish":
            assert resp.get("seq") == ack["seq"], f"setup {wr['subject']}: {resp} != {ack}"
    await nc.flush()


def _gen(ids: list[str]) -> Any:
    it = iter(ids)
    extra = [0]

    def new_id() -> str:
        try:
            return next(it)
        except StopIteration:
            extra[0] += 1
            return f"unlisted-{extra[0]}"

    return new_id


def _opts(o: dict[str, Any] | None) -> dict[str, Any]:
    o = o or {}
    out: dict[str, Any] = {}
    for k, name in (("id", "id"), ("maxAttempts", "max_attempts"), ("timeout", "timeout"), ("parent", "parent")):
        if k in o:
            out[name] = o[k]
    return out


async def _perform(p: jetflow.Producer, op: dict[str, Any]) -> dict[str, Any]:
    t = op["type"]
    if t == "enqueue":
        return {"id": await p.enqueue(jetflow.raw_call(op["function"], op["args"]), **_opts(op.get("options")))}
    if t == "runAfter":
        return {"id": await p.run_after(op["delay"], jetflow.raw_call(op["function"], op["args"]),
                                        **_opts(op.get("options")))}
    if t == "runAt":
        return {"id": await p.run_at(op["at"], jetflow.raw_call(op["function"], op["args"]),
                                     **_opts(op.get("options")))}
    if t == "batch":
        items = [jetflow.Item(jetflow.raw_call(i["function"], i["args"]), at=i.get("at"), **_opts(i.get("options")))
                 for i in op["items"]]
        return {"ids": await p.batch(items)}
    if t == "cancel":
        await p.cancel(op["id"])
        return {}
    if t == "startWorkflow":
        o = op.get("options") or {}
        return {"id": await p.start_workflow(op["workflow"], op["input"], id=o.get("id"), at=o.get("at"),
                                             after=o.get("after"))}
    if t == "sendEvent":
        await p.send_event(op["workflowId"], op["event"], op["payload"])
        return {}
    raise AssertionError(f"unknown op {t}")


@pytest.mark.parametrize("vec", PRODUCE["vectors"], ids=_ids(PRODUCE))
async def test_produce(fresh: Fresh, vec: dict[str, Any]) -> None:
    admin = await nats.connect(fresh.server.url)
    tap = Tap()
    try:
        if not fresh.configs:
            await fresh.snapshot(admin)
        await fresh.reset(admin)
        await _apply_setup(admin, vec.get("setup", []))
        await tap.start(fresh.server.url)
        nc = await nats.connect(fresh.server.url)
        now = w.parse_time(vec["now"])
        p = await jetflow.Producer.create(nc, now=lambda: now, new_id=_gen(vec["generatedIds"]),
                                          retention=PRODUCE["retention"], timeout=5)
        assert p.max_payload == PRODUCE["maxPayload"]
        try:
            got: dict[str, Any] = await _perform(p, vec["op"])
        except jetflow.JetflowError as e:
            got = {"error": e.kind}
            if e.run_id is not None and "id" in vec["result"]:
                got["id"] = e.run_id
        await nc.flush()
        await p.close()
        await nc.close()
        await asyncio.sleep(0.05)
        await tap.nc.flush()
        assert got == vec["result"], f"{vec['name']}: result"
        writes = tap.writes
        want = vec["writes"]
        got_w = [(_kind(m), m.subject) for m in writes]
        assert got_w == [(x["kind"], x["subject"]) for x in want], f"{vec['name']}: writes"
        for m, x in zip(writes, want, strict=True):
            where = f"{vec['name']}: {x['subject']}"
            assert dict(m.headers or {}) == x["headers"], where + ": headers"
            text = m.data.decode()
            if "body" in x:
                assert json.loads(text) == x["body"], where + ": body"
            # Byte for byte, but for how a number is written (the args are
            # the caller's JSON: -1.25e-07 and -1.25e-7 are one number).
            assert _numbers(text) == _numbers(x["bodyText"]), where + ": bodyText, byte for byte"
            if "ack" in x and m.reply:
                r = tap.replies.get(m.reply)
                assert r is not None, where + ": no ack"
                ack = json.loads(r.data)
                if "error" in x["ack"]:
                    assert ack.get("error", {}).get("err_code") == x["ack"]["error"]["err_code"], where + ": ack"
                else:
                    for k in ("stream", "seq", "batch", "count"):
                        if k in x["ack"]:
                            assert ack.get(k) == x["ack"][k], where + f": ack {k}: {ack}"
    finally:
        if getattr(tap, "nc", None) is not None:
            await tap.stop()
        await admin.close()


# ------------------------------------------------------------------- decode


@pytest.mark.parametrize("vec", DECODE["vectors"], ids=_ids(DECODE))
def test_decode(vec: dict[str, Any]) -> None:
    src = vec["source"]
    try:
        if src == "kv":
            run = decode_record(vec["bodyText"].encode(), vec.get("revision", 0))
        elif src == "message":
            run = decode_message("jetflow", vec["subject"], vec.get("headers") or {},
                                 vec.get("bodyText", "").encode(), w.parse_time(vec["streamTime"]))
        else:
            raise AssertionError(f"unknown source {src}")
    except jetflow.BadRecord:
        assert vec.get("error") == "badRecord", f"{vec['name']}: decoded as bad record"
        return
    except BadMessage:
        assert vec.get("error") == "notFound", f"{vec['name']}: decoded as no run"
        return
    assert "error" not in vec, f"{vec['name']}: decoded, want {vec.get('error')}"
    assert run.to_dict() == vec["expect"]
    # The friendly fields agree with the record's.
    assert run.id == vec["expect"].get("id", "")
    assert run.state.value == vec["expect"]["state"]
    assert run.attempts == vec["expect"].get("attempts", 0)


# ------------------------------------------------------------------- limits


def _value(v: Any) -> str:
    if isinstance(v, dict):
        return str(v.get("prefix", "")) + str(v["repeat"]) * int(v["times"])
    return str(v)


def test_limits() -> None:
    lim = load_vectors("limits.json")
    assert lim["maxBatch"] == jetflow.MAX_BATCH == w.MAX_BATCH
    assert lim["maxBatchArgs"] == jetflow.MAX_BATCH_ARGS
    assert lim["recordRoom"] == jetflow.RECORD_ROOM
    checks = (("functionNames", w.validate_name), ("runIds", w.validate_run_id), ("eventNames", w.validate_event_name))
    for key, check in checks:
        assert lim.get(key), key
        for case in lim[key]:
            value = _value(case["value"])
            if case.get("valid", "error" not in case):
                check(value)
            else:
                with pytest.raises(jetflow.JetflowError) as ei:
                    check(value)
                assert ei.value.kind == case["error"], (key, value)
    for case in lim.get("args", []):
        try:
            w.check_args_size(case["argsBytes"], case["maxPayload"])
            err = None
        except jetflow.JetflowError as e:
            err = e.kind
        assert err == case.get("error"), case
    for case in lim.get("batches", []):
        try:
            w.check_batch(case["items"])
            for _ in range(1):
                w.check_args_size(case["argsBytesEach"], case["maxPayload"])
            w.check_batch_args(case["items"] * case["argsBytesEach"])
            err = None
        except jetflow.JetflowError as e:
            err = e.kind
        assert err == case.get("error"), case
    assert lim.get("eventRoom", w.EVENT_ROOM) == w.EVENT_ROOM
    for case in lim.get("events", []):
        raw = jetflow._wire.encode_args("e" * (case["payloadBytes"] - 2))
        assert len(raw) == case["payloadBytes"]
        try:
            w.check_event_size(len(raw), case["maxPayload"])
            err = "notFound"  # within the limit: the workflow is read next, and there is none
        except jetflow.JetflowError as e:
            err = e.kind
        assert err == case["error"], case
    for case in lim.get("workflowInputs", []):
        raw = jetflow._wire.encode_args("i" * (case["inputBytes"] - 2))
        now = w.parse_time(case["now"])
        seg = w.segment_args(case["id"], raw, now, now)
        assert len(seg) == len(raw) + 92 + len(case["id"])  # {"wf":"<id>","n":1,"input":…,"scheduled":…,"created":…}
        try:
            w.check_workflow_args(len(raw), len(seg), case["maxPayload"])
            err = None
        except jetflow.JetflowError as e:
            err = e.kind
        assert err == case.get("error"), case
    kinds = lim.get("errorKinds", {})
    for kind, sentinel in kinds.items():
        cls = jetflow._errors.ERROR_KINDS.get(kind)
        assert cls is not None, f"no error class for kind {kind}"
        assert cls.go.split(".")[-1] == sentinel.split(".")[-1], (kind, sentinel, cls.go)
