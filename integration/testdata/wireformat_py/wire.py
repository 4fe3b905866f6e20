"""A producer in another language, on the Python standard library alone:
it publishes runs by hand as docs/wire-format.md describes, over the bare
NATS protocol (natsmini.py), and reads their records from the runs bucket.
integration/wireformat_py_test.go runs it against a Go worker serving
emails.send and slow.op (whose first attempt waits for its context to end).

python3 wire.py <nats url> <id prefix>

prints one JSON line per case: what the stream acknowledged and the record
the case ended with (null when it did not end within 30 s).
"""

import base64
import datetime
import json
import os
import sys
import time

from natsmini import (Client, KVWatch, NoResponders, direct_get_last, js_publish,
                      kv_get, wait_ended)

url, prefix = sys.argv[1], sys.argv[2]
# NATS_USER and NATS_PASSWORD, when set, are the user to connect as (the
# producer role of docs/permissions.md: it may not read the functions
# bucket, which is then left out).
user = os.environ.get("NATS_USER")
nc = Client(url, user=user, password=os.environ.get("NATS_PASSWORD"))
RUNS = "jetflow_runs"


def rfc3339(t):
    return t.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def out(case, rid, record, **more):
    """Prints a case's line, with the state a KV get (direct get) reads now."""
    m = kv_get(nc, RUNS, rid)
    line = {"case": case, "id": rid, "record": record,
            "getState": m.json()["state"] if m is not None else ""}
    line.update(more)
    print(json.dumps(line), flush=True)


def run(case, subject_fn, rid, body, headers, wait_for=None):
    """Publishes a run with an acknowledgement and waits for the record of
    wait_for (default: the run id) to end."""
    ack = js_publish(nc, "jetflow.fn.%s.%s" % (subject_fn, rid), body, headers)
    rec_id = (wait_for or rid) if not callable(wait_for) else wait_for(ack)
    out(case, rec_id, wait_ended(nc, RUNS, rec_id), ack=ack)


def wait_state(rid, state, timeout=30):
    w = KVWatch(nc, RUNS, rid)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = w.next(max(0.01, deadline - time.monotonic()))
            if m is not None and m.data and m.json().get("state") == state:
                return True
    finally:
        w.stop()
    return False


def notice(rid):
    nc.publish("jetflow.cancel", rid.encode())
    nc.flush()


# A run now with an idempotency key, published twice (the second is a
# duplicate: its other arguments are not used).
rid = prefix + "-now"
h = {"Nats-Msg-Id": rid, "Jetflow-Max-Attempts": "3", "Jetflow-Timeout": "30s"}
first = js_publish(nc, "jetflow.fn.emails.send." + rid, json.dumps({"to": "a@b.c"}), h)
again = js_publish(nc, "jetflow.fn.emails.send." + rid, json.dumps({"to": "x@y.z"}), h)
out("now", rid, wait_ended(nc, RUNS, rid), ack=first, again=again)

# Bad messages, each with the outcome the doc's table names.
run("notjson", "emails.send", prefix + "-notjson", b"not json", {"Nats-Msg-Id": prefix + "-notjson"})
run("wrongtype", "emails.send", prefix + "-wrongtype", b'{"to":5}', {"Nats-Msg-Id": prefix + "-wrongtype"})
run("badheader", "emails.send", prefix + "-badheader", b"{}", {"Jetflow-Timeout": "soon"})
run("otherid", "emails.send", prefix + "-otherid", b"{}", {"Nats-Msg-Id": prefix + "-y"},
    wait_for=lambda ack: "dlq-%s-%d" % (ack["stream"], ack["seq"]))
run("badid", "emails.send", prefix + "-bad!id", b"{}", None,
    wait_for=lambda ack: "dlq-%s-%d" % (ack["stream"], ack["seq"]))
