#!/usr/bin/env python3
"""Raw-socket HTTP client for tests/e2e/hostile_http.bats: sends what a well-behaved client never
would (dribbled headers, oversized headers and bodies, pipelined and malformed requests, ...) to
`rpcroute serve` on 127.0.0.1 and prints what came back as one JSON object.

Usage: hostile_client.py --port PORT [--healthy] [--wait S] CASE [ARGS...] [:: CASE [ARGS...]]...

Output: {"results": [one object per CASE, in order], "healthy": {...} (with --healthy)}. A case's
object is {"case": ..., "responses": [{"version", "status", "reason", "headers": {lower-case name:
value}, "body", "t": seconds from the first byte sent to the response's last byte}], "closed":
bool, "closed_after": s or null, "reset": bool, "send_error": str or null, "sent": bytes,
"elapsed": s}.

With --healthy a second thread sends a normal eth_blockNumber POST on a fresh connection every
0.2 s while the cases run (and once more after them) and reports {"ok", "fail", "max_ms",
"errors"}: the sidecar must keep serving others while a hostile client holds a connection.
"""

import argparse
import json
import os
import select
import socket
import sys
import threading
import time

BN = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'


def request(method, path, body=b"", headers=None, version="HTTP/1.1", host="127.0.0.1", length=True):
    """Bytes of one HTTP request. headers: list of (name, value); Content-Length added unless length
    is False or the headers already carry one or Transfer-Encoding."""
    headers = list(headers or [])
    names = {h[0].lower() for h in headers}
    lines = [f"{method} {path} {version}".encode()]
    if host is not None and "host" not in names:
        lines.append(b"Host: " + host.encode())
    if "content-type" not in names and method == "POST":
        lines.append(b"Content-Type: application/json")
    for name, value in headers:
        lines.append(_b(name) + b": " + _b(value))
    if length and "content-length" not in names and "transfer-encoding" not in names and (body or method == "POST"):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _b(x):
    return x if isinstance(x, bytes) else x.encode()


def rpc(id_, method="eth_blockNumber", params=b"[]"):
    return b'{"jsonrpc":"2.0","id":' + _b(str(id_)) + b',"method":"' + _b(method) + b'","params":' + _b(params) + b"}"


class Parsed:
    def __init__(self):
        self.responses = []
        self.rest = b""


def parse_responses(data, times, heads=()):
    """Splits DATA into HTTP responses (Content-Length, chunked, or up to the close). TIMES maps a
    byte offset to the time it arrived, so each response gets the time of its last byte. HEADS:
    indexes of responses to HEAD requests, which have no body whatever their headers say."""
    out = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            break
        head = data[pos:end].decode("latin-1")
        lines = head.split("\r\n")
        status_line = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        body_start = end + 4
        body = b""
        if len(out) in heads:
            pos = body_start
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if body_start + n > len(data):
                break
            body = data[body_start:body_start + n]
            pos = body_start + n
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            p = body_start
            complete = False
            while True:
                e = data.find(b"\r\n", p)
                if e < 0:
                    break
                size = int(data[p:e].split(b";")[0], 16)
                if size == 0:
                    t = data.find(b"\r\n\r\n", e - 2 if e >= 2 else e)
                    if t < 0:
                        break
                    p = t + 4
                    complete = True
                    break
                body += data[e + 2:e + 2 + size]
                p = e + 2 + size + 2
            if not complete:
                break
            pos = p
        else:
            status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0
            if status in (204, 304) or 100 <= status < 200:
                pos = body_start
            else:
                body = data[body_start:]
                pos = len(data)
        last = min((t for off, t in times if off >= pos), default=None)
        out.append({
            "version": status_line[0],
            "status": int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0,
            "reason": status_line[2] if len(status_line) > 2 else "",
            "headers": headers,
            "body": body.decode("utf-8", errors="replace"),
            "t": None if last is None else round(last, 3),
        })
    return out, data[pos:]


