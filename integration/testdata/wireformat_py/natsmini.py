"""A minimal NATS client on the standard library alone (socket, threads).

Enough of the NATS text protocol for docs/wire-format.md: INFO, CONNECT,
PUB, HPUB, SUB, UNSUB, MSG, HMSG, PING, PONG, +OK, -ERR; headers are the
"NATS/1.0" block, with the status line (e.g. "NATS/1.0 503") kept apart.
"""

import json
import queue
import socket
import threading
import time
import uuid
from urllib.parse import urlparse


class Msg:
    def __init__(self, subject, reply, headers, status, description, data):
        self.subject = subject
        self.reply = reply
        self.headers = headers  # dict: name -> list of values
        self.status = status  # "" or e.g. "503"
        self.description = description
        self.data = data

    def header(self, name):
        v = self.headers.get(name)
        return v[0] if v else None

    def json(self):
        return json.loads(self.data)


class NATSError(Exception):
    pass


class NoResponders(NATSError):
    pass


def encode_headers(headers):
    out = "NATS/1.0\r\n"
    for k, v in (headers or {}).items():
        if "\r" in k or "\n" in k or ":" in k or "\r" in str(v) or "\n" in str(v):
            raise ValueError("header %r: CR, LF (or ':' in the name) cannot be sent" % k)
        out += "%s: %s\r\n" % (k, v)
    return (out + "\r\n").encode()


def decode_headers(raw):
    text = raw.decode("utf-8", "replace")
    lines = text.split("\r\n")
    first = lines[0]
    status, description = "", ""
    parts = first.split(" ", 2)
    if len(parts) >= 2:
        status = parts[1]
    if len(parts) == 3:
        description = parts[2]
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        k, _, v = line.partition(":")
        headers.setdefault(k.strip(), []).append(v.strip())
    return headers, status, description