# JSON larger than a record holds (the server's max payload less 4096).
big = json.dumps({"to": "a" * (nc.max_payload - 4096)}).encode()
run("oversized", "emails.send", prefix + "-oversized", big, {"Nats-Msg-Id": prefix + "-oversized"})

# The run's own timeout: slow.op's first attempt waits for its context.
run("timeout", "slow.op", prefix + "-timeout", b"{}", {"Nats-Msg-Id": prefix + "-timeout", "Jetflow-Timeout": "200ms"})

# A function subject of one token finds no stream.
try:
    js_publish(nc, "jetflow.fn.nothing", b"{}")
    refused = False
except NoResponders:
    refused = True
print(json.dumps({"case": "onetoken", "refused": refused}), flush=True)

# A run of a function no worker serves waits in the stream, without a
# record; a stream message get finds it (one '*' per function token).
rid = prefix + "-unserved"
ack = js_publish(nc, "jetflow.fn.nobody.serves." + rid, b'{"x":1}', {"Nats-Msg-Id": rid})
found = {}
for depth in range(1, 9):
    m = nc.request("$JS.API.STREAM.MSG.GET.JETFLOW_FN",
                   json.dumps({"last_by_subj": "jetflow.fn." + "*." * depth + rid}).encode()).json()
    if "message" in m:
        found = {"subject": m["message"]["subject"], "seq": m["message"]["seq"],
                 "data": base64.b64decode(m["message"]["data"]).decode()}
        break
out("unserved", rid, None, ack=ack, found=found)

# A run due in 2 s: the record, then the delayed entry.
rid = prefix + "-later"
now = datetime.datetime.now(datetime.timezone.utc)
due = now + datetime.timedelta(seconds=2)
args = {"to": "later@b.c"}
rec = {"id": rid, "name": "emails.send", "kind": "retryable", "args": args, "state": "pending",
       "scheduledTime": rfc3339(due), "creationTime": rfc3339(now), "attempts": 0}
hdrs = {"Nats-Expected-Last-Subject-Sequence": "0", "Jetflow-State": "pending",
        "Jetflow-Function": "emails.send", "Jetflow-Due": str(int(due.timestamp() * 1000))}
ack = js_publish(nc, "$KV.jetflow_runs." + rid, json.dumps(rec), hdrs)
entry = {"fn": "emails.send", "id": rid, "rev": ack["seq"], "scheduled": rfc3339(due),
         "created": rfc3339(now), "args": args, "due": rfc3339(due)}
js_publish(nc, "$KV.jetflow_delayed.%d.%s" % (int(due.timestamp()), rid), json.dumps(entry))
twice = js_publish(nc, "$KV.jetflow_runs." + rid, json.dumps(rec), hdrs)  # the id exists: refused
out("later", rid, wait_ended(nc, RUNS, rid), due=rfc3339(due), twice=twice)

# Cancel notices without the record write (not a cancel): one before the
# run, one while it runs. Neither loses the run.
rid = prefix + "-prenotice"
notice(rid)
run("prenotice", "emails.send", rid, b'{"to":"p"}', {"Nats-Msg-Id": rid})
rid = prefix + "-notice"
ack = js_publish(nc, "jetflow.fn.slow.op." + rid, b"{}", {"Nats-Msg-Id": rid})
running = wait_state(rid, "inProgress")
notice(rid)
out("notice", rid, wait_ended(nc, RUNS, rid), ack=ack, sawRunning=running)

# The run index's counts and the functions registry.
cp = None
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    m = direct_get_last(nc, "JETFLOW_RUNIDX", "jetflow.idxcp")
    if m is not None and "emails.send" in m.json().get("functions", {}):
        cp = m.json()
        break
    time.sleep(0.2)
m = None
if not user:
    w = KVWatch(nc, "jetflow_functions", "*.emails.send")
    m = w.next(10)
    w.stop()
print(json.dumps({"case": "buckets", "idxcp": cp is not None and sorted(cp),
                  "function": m.json() if m is not None else None}), flush=True)

nc.close()
