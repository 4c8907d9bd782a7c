#!/usr/bin/env python3
"""A recording TCP proxy for tests/e2e/secrets.bats: listens on 127.0.0.1 (a free port, written to
--port-file once listening), forwards every connection to 127.0.0.1:--to, and appends every byte
the clients send to --log. The test reads the log to prove that rpcroute did send the secret
upstream (in the URL path and query, in headers, in Basic auth), so a test that finds the secret
nowhere else cannot pass just because the secret was never used.

Usage: record_proxy.py --to PORT --port-file PATH --log PATH
SIGTERM or SIGINT ends it.
"""

import argparse
import os
import signal
import socket
import sys
import threading


def pump(src, dst, log, lock):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if log is not None:
                with lock:
                    log.write(data)
                    log.flush()
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--to", type=int, required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    log = open(a.log, "ab")
    lock = threading.Lock()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(128)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{srv.getsockname()[1]}\n")
    os.rename(tmp, a.port_file)
    while True:
        client, _ = srv.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", a.to), timeout=10)
            upstream.settimeout(None)
        except OSError:
            client.close()
            continue
        threading.Thread(target=pump, args=(client, upstream, log, lock), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, None, lock), daemon=True).start()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