class Client:
    def __init__(self, url="nats://127.0.0.1:4222", user=None, password=None, timeout=10):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port or 4222), timeout=timeout)
        self.sock.settimeout(None)
        self.buf = b""
        self.wlock = threading.Lock()
        self.subs = {}  # sid -> queue.Queue
        self.next_sid = 1
        self.closed = False
        self.errors = queue.Queue()
        self.pongs = queue.Queue()
        line = self._readline()
        if not line.startswith(b"INFO "):
            raise NATSError("expected INFO, got %r" % line)
        self.info = json.loads(line[5:])
        if not self.info.get("headers"):
            raise NATSError("server does not support headers")
        self.max_payload = self.info.get("max_payload", 1048576)
        opts = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                "protocol": 1, "lang": "python-stdlib", "version": "0.1", "name": "wireformat-py"}
        user = user or u.username
        password = password or u.password
        if user:
            opts["user"] = user
            opts["pass"] = password or ""
        self._write(b"CONNECT " + json.dumps(opts).encode() + b"\r\nPING\r\n")
        # The first PONG (or -ERR) says whether the server took CONNECT.
        while True:
            line = self._readline()
            if line == b"PONG":
                break
            if line.startswith(b"-ERR"):
                raise NATSError(line.decode())
        self.reader = threading.Thread(target=self._read_loop, daemon=True)
        self.reader.start()

    # -- low level --------------------------------------------------------

    def _write(self, b):
        with self.wlock:
            self.sock.sendall(b)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        self.buf += chunk

    def _readline(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _readn(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _read_loop(self):
        try:
            while True:
                line = self._readline()
                op = line.split(b" ", 1)[0].upper()
                if op == b"MSG":
                    p = line.decode().split()
                    subject, sid = p[1], int(p[2])
                    reply = p[3] if len(p) == 5 else None
                    data = self._readn(int(p[-1]))
                    self._deliver(sid, Msg(subject, reply, {}, "", "", data))
                elif op == b"HMSG":
                    p = line.decode().split()
                    subject, sid = p[1], int(p[2])
                    reply = p[3] if len(p) == 6 else None
                    hlen, total = int(p[-2]), int(p[-1])
                    raw = self._readn(total)
                    headers, status, desc = decode_headers(raw[:hlen])
                    self._deliver(sid, Msg(subject, reply, headers, status, desc, raw[hlen:]))
                elif op == b"PING":
                    self._write(b"PONG\r\n")
                elif op == b"PONG":
                    self.pongs.put(True)
                elif op == b"-ERR":
                    self.errors.put(line.decode())
                elif op in (b"+OK", b"INFO"):
                    pass
        except (ConnectionError, OSError) as e:
            if not self.closed:
                self.errors.put("reader: %s" % e)
            for q in list(self.subs.values()):
                q.put(None)

    def _deliver(self, sid, msg):
        q = self.subs.get(sid)
        if q is not None:
            q.put(msg)

    # -- API ----------------------------------------------------------------

    def publish(self, subject, data=b"", headers=None, reply=None):
        if isinstance(data, str):
            data = data.encode()
        r = (" " + reply) if reply else ""
        if headers is None:
            self._write(b"PUB %s%s %d\r\n%s\r\n" % (subject.encode(), r.encode(), len(data), data))
        else:
            h = encode_headers(headers)
            self._write(b"HPUB %s%s %d %d\r\n%s%s\r\n" % (
                subject.encode(), r.encode(), len(h), len(h) + len(data), h, data))

    def flush(self, timeout=10):
        self._write(b"PING\r\n")
        try:
            self.pongs.get(timeout=timeout)
        except queue.Empty:
            raise NATSError("flush: no PONG")
        if not self.errors.empty():
            raise NATSError(self.errors.get())

    def subscribe(self, subject):
        sid = self.next_sid
        self.next_sid += 1
        q = queue.Queue()
        self.subs[sid] = q
        self._write(b"SUB %s %d\r\n" % (subject.encode(), sid))
        return sid, q

    def unsubscribe(self, sid):
        self.subs.pop(sid, None)
        self._write(b"UNSUB %d\r\n" % sid)

    def new_inbox(self):
        return "_INBOX." + uuid.uuid4().hex

    def request(self, subject, data=b"", headers=None, timeout=10):
        inbox = self.new_inbox()
        sid, q = self.subscribe(inbox)
        try:
            self.publish(subject, data, headers, reply=inbox)
            try:
                m = q.get(timeout=timeout)
            except queue.Empty:
                raise NATSError("request %s: timeout" % subject)
            if m is None:
                raise NATSError("request %s: connection closed" % subject)
            if m.status == "503":
                raise NoResponders("request %s: no responders" % subject)
            return m
        finally:
            self.unsubscribe(sid)

    def close(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


# -- JetStream on top: the few calls docs/wire-format.md needs -------------

def js_publish(nc, subject, data=b"", headers=None, timeout=10):
    """A JetStream publish: a request whose reply is the stream's ack
    ({"stream", "seq", "duplicate"} or {"error": {...}})."""
    m = nc.request(subject, data, headers, timeout)
    return m.json()


def direct_get_last(nc, stream, subject, timeout=10):
    """Direct get of subject's last message (streams with allow_direct: the
    KV buckets, the run index). None when there is none (404)."""
    m = nc.request("$JS.API.DIRECT.GET.%s.%s" % (stream, subject), b"", None, timeout)
    if m.status == "404":
        return None
    if m.status:
        raise NATSError("direct get %s %s: %s %s" % (stream, subject, m.status, m.description))
    return m


def kv_get(nc, bucket, key, timeout=10):
    """A KV get: the last message of $KV.<bucket>.<key> (None when absent or
    deleted/purged, KV-Operation DEL or PURGE)."""
    m = direct_get_last(nc, "KV_" + bucket, "$KV.%s.%s" % (bucket, key), timeout)
    if m is None or m.header("KV-Operation") or m.header("Nats-Marker-Reason"):
        return None
    return m


class KVWatch:
    """A KV watch: an ephemeral push consumer (ack none, last per subject,
    then every new value) delivering to an inbox. It is created on
    $JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>, the form
    docs/permissions.md's producer role allows."""

    def __init__(self, nc, bucket, key=">", timeout=10):
        self.nc = nc
        self.inbox = nc.new_inbox()
        self.sid, self.q = nc.subscribe(self.inbox)
        stream = "KV_" + bucket
        name = "watch" + uuid.uuid4().hex
        filt = "$KV.%s.%s" % (bucket, key)
        req = {"stream_name": stream, "config": {
            "name": name, "deliver_subject": self.inbox, "deliver_policy": "last_per_subject",
            "ack_policy": "none", "filter_subject": filt,
            "inactive_threshold": 30 * 10**9, "mem_storage": True, "num_replicas": 1}}
        r = nc.request("$JS.API.CONSUMER.CREATE.%s.%s.%s" % (stream, name, filt),
                       json.dumps(req).encode(), None, timeout).json()
        if "error" in r:
            raise NATSError("watch: %s" % r["error"])
        self.consumer = r["name"]
        self.stream = stream

    def next(self, timeout):
        try:
            m = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        return m

    def stop(self):
        self.nc.unsubscribe(self.sid)
        try:
            self.nc.request("$JS.API.CONSUMER.DELETE.%s.%s" % (self.stream, self.consumer), b"", None, 5)
        except NATSError:
            pass


def wait_ended(nc, bucket, run_id, timeout=30):
    """Watches run_id's record until it is terminal; returns it (or the
    last record seen, or None, when the deadline passes)."""
    w = KVWatch(nc, bucket, run_id)
    last = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = w.next(max(0.01, deadline - time.monotonic()))
            if m is None:
                break
            if m.status or m.header("KV-Operation") in ("DEL", "PURGE") or not m.data:
                continue
            last = m.json()
            if last.get("state") in ("success", "failed", "canceled"):
                return last
    finally:
        w.stop()
    return last
