"""Two hostile-client findings, on loopback:

  idle keep-alive connections  96 connections that each sent one GET /health
                               and then stayed open used to hold every slot,
                               the /health and /metrics reserve included, so
                               /health, /metrics and /search answered 503 for
                               the whole idle timeout. Now a connection let in
                               on the reserve is closed after its answer, and an
                               idle kept-alive connection is closed to make room
                               when the slots run out: all three answer 200.
  chunked body past the limit  used to be read to its end (or to 64 MB, then
                               dropped without an answer). Now 413 as soon as
                               the running total passes --max-body-bytes, then
                               the connection closes.
"""
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import Server, build_indexes, check, finish, http, workdir  # noqa: E402

MAX_CONN, RESERVE = 64, 32  # --max-connections here, and the server's reserve for /health and /metrics
LIMIT = 65536               # --max-body-bytes here


def port_of(srv):
    return int(srv.base.rsplit(":", 1)[1])


def read_response(s, timeout=10.0):
    """One HTTP response (head and Content-Length body) from s, or what came before EOF/timeout."""
    data, end = b"", time.time() + timeout
    while time.time() < end:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if sep:
            n = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v)
            if len(rest) >= n:
                return data
        r, _, _ = select.select([s], [], [], max(0.0, end - time.time()))
        if not r:
            break
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def closed_by_server(s, timeout=3.0):
    """True when the server ends the connection (EOF or reset) within timeout."""
    r, _, _ = select.select([s], [], [], timeout)
    if not r:
        return False
    try:
        return s.recv(1) == b""
    except OSError:
        return True


def count_closed(socks, wait=0.5):
    """How many of socks the server has ended (EOF or reset) after wait seconds."""
    time.sleep(wait)
    r, _, _ = select.select(socks, [], [], 0)
    n = 0
    for c in r:
        try:
            n += c.recv(1) == b""
        except OSError:
            n += 1
    return n


def idle_keepalive(ix):
    srv = Server("--index", ix, "--max-connections", str(MAX_CONN), "--idle-timeout-s", "30", "--min-body-rate", "0")
    port = port_of(srv)
    try:
        for rnd in range(2):  # renewably: the same again once the first round is over
            socks, ok = [], 0
            for i in range(MAX_CONN + RESERVE):
                c = socket.create_connection(("127.0.0.1", port), timeout=10)
                c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                ok += read_response(c).startswith(b"HTTP/1.1 200")
                socks.append(c)
            closed = count_closed(socks)
            print(f"round {rnd}: {ok} of {len(socks)} GET /health answered 200; {closed} connections then closed by "
                  f"the server")
            check(ok == len(socks), f"round {rnd}: every GET /health answered 200 ({ok})")
            check(len(socks) - closed <= MAX_CONN, f"round {rnd}: at most --max-connections stay open while idle "
                                                   f"({len(socks) - closed})")
            t0 = time.time()
            for method, path, body in (("GET", "/health", None), ("GET", "/metrics", None),
                                       ("POST", "/search", {"query": "boundary layer", "k": 3}),
                                       ("GET", "/health", None)):
                s, _, _ = http(srv.base, method, path, body, timeout=10)
                print(f"round {rnd}: {method} {path} beside {len(socks)} idle keep-alive connections: {s}")
                check(s == 200, f"round {rnd}: {method} {path} answers 200 beside idle keep-alive connections, not {s}")
            check(time.time() - t0 < 10, f"round {rnd}: answered at once ({time.time() - t0:.1f} s)")
            for c in socks:
                c.close()
            time.sleep(0.5)

        # every slot busy (bodies still coming), none idle: the reserve takes the
        # health checks and closes each after its answer; other routes wait
        busy = []
        for i in range(MAX_CONN):
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
            busy.append(c)
        time.sleep(0.5)
        for rep in range(RESERVE + 4):  # more checks than the reserve holds: each frees its slot
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sendall(b"GET /%s HTTP/1.1\r\nHost: x\r\n\r\n" % (b"health" if rep % 2 else b"metrics"))
            out = read_response(c)
            head = out.partition(b"\r\n\r\n")[0].lower()
            if not (out.startswith(b"HTTP/1.1 200") and b"connection: close" in head and closed_by_server(c)):
                check(False, f"health check {rep} beside {MAX_CONN} busy connections: 200 with Connection: close, "
                             f"then closed: {out[:120]!r}")
                break
            c.close()
        else:
            print(f"{RESERVE + 4} health checks beside {MAX_CONN} busy connections: each 200, then closed")
        s, _, _ = http(srv.base, "POST", "/search", {"query": "x"}, timeout=10)
        check(s == 503, f"/search with every slot busy and none idle: 503 ({s})")
        for c in busy:
            c.close()
    finally:
        rc = srv.stop()
    check(rc == 0, f"idle keep-alive server exit code {rc}")


def chunked_413():
    srv = Server("--max-body-bytes", str(LIMIT))
    port = port_of(srv)
    chunk = b"a" * 8192
    piece = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    head = b"POST /encode HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    try:
        # just past the limit, then the client waits: the 413 comes without the rest of the body
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(head + piece * (LIMIT // len(chunk) + 1))
        t0 = time.time()
        out = read_response(c, 5)
        took = time.time() - t0
        hd = out.partition(b"\r\n\r\n")[0].lower()
        print(f"chunked body past the limit, rest unsent: {out[:40]!r} after {took:.2f} s")
        check(out.startswith(b"HTTP/1.1 413") and b'"payload_too_large"' in out and b"connection: close" in hd
              and b"x-request-id:" in hd, f"413 in JSON with Connection: close, before the body ends: {out[:200]!r}")
        check(took < 3, f"the 413 comes at once ({took:.2f} s)")
        check(closed_by_server(c), "then the server closes the connection")
        c.close()

        # 100 MB at full speed: answered once the limit is passed, not after reading it all
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.setblocking(False)
        c.sendall(head)
        sent, got, t0 = 0, b"", time.time()
        while sent < 100 << 20 and time.time() - t0 < 60 and b"\r\n\r\n" not in got:
            r, w, _ = select.select([c], [c], [], 1)
            try:
                if r:
                    data = c.recv(65536)
                    if not data:
                        break
                    got += data
                elif w:
                    sent += c.send(piece)
            except BlockingIOError:
                pass
            except OSError:
                break
        c.setblocking(True)
        got += read_response(c, 3) if b"\r\n\r\n" not in got else b""
        # what was sent before the answer: the limit plus the two sockets' buffers (a few MB on loopback)
        print(f"full-speed chunked upload: answered {got[:30]!r} after {sent / 2**20:.1f} MB sent")
        check(got.startswith(b"HTTP/1.1 413"), f"a 100 MB chunked upload gets its 413: {got[:80]!r}")
        check(sent < 24 << 20, f"answered while the client had sent {sent / 2**20:.1f} MB, not after reading 64 MB")
        c.close()
        s, _, _ = http(srv.base, "GET", "/health")
        check(s == 200, f"still serving: {s}")
    finally:
        rc = srv.stop()
    check(rc == 0, f"chunked server exit code {rc}")


def main():
    d = workdir("slots")
    _, ix, _ = build_indexes(d, n_docs=20, bm25=False)
    chunked_413()
    idle_keepalive(ix)
    finish()


if __name__ == "__main__":
    main()
