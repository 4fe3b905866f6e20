"""Test harness: real servers only. A nats-server built from the Go module
cache (github.com/nats-io/nats-server/v2, the version go.mod names), the
jetflow CLI (to provision) and the Go peer (worker, scheduler, demo
functions and a workflow: integration/internal/pypeer) run as processes.

Environment:
  JETFLOW_TEST_BIN     where the Go binaries are built (default: a cache
                       directory under the system temp dir)
  JETFLOW_VECTORS      the shared test vectors (default:
                       ../../streams/testdata/vectors from this package)
  JETFLOW_REQUIRE_VECTORS=1  fail, not skip, when they are missing
  JETFLOW_PEER_REPO    a jetflow checkout to build the peer from when this
                       one has no integration/internal/clientpeer yet
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

PKG = Path(__file__).resolve().parents[1]
REPO = PKG.parents[1]
VECTORS = Path(os.environ.get("JETFLOW_VECTORS") or PKG / ".." / ".." / "streams" / "testdata" / "vectors").resolve()
BIN = Path(os.environ.get("JETFLOW_TEST_BIN") or Path(tempfile.gettempdir()) / "jetflow-pyclient-bin")

sys.path.insert(0, str(Path(__file__).resolve().parent))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_built: dict[str, Path] = {}


def go_binary(name: str, pkg: str, repo: Path = REPO) -> Path:
    """Builds a Go program of this repository (or of its module cache) once
    per test session."""
    if name in _built:
        return _built[name]
    if shutil.which("go") is None:
        pytest.skip("go is not installed: the tests need a nats-server and the Go peer")
    BIN.mkdir(parents=True, exist_ok=True)
    out = BIN / name
    r = subprocess.run(["go", "build", "-o", str(out), pkg], cwd=repo, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"go build {pkg}: {r.stderr}")
    _built[name] = out
    return out


class Server:
    """A nats-server process with JetStream, on a port of its own."""

    def __init__(self, conf: str = "", max_payload: int = 8 << 20, env: dict[str, str] | None = None,
                 js: str = "") -> None:
        self.bin = go_binary("nats-server", "github.com/nats-io/nats-server/v2")
        self.dir = Path(tempfile.mkdtemp(prefix="jetflow-py-nats-"))
        self.port = free_port()
        path = self.dir / "server.conf"
        path.write_text(f'listen: "127.0.0.1:{self.port}"\nserver_name: py{self.port}\n'
                        f'max_payload: {max_payload}\n'
                        f'jetstream {{\n  store_dir: "{self.dir / "js"}"\n  {js}\n}}\n' + conf)
        self.log = open(self.dir / "server.log", "wb")
        self.proc = subprocess.Popen([str(self.bin), "-c", str(path)], stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nats-server did not start:\n" + self.tail()) from None
                time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def url_as(self, user: str, password: str) -> str:
        return f"nats://{user}:{password}@127.0.0.1:{self.port}"

    def tail(self, n: int = 4000) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def provision(url: str, *extra: str) -> None:
    cli = go_binary("jetflow", "./cmd/jetflow")
    r = subprocess.run([str(cli), "provision", "--url", url, *extra], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"jetflow provision: {r.stdout}{r.stderr}")


def vectors_dir() -> Path:
    if not (VECTORS / "produce.json").exists():
        msg = f"shared test vectors not found at {VECTORS} (set JETFLOW_VECTORS)"
        if os.environ.get("JETFLOW_REQUIRE_VECTORS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return VECTORS


def load_vectors(name: str) -> dict[str, Any]:
    d = json.loads((vectors_dir() / name).read_text())
    assert d.get("format") == 1, f"{name}: unknown format {d.get('format')}"
    return d


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """One provisioned server for the tests that share it."""
    s = Server()
    try:
        provision(s.url)
        yield s
    finally:
        s.stop()


@pytest.fixture
async def nc(server: Server) -> AsyncIterator[nats.aio.client.Client]:
    c = await nats.connect(server.url)
    yield c
    await c.close()


PEER_PKG = "./integration/internal/clientpeer"


def peer_binary() -> Path:
    repo = REPO
    if not (REPO / PEER_PKG).is_dir() and os.environ.get("JETFLOW_PEER_REPO"):
        repo = Path(os.environ["JETFLOW_PEER_REPO"])
    if not (repo / PEER_PKG).is_dir():
        pytest.fail(f"no Go peer at {repo / PEER_PKG} (set JETFLOW_PEER_REPO to a checkout that has it)")
    return go_binary("clientpeer", PEER_PKG, repo)


class Peer:
    """The Go peer (integration/internal/clientpeer): a worker and a
    scheduler serving demo.echo, demo.sleep, demo.fail and the workflow
    demo.flow, as a process of its own."""

    def __init__(self, url: str, *args: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="jetflow-py-peer-"))
        self.err = open(self.dir / "stderr.log", "wb")
        self.proc = subprocess.Popen([str(peer_binary()), "-url", url, "-quiet", *args],
                                     stdout=subprocess.PIPE, stderr=self.err)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        buf = b""
        while b"READY" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise RuntimeError(f"clientpeer did not start: {buf!r}\n{self.stderr()}")
            if sel.select(left):
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    continue
                buf += chunk
        sel.close()

    def stderr(self) -> str:
        try:
            return (self.dir / "stderr.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def peer_server() -> Iterator[Server]:
    """A server (1 MB max payload, as nats-server's default) with the Go
    peer running against it; the peer provisions it."""
    s = Server(max_payload=1 << 20)
    peer = None
    try:
        peer = Peer(s.url)
        yield s
    finally:
        if peer is not None:
            peer.stop()
        s.stop()