def exchange(port, schedule, wait, expect=None, stop_on_close=True, heads=()):
    """Connects and sends SCHEDULE, a list of (seconds after start, bytes), while reading. Ends
    when WAIT seconds have passed, when the server closed the connection, or when EXPECT responses
    have arrived. HEADS: see parse_responses."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setblocking(False)
    t0 = time.monotonic()
    data = bytearray()
    times = []
    closed_after = None
    reset = False
    send_error = None
    sent = 0
    queue = list(schedule)
    pending = b""
    while True:
        now = time.monotonic() - t0
        if now >= wait:
            break
        if not pending and queue and queue[0][0] <= now:
            pending = queue.pop(0)[1]
        want_write = bool(pending) and send_error is None
        timeout = wait - now
        if not pending and queue:
            timeout = min(timeout, max(0.0, queue[0][0] - now))
        r, w, _ = select.select([s], [s] if want_write else [], [], min(timeout, 0.05))
        if r:
            try:
                chunk = s.recv(1 << 20)
            except (ConnectionResetError, BrokenPipeError):
                reset = True
                closed_after = time.monotonic() - t0
                break
            if not chunk:
                closed_after = time.monotonic() - t0
                if stop_on_close:
                    break
            else:
                data += chunk
                times.append((len(data), time.monotonic() - t0))
                if expect is not None:
                    got, _ = parse_responses(bytes(data), times, heads)
                    # All expected answers are in; wait for the close the last one announced.
                    if len(got) >= expect and got[-1]["headers"].get("connection", "").lower() != "close":
                        break
        if w and pending:
            try:
                n = s.send(pending[:1 << 20])
                sent += n
                pending = pending[n:]
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError) as e:
                send_error = type(e).__name__
                pending = b""
                queue = []
    elapsed = time.monotonic() - t0
    try:
        s.close()
    except OSError:
        pass
    responses, rest = parse_responses(bytes(data), times, heads)
    return {
        "responses": responses,
        "trailing": rest[:200].decode("latin-1"),
        "closed": closed_after is not None,
        "closed_after": None if closed_after is None else round(closed_after, 3),
        "reset": reset,
        "send_error": send_error,
        "sent": sent,
        "elapsed": round(elapsed, 3),
    }


class Healthy(threading.Thread):
    """A well-behaved client next to the hostile one."""

    def __init__(self, port, path):
        super().__init__(daemon=True)
        self.port, self.path = port, path
        self.stop = threading.Event()
        self.ok = self.fail = 0
        self.max_ms = 0.0
        self.errors = []

    def run(self):
        while not self.stop.is_set():
            self.run_once()
            self.stop.wait(0.2)

    def run_once(self):
        t = time.monotonic()
        try:
            res = exchange(self.port, [(0, request("POST", self.path, BN))], 10, expect=1)
            r = res["responses"]
            if r and r[0]["status"] == 200 and '"result"' in r[0]["body"]:
                self.ok += 1
            else:
                self.fail += 1
                self.errors.append(json.dumps(res)[:300])
        except OSError as e:
            self.fail += 1
            self.errors.append(repr(e))
        self.max_ms = max(self.max_ms, (time.monotonic() - t) * 1000)

    def report(self):
        return {"ok": self.ok, "fail": self.fail, "max_ms": round(self.max_ms, 1), "errors": self.errors[:5]}


# ---------------------------------------------------------------------------------------------------
# Cases: each returns the dict printed (exchange()'s, plus anything case-specific).

def case_slowloris(a, rest):
    """Headers one byte per second (after a first line), for up to --wait seconds."""
    head = b"POST /rpc/local HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    drip = b"X-Dribble: " + b"a" * 200
    schedule = [(0, head)] + [(1.0 + i, drip[i:i + 1]) for i in range(len(drip))]
    return exchange(a.port, schedule, a.wait)


def case_slowloris_many(a, rest):
    """N connections dribbling at once; reports how many were told 408 and closed."""
    n = int(rest[0]) if rest else 50
    results = [None] * n

    def one(i):
        try:
            results[i] = case_slowloris(a, [])
        except OSError as e:
            results[i] = {"error": repr(e)}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = [(r.get("responses") or [{}])[0].get("status") for r in results]
    return {
        "connections": n,
        "told_408": sum(1 for s in statuses if s == 408),
        "closed": sum(1 for r in results if r.get("closed")),
        "max_closed_after": max((r.get("closed_after") or 0) for r in results),
        "errors": [r["error"] for r in results if "error" in r][:5],
        "other_statuses": sorted({str(s) for s in statuses if s != 408}),
    }


def case_idle_many(a, rest):
    """N connections that send nothing at all, held open for --wait seconds."""
    n = int(rest[0]) if rest else 100
    socks = [socket.create_connection(("127.0.0.1", a.port), timeout=10) for _ in range(n)]
    time.sleep(a.wait)
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            alive += 1 if s.recv(1) is None else 0
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
        s.close()
    return {"connections": n, "still_open": alive}


def case_big_header(a, rest):
    size = int(rest[0])
    return exchange(a.port, [(0, request("POST", "/rpc/local", BN, [("X-Big", "b" * size)]))], a.wait, expect=1)


def case_many_headers(a, rest):
    n = int(rest[0])
    headers = [(f"X-H-{i}", "v") for i in range(n)]
    return exchange(a.port, [(0, request("POST", "/rpc/local", BN, headers))], a.wait, expect=1)


def case_long_target(a, rest):
    n = int(rest[0])
    return exchange(a.port, [(0, request("POST", "/rpc/local?" + "q" * n, BN))], a.wait, expect=1)


def case_big_body(a, rest):
    """A body of SIZE bytes, announced with Content-Length and actually sent."""
    size = int(rest[0])
    item = rpc(1)
    body = b"[" + b",".join([item] * (size // (len(item) + 1) + 1)) + b"]"
    return exchange(a.port, [(0, request("POST", "/rpc/local", body))], a.wait, expect=1)


def case_announced_body(a, rest):
    """Content-Length SIZE announced, only a few bytes sent."""
    size = int(rest[0])
    return exchange(a.port, [(0, request("POST", "/rpc/local", b"[", [("Content-Length", str(size))]))], a.wait,
                    expect=1)


def case_chunked_big(a, rest):
    """SIZE bytes sent as chunks of 64 KiB, no Content-Length."""
    size = int(rest[0])
    chunk = b"a" * 65536
    body = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(size // len(chunk) + 1)) + b"0\r\n\r\n"
    return exchange(a.port, [(0, request("POST", "/rpc/local", body, [("Transfer-Encoding", "chunked")]))], a.wait,
                    expect=1)


def case_batch(a, rest):
    n = int(rest[0])
    body = b"[" + b",".join(rpc(i) for i in range(n)) + b"]"
    res = exchange(a.port, [(0, request("POST", "/rpc/local", body))], a.wait, expect=1)
    res["body_bytes"] = len(body)
    return res


def case_nested(a, rest):
    """KIND DEPTH: params of DEPTH '[' (open), DEPTH '[' and ']' (balanced), a top-level array of
    DEPTH '[' (top), or DEPTH objects {"a": ... } as params (objects)."""
    kind, depth = rest[0], int(rest[1])
    if kind == "open":
        body = rpc(1, params=b"[" * depth)
    elif kind == "balanced":
        body = rpc(1, params=b"[" * depth + b"]" * depth)
    elif kind == "top":
        body = b"[" * depth + b"]" * depth
    elif kind == "objects":
        body = rpc(1, params=b"[" + b'{"a":' * depth + b"1" + b"}" * depth + b"]")
    else:
        raise SystemExit(f"unknown nesting {kind}")
    res = exchange(a.port, [(0, request("POST", "/rpc/local", body))], a.wait, expect=1)
    res["body_bytes"] = len(body)
    return res


def case_bad_utf8(a, rest):
    """WHERE: method, param, id, key: an invalid UTF-8 sequence inside a JSON string there."""
    where = rest[0]
    bad = b"\xc3\x28\xff\xfe"
    if where == "method":
        body = b'{"jsonrpc":"2.0","id":1,"method":"eth_block' + bad + b'Number","params":[]}'
    elif where == "param":
        body = b'{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x' + bad + b'","latest"]}'
    elif where == "id":
        body = b'{"jsonrpc":"2.0","id":"a' + bad + b'","method":"eth_blockNumber","params":[]}'
    elif where == "key":
        body = b'{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[],"x' + bad + b'":1}'
    elif where == "overlong":
        body = b'{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["\xc0\xaf","latest"]}'
    elif where == "surrogate":
        body = b'{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["\xed\xa0\x80","latest"]}'
    else:
        raise SystemExit(f"unknown place {where}")
    return exchange(a.port, [(0, request("POST", "/rpc/local", body))], a.wait, expect=1)


def case_pipeline(a, rest):
    """Six requests in one write: good, broken JSON, batch, GET /healthz, wrong route, good."""
    reqs = [
        request("POST", "/rpc/local", rpc(11)),
        request("POST", "/rpc/local", b'{"jsonrpc":"2.0","id":12,"method":'),
        request("POST", "/rpc/local", b"[" + rpc(13) + b"," + rpc(14) + b"]"),
        request("GET", "/healthz"),
        request("POST", "/nope", rpc(15)),
        request("POST", "/rpc/local", rpc(16)),
    ]
    return exchange(a.port, [(0, b"".join(reqs))], a.wait, expect=len(reqs))


def case_pipeline_split(a, rest):
    """Four requests cut into 7-byte pieces sent 10 ms apart, boundaries anywhere."""
    blob = b"".join(request("POST", "/rpc/local", rpc(20 + i)) for i in range(4))
    schedule = [(i * 0.01, blob[j:j + 7]) for i, j in enumerate(range(0, len(blob), 7))]
    return exchange(a.port, schedule, a.wait, expect=4)


def case_http10(a, rest):
    """One HTTP/1.0 request without keep-alive: answered, then the server closes."""
    return exchange(a.port, [(0, request("POST", "/rpc/local", rpc(1), version="HTTP/1.0"))], a.wait)


def case_http10_keepalive(a, rest):
    """HTTP/1.0 with Connection: keep-alive: two requests on one connection, one after the other."""
    r1 = request("POST", "/rpc/local", rpc(1), [("Connection", "keep-alive")], version="HTTP/1.0")
    r2 = request("POST", "/rpc/local", rpc(2), [("Connection", "keep-alive")], version="HTTP/1.0")
    return exchange(a.port, [(0, r1), (1.0, r2)], a.wait, expect=2)


def case_http10_nohost(a, rest):
    """HTTP/1.0 without a Host header (legal in 1.0)."""
    return exchange(a.port, [(0, request("POST", "/rpc/local", rpc(1), version="HTTP/1.0", host=None))], a.wait)


def case_head_then_get(a, rest):
    """HEAD PATH and GET PATH pipelined on one connection: the HEAD answer has headers only."""
    path = rest[0] if rest else "/healthz"
    reqs = request("HEAD", path) + request("GET", path)
    return exchange(a.port, [(0, reqs)], a.wait, expect=2, heads=(0,))


def case_no_length(a, rest):
    """POST with a body but neither Content-Length nor Transfer-Encoding (HTTP/1.1)."""
    return exchange(a.port, [(0, request("POST", "/rpc/local", rpc(1), length=False))], a.wait, stop_on_close=True)


def case_chunked(a, rest):
    """A body in three chunks (with a chunk extension and a trailer)."""
    body = rpc(7)
    parts = [body[:10], body[10:30], body[30:]]
    enc = b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in parts)
    enc = enc.replace(b"\r\n", b";ext=1\r\n", 1) + b"0\r\nX-Trailer: t\r\n\r\n"
    return exchange(a.port, [(0, request("POST", "/rpc/local", enc, [("Transfer-Encoding", "chunked")]))], a.wait,
                    expect=1)


def case_chunked_bad(a, rest):
    """A chunk size that is not hex."""
    enc = b"zz\r\n" + rpc(7) + b"\r\n0\r\n\r\n"
    return exchange(a.port, [(0, request("POST", "/rpc/local", enc, [("Transfer-Encoding", "chunked")]))], a.wait,
                    expect=1)


def case_smuggle(a, rest):
    """Both Content-Length and Transfer-Encoding: chunked (request smuggling shape)."""
    enc = b"5\r\nhello\r\n0\r\n\r\n"
    return exchange(a.port, [(0, request("POST", "/rpc/local", enc, [("Content-Length", "4"),
                                                                         ("Transfer-Encoding", "chunked")]))],
                    a.wait, expect=1)


def case_coding(a, rest):
    """Transfer-Encoding: CODINGS (e.g. "chunked, identity", "gzip") on a POST whose body is a whole
    second request: Beast alone reads such a request as bodiless and then runs the body."""
    inner = request("POST", "/rpc/local", rpc(9))
    return exchange(a.port, [(0, request("POST", "/rpc/local", inner, [("Transfer-Encoding", rest[0])]))], a.wait,
                    expect=1)


def case_host(a, rest):
    return exchange(a.port, [(0, request("POST", "/rpc/local", rpc(1), host=rest[0]))], a.wait, expect=1)


def case_origin(a, rest):
    return exchange(a.port, [(0, request("POST", "/rpc/local", rpc(1), [("Origin", rest[0])]))], a.wait, expect=1)


def case_raw(a, rest):
    """Sends the bytes given (Python escapes allowed, e.g. 'GARBAGE\\r\\n\\r\\n')."""
    data = rest[0].encode("latin-1").decode("unicode_escape").encode("latin-1")
    return exchange(a.port, [(0, data)], a.wait, expect=1)


def case_close_mid_body(a, rest):
    """Promises 1000 bytes, sends 100, then closes without reading."""
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    s.sendall(request("POST", "/rpc/local", b"[" + b" " * 99, [("Content-Length", "1000")]))
    time.sleep(0.2)
    s.close()
    return {"sent": "100 of 1000 body bytes, then closed"}


def case_close_mid_headers(a, rest):
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    s.sendall(b"POST /rpc/local HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
    time.sleep(0.2)
    s.close()
    return {"sent": "half the headers, then closed"}


def case_reset_mid_body(a, rest):
    """Like close_mid_body, but with an RST (SO_LINGER 0)."""
    import struct
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    s.sendall(request("POST", "/rpc/local", b"[" + b" " * 99, [("Content-Length", "1000")]))
    time.sleep(0.2)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return {"sent": "100 of 1000 body bytes, then reset"}


def case_close_before_answer(a, rest):
    """A complete request to PATH (e.g. a provider that hangs), then the client leaves at once."""
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    s.sendall(request("POST", rest[0], rpc(1)))
    time.sleep(0.2)
    s.close()
    return {"sent": "a whole request, then closed before the answer"}


def case_fd_flood(a, rest):
    """PID N SECONDS: opens N connections and holds them SECONDS (more than the sidecar PID may have
    files open, when its limit was lowered), measuring the CPU time it uses meanwhile; then closes
    them and asks once more."""
    pid, n, seconds = int(rest[0]), int(rest[1]), float(rest[2])

    def cpu():
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection(("127.0.0.1", a.port), timeout=2))
        except OSError:
            break
    c0, t0 = cpu(), time.monotonic()
    time.sleep(seconds)
    used = cpu() - c0
    wall = time.monotonic() - t0
    for s in socks:
        s.close()
    time.sleep(0.5)
    after = exchange(a.port, [(0, request("POST", "/rpc/local", BN))], 10, expect=1)
    return {"held": len(socks), "cpu_s": round(used, 3), "wall_s": round(wall, 3),
            "after": [r["status"] for r in after["responses"]]}


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--wait", type=float, default=10.0, help="seconds to wait for answers")
    p.add_argument("--healthy", action="store_true", help="run a well-behaved client alongside")
    p.add_argument("--healthy-path", default="/rpc/local")
    p.add_argument("cases", nargs="+", help="CASE ARGS... [:: CASE ARGS...]...")
    a = p.parse_args()
    runs, cur = [], []
    for word in a.cases:
        if word == "::":
            runs.append(cur)
            cur = []
        else:
            cur.append(word)
    runs.append(cur)
    for run in runs:
        if not run or run[0] not in CASES:
            p.error(f"unknown case {run[:1]}; known: {', '.join(sorted(CASES))}")
    healthy = None
    if a.healthy:
        healthy = Healthy(a.port, a.healthy_path)
        healthy.start()
    results = []
    for run in runs:
        t0 = time.monotonic()
        res = CASES[run[0]](a, run[1:])
        res["case"] = " ".join(run)[:120]
        res["case_s"] = round(time.monotonic() - t0, 3)
        results.append(res)
    out = {"results": results}
    if healthy:
        healthy.stop.set()
        healthy.join(15)
        healthy.run_once()  # and once more after everything
        out["healthy"] = healthy.report()
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
