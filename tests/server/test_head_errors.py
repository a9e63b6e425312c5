"""Request heads the HTTP library would answer by itself, in HTML: each one
must get the server's JSON error family instead ({"error": {"code",
"type", "message"}}, Content-Type application/json, the connection closed).
Good heads (pipelined, keep-alive, HTTP/1.0, a leading empty line) must
still be served. Loopback only, bounded.

Run with --table to print every probe's status and Content-Type."""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import Contract, Server, accept_backlog, check, finish, metric, wait_until  # noqa: E402

TABLE = "--table" in sys.argv
MAX_HEAD = 16384  # the default --max-head-bytes
# the server's state is polled for, never assumed after a fixed sleep: on a
# loaded machine it may not run for seconds
DEADLINE = 120


def exchange(port, data, timeout=5.0):
    """Send raw bytes (the server may stop reading early); return all it
    answered until it closed, and whether it closed within the timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return read_until_close(s, timeout)


def read_until_close(s, timeout):
    """Everything s receives within timeout, and whether the peer closed
    the connection (s is closed after)."""
    out, closed = b"", False
    end = time.time() + timeout
    while time.time() < end:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        out += chunk
    s.close()
    return out, closed


def parse(out):
    """(status, content type, body) of the first response in out."""
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split(b" ")[1])
    except (IndexError, ValueError):
        status = 0
    ctype = ""
    for ln in lines[1:]:
        k, _, v = ln.partition(b":")
        if k.strip().lower() == b"content-type":
            ctype = v.strip().decode("latin-1")
    return status, ctype, body


H = b"Host: x\r\n"
big_target = b"/health?x=" + b"a" * (200 * 1024)
# A chunked body sent with its head (one write) is checked with it.
chunked_head = b"POST /tokenize HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
big_headers = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"b" * 1000) for i in range(200))
probes = [
    # (what, bytes, expected status, expected error type)
    ("request line without version", b"GET /health\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("request line, two spaces", b"GET  /health HTTP/1.1\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("request line, lowercase version", b"GET /health http/1.1\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("request line, version HTTP/1.10", b"GET /health HTTP/1.10\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("empty method", b" /health HTTP/1.1\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("method with a control byte", b"G\x01T /health HTTP/1.1\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("target with a control byte", b"GET /hea\x7flth HTTP/1.1\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("target with a raw non-ASCII byte", b"GET /h\xc3\xa9 HTTP/1.1\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("a TLS ClientHello", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 64, 400, "invalid_request"),
    ("header name with a space", b"GET /health HTTP/1.1\r\n" + H + b"Bad Name: y\r\n\r\n", 400, "invalid_request"),
    ("space before the colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400, "invalid_request"),
    ("header line without a colon", b"GET /health HTTP/1.1\r\n" + H + b"X-No-Colon\r\n\r\n", 400,
     "invalid_request"),
    ("obsolete line folding", b"GET /health HTTP/1.1\r\n" + H + b"X-A: a\r\n  folded\r\n\r\n", 400,
     "invalid_request"),
    ("whitespace before the first header", b"GET /health HTTP/1.1\r\n " + H + b"\r\n", 400, "invalid_request"),
    ("NUL in a header value", b"GET /health HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n", 400, "invalid_request"),
    ("bare LF line ends", b"GET /health HTTP/1.1\n" + H.replace(b"\r", b"") + b"\n", 400, "invalid_request"),
    ("bare CR in the request line", b"GET /health HTTP/1.1\rX: y\r\n" + H + b"\r\n", 400, "invalid_request"),
    ("bare CR in a header", b"GET /health HTTP/1.1\r\n" + H + b"X-A: a\rb\r\n\r\n", 400, "invalid_request"),
    ("HTTP/1.1 without Host", b"GET /health HTTP/1.1\r\nX-A: a\r\n\r\n", 400, "invalid_request"),
    ("two Host headers", b"GET /health HTTP/1.1\r\n" + H + H + b"\r\n", 400, "invalid_request"),
    ("Content-Length not a number", b"POST /search HTTP/1.1\r\n" + H + b"Content-Length: abc\r\n\r\n", 400,
     "invalid_request"),
    ("negative Content-Length", b"POST /search HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n", 400,
     "invalid_request"),
    ("Content-Length past 64 bits", b"POST /search HTTP/1.1\r\n" + H + b"Content-Length: " + b"9" * 30 + b"\r\n\r\n",
     413, "payload_too_large"),
    ("two equal Content-Length headers", b"POST /search HTTP/1.1\r\n" + H +
     b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400, "invalid_request"),
    ("Transfer-Encoding other than chunked", b"POST /search HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip\r\n\r\n",
     501, "not_implemented"),
    ("Transfer-Encoding on HTTP/1.0", b"POST /search HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
     "invalid_request"),
    ("HTTP/2.0", b"GET /health HTTP/2.0\r\n" + H + b"\r\n", 505, "invalid_request"),
    ("HTTP/0.9 version", b"GET /health HTTP/0.9\r\n" + H + b"\r\n", 505, "invalid_request"),
    ("HTTP/3.0", b"GET /health HTTP/3.0\r\n" + H + b"\r\n", 505, "invalid_request"),
    ("HTTP/2 prior-knowledge preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "invalid_request"),
    ("a 200 KB request target", b"GET " + big_target + b" HTTP/1.1\r\n" + H + b"\r\n", 414, "invalid_request"),
    ("200 KB of headers", b"GET /health HTTP/1.1\r\n" + H + big_headers + b"\r\n", 431, "invalid_request"),
    ("200 headers of 10 bytes", b"GET /health HTTP/1.1\r\n" + H +
     b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n", 431, "invalid_request"),
    ("chunked: a malformed chunk size", chunked_head + b"zz\r\nab\r\n0\r\n\r\n", 400, "invalid_request"),
    ("chunked: a chunk size past 64 bits", chunked_head + b"f" * 21 + b"\r\n", 413, "payload_too_large"),
    ("chunked: whitespace before an extension", chunked_head + b"2 ;x\r\n{}\r\n0\r\n\r\n", 400, "invalid_request"),
    ("chunked: a bare LF after the size", chunked_head + b"2\n{}\r\n0\r\n\r\n", 400, "invalid_request"),
    ("chunked: data not followed by CRLF", chunked_head + b"2\r\n{}xx0\r\n\r\n", 400, "invalid_request"),
    ("chunked: a trailer line without a colon", chunked_head + b"0\r\nBad Trailer\r\n\r\n", 400, "invalid_request"),
    ("a head that never ends within the limit", b"GET /health HTTP/1.1\r\n" + H + b"X-A: " +
     b"z" * (2 * MAX_HEAD), 431, "invalid_request"),
]

contract = Contract()
srv = Server("--header-timeout-ms", "3000")
port = int(srv.base.rsplit(":", 1)[1])
if TABLE:
    print(f"{'probe':45} status  content-type")
for what, data, want, etype in probes:
    t0 = time.time()
    out, closed = exchange(port, data)
    took = time.time() - t0
    st, ctype, body = parse(out)
    if TABLE:
        print(f"{what:45} {st:6}  {ctype or '-'}")
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        err = None
    check(b"\r\ndate: " in out.partition(b"\r\n\r\n")[0].lower(), f"{what}: the answer has a Date header")
    check(st == want and ctype.startswith("application/json") and isinstance(err, dict) and
          err.get("code") == want and err.get("type") == etype and isinstance(err.get("message"), str),
          f"{what}: want JSON {want} {etype}, got {st} {ctype!r}: {out[:200]!r}")
    if err is not None:  # an error that answers any path: the Error schema
        contract.validate("GET", "/no-such-route", st, json.loads(body))
    check(closed and took < 4.0, f"{what}: the connection is closed after the error ({took:.1f} s, closed {closed})")

# ---- good heads are still served ----
out, _ = exchange(port, b"GET /health HTTP/1.1\r\n" + H + b"\r\nGET /info HTTP/1.1\r\n" + H +
                  b"Connection: close\r\n\r\n")
check(out.count(b"HTTP/1.1 200") == 2, f"two pipelined requests: two answers: {out[:80]!r}")
out, _ = exchange(port, b"\r\nGET /health HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n")
check(out.startswith(b"HTTP/1.1 200"), f"an empty line before the request line is ignored: {out[:40]!r}")
out, _ = exchange(port, b"GET /health HTTP/1.0\r\n\r\n")
check(out.startswith(b"HTTP/1.") and b" 200 " in out[:16], f"HTTP/1.0 without Host: {out[:40]!r}")
out, _ = exchange(port, b"GET /health HTTP/1.1\r\nhOsT:x\r\nX-Tab:\ta\tb\t\r\nX-Obs: caf\xe9\r\n"
                        b"Connection: close\r\n\r\n")
check(out.startswith(b"HTTP/1.1 200"), f"OWS, tabs and obs-text in values: {out[:40]!r}")
body = b'{"texts":["a"]}'
out, _ = exchange(port, b"POST /tokenize HTTP/1.1\r\n" + H + b"Transfer-Encoding: Chunked\r\nConnection: close\r\n\r\n"
                  + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
check(out.startswith(b"HTTP/1.1 200"), f"a chunked body: {out[:40]!r}")
out, _ = exchange(port, b"POST /tokenize HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                  + b"%x;name=value\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n" % (len(body), body))
check(out.startswith(b"HTTP/1.1 200"), f"a chunked body with an extension and a trailer: {out[:40]!r}")
# keep-alive: three requests on one connection, each sent after the answer
s = socket.create_connection(("127.0.0.1", port), timeout=5)
answers = 0
for i in range(3):
    s.sendall(b"GET /health HTTP/1.1\r\n" + H + b"\r\n")
    got = b""
    while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < int(
            [ln for ln in got.partition(b"\r\n\r\n")[0].split(b"\r\n") if ln.lower().startswith(b"content-length")]
            [0].split(b":")[1]):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    answers += got.startswith(b"HTTP/1.1 200")
s.close()
check(answers == 3, f"three requests on one keep-alive connection: {answers} answered")
# A head sent a byte at a time, under the head deadline, is served.
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for b in b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n":
    s.send(bytes([b]))
    time.sleep(0.005)
got = s.recv(65536)
s.close()
check(got.startswith(b"HTTP/1.1 200"), f"a head sent byte by byte: {got[:40]!r}")


# ---- later heads on a keep-alive connection (sent after the previous answer) ----
def read_response(sock):
    """One response with a Content-Length body; returns its bytes."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    n = [int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")][0]
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


def keepalive_then(port, firsts, bad):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    oks = 0
    for first in firsts:
        s.sendall(first)
        oks += read_response(s).startswith(b"HTTP/1.1 200")
    try:
        s.sendall(bad)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out, closed = b"", False
    end = time.time() + 5
    while time.time() < end:
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        out += chunk
    s.close()
    return oks, out, closed


get = b"GET /health HTTP/1.1\r\n" + H + b"\r\n"
tok = b'{"texts":["a b"]}'
post = b"POST /tokenize HTTP/1.1\r\n" + H + b"Content-Length: %d\r\n\r\n%s" % (len(tok), tok)
for what, firsts, bad, want in (
        ("a header line without a colon", [get], b"GET /health HTTP/1.1\r\n" + H + b"X-No-Colon\r\n\r\n", 400),
        ("HTTP/2.0", [get], b"GET /health HTTP/2.0\r\n" + H + b"\r\n", 505),
        ("obsolete line folding after a POST", [post], b"GET /health HTTP/1.1\r\n" + H + b"X-A: a\r\n b\r\n\r\n",
         400),
        ("a bare LF after three requests", [get, post, get], b"GET /health HTTP/1.1\n" + H + b"\r\n", 400),
        ("a 200 KB request target", [b"GET /health HTTP/1.1\r\n" + H + b"Connection: keep-alive\r\n\r\n"],
         b"GET " + big_target + b" HTTP/1.1\r\n" + H + b"\r\n", 414)):
    oks, out, closed = keepalive_then(port, firsts, bad)
    st, ctype, body = parse(out)
    if TABLE:
        print(f"{'keep-alive, then ' + what:45} {st:6}  {ctype or '-'}")
    check(oks == len(firsts) and st == want and ctype.startswith("application/json") and body.startswith(b'{"error"')
          and closed, f"keep-alive, then {what}: want JSON {want}, got {oks} answers, then {out[:160]!r} "
          f"(closed {closed})")

# ---- pipelined: behind good requests, a bad head is never parsed by the
# library: the answer before it closes the connection (a client retries the
# rest on a new connection, where it gets the JSON error) ----
def statuses(out):
    """[(status, content type)] of every response in out (each has a Content-Length)."""
    res = []
    while out:
        st, ctype, body = parse(out)
        head = out.partition(b"\r\n\r\n")[0]
        n = [int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
        res.append((st, ctype.split(";")[0]))
        if not n:
            break
        out = body[n[0]:]
    return res


J = "application/json"
nocolon = b"GET /health HTTP/1.1\r\n" + H + b"NoColon\r\n\r\n"
for what, data, want in (
        ("good, then no colon", get + nocolon, [(200, J)]),
        ("good, then HTTP/2.0", get + b"GET /health HTTP/2.0\r\n" + H + b"\r\n", [(200, J)]),
        ("POST, good, then obsolete folding", post + get + b"GET /health HTTP/1.1\r\n" + H + b"X: a\r\n b\r\n\r\n",
         [(200, J), (200, J)]),
        # a connection that carries a chunked body is relayed (srv_relay.c):
        # the invalid request is answered too, after the ones before it
        ("chunked POST, then no colon", chunked_head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(tok), tok) + nocolon,
         [(200, J), (400, J)]),
        ("good, then a malformed chunked body", get + chunked_head + b"zz\r\n", [(200, J), (400, J)])):
    out, closed = exchange(port, data)
    got = statuses(out)
    if TABLE:
        print(f"{'pipelined: ' + what:45} {' | '.join(f'{a} {b}' for a, b in got)}")
    last_head = out[out.rfind(b"HTTP/1.1 "):].partition(b"\r\n\r\n")[0].lower()
    check(got == want and closed and b"connection: close" in last_head and b"<html" not in out,
          f"pipelined {what}: want {want} then close, got {got} (closed {closed}): {out[-200:]!r}")
# the same burst after a first request on the connection
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(get)
first = read_response(s)
s.sendall(get + nocolon)
out, end = b"", time.time() + 5
while time.time() < end:
    try:
        chunk = s.recv(65536)
    except (socket.timeout, ConnectionResetError):
        break
    if not chunk:
        break
    out += chunk
s.close()
got = statuses(out)
if TABLE:
    print(f"{'keep-alive, then pipelined good + no colon':45} {' | '.join(f'{a} {b}' for a, b in got)}")
check(first.startswith(b"HTTP/1.1 200") and got == [(200, J)] and b"<html" not in out,
      f"keep-alive, then pipelined good + no colon: {got}: {out[-200:]!r}")

# ---- chunked bodies that come after their head (issue 38): the library used
# to read these by its own rules, answering a long extension with its HTML
# 500 and a long trailer with its HTML 431, taking sizes padded with any
# number of zeros (711 MB of wire for 177 KB of body) and a bare LF that the
# same line within the head's bytes was refused for. Each request's head is
# sent first and its body once the request is in flight, so that no peek at
# the head can see the body. ----
def inflight():
    return metric(srv.base, "qac_inflight_requests") or 0


def late_body(port, head, body, before=b""):
    """Send head, wait until the request is in flight, then send body (in
    pieces); return the answer to the request after `before` (sent first on
    the same connection, answered), and whether the connection closed."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    prior = b""
    if before:
        s.sendall(before)
        prior = read_response(s)
    s.sendall(head)
    wait_until(lambda: inflight() >= 2, DEADLINE, 0.02)  # this request, and the probe's own
    try:
        for i in range(0, len(body), 65536):
            s.sendall(body[i:i + 65536])
    except (BrokenPipeError, ConnectionResetError):
        pass
    return (prior, *read_until_close(s, 10))


tok_body = b'{"texts":["a b c"]}'
late_head = b"POST /tokenize HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
for what, body, want, etype, before in (
        ("a 200 KB chunk extension", b"2;" + b"e" * (200 * 1024) + b"\r\n{}\r\n0\r\n\r\n", 400, "invalid_request",
         b""),
        ("a 200 KB trailer", b"%x\r\n%s\r\n0\r\nX-T: " % (len(tok_body), tok_body) + b"t" * (200 * 1024) +
         b"\r\n\r\n", 431, "invalid_request", b""),
        ("a chunk size padded with 5,000 zeros", b"0" * 5000 + b"%x\r\n%s\r\n0\r\n\r\n" % (len(tok_body), tok_body),
         400, "invalid_request", b""),
        ("a bare LF after the chunk size", b"%x\n%s\r\n0\r\n\r\n" % (len(tok_body), tok_body), 400,
         "invalid_request", b""),
        ("2.4 MB of extensions for 600 bytes of body", b"".join(b"1;" + b"x" * 4000 + b"\r\n \r\n" for _ in range(600))
         + b"0\r\n\r\n", 413, "payload_too_large", b""),
        ("a bare LF, on a kept-alive connection", b"%x\n%s\r\n0\r\n\r\n" % (len(tok_body), tok_body), 400,
         "invalid_request", post)):
    prior, out, closed = late_body(port, late_head, body, before)
    st, ctype, payload = parse(out)
    if TABLE:
        print(f"{'chunked, late: ' + what:45} {st:6}  {ctype or '-'}")
    try:
        err = json.loads(payload)["error"]
    except (ValueError, KeyError, TypeError):
        err = None
    check((not before or prior.startswith(b"HTTP/1.1 200")) and st == want and ctype.startswith("application/json")
          and isinstance(err, dict) and err.get("code") == want and err.get("type") == etype and closed
          and b"<html" not in out.lower(),
          f"chunked body after its head, {what}: want JSON {want} {etype} and close, got {out[:200]!r} "
          f"(closed {closed})")
# A good chunked body in small pieces after its head, with extensions and
# a trailer, is answered as the same body with a Content-Length is.
pieces = b"".join(b"%x;n=%d\r\n%s\r\n" % (len(tok_body[i:i + 3]), i, tok_body[i:i + 3])
                  for i in range(0, len(tok_body), 3)) + b"0\r\nX-Trailer: t\r\n\r\n"
_, out, _ = late_body(port, late_head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"), pieces)
ref, _ = exchange(port, b"POST /tokenize HTTP/1.1\r\n" + H + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(tok_body), tok_body))
check(parse(out)[0] == 200 and parse(out)[2] == parse(ref)[2],
      f"a good chunked body in pieces after its head: {out[:120]!r} vs {ref[:120]!r}")
# and a keep-alive connection goes on after a relayed chunked request
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(late_head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(tok_body), tok_body))
a1 = read_response(s)
s.sendall(get)
a2 = read_response(s)
s.close()
check(a1.startswith(b"HTTP/1.1 200") and a2.startswith(b"HTTP/1.1 200"),
      f"a chunked request, then another on the same connection: {a1[:40]!r} {a2[:40]!r}")
check(wait_until(lambda: inflight() <= 1, DEADLINE), "no request left in flight after the chunked probes")

rc = srv.stop()
check(rc == 0, f"the server exits cleanly: {rc}")

# ---- connections at --max-connections: 503 in JSON, but /health still answers ----
small = Server("--max-connections", "16", "--min-body-rate", "0", "--body-timeout-ms", "20000")
sport = int(small.base.rsplit(":", 1)[1])
held = []
for i in range(16):  # heads in, bodies pending: each holds a connection of the library
    c = socket.create_connection(("127.0.0.1", sport), timeout=5)
    c.sendall(b"POST /tokenize HTTP/1.1\r\n" + H + b"Content-Length: 100\r\n\r\n{")
    held.append(c)
# every one in flight (its head read by the library); the probe counts itself
check(wait_until(lambda: (metric(small.base, "qac_inflight_requests") or 0) >= 17, DEADLINE, 0.1),
      "the 16 requests with pending bodies are in flight")
out, closed = exchange(sport, b"POST /tokenize HTTP/1.1\r\n" + H + b"Content-Length: 2\r\n\r\n{}")
st, ctype, body = parse(out)
if TABLE:
    print(f"{'at --max-connections: POST /tokenize':45} {st:6}  {ctype or '-'}")
check(st == 503 and ctype.startswith("application/json") and b'"unavailable"' in body and closed,
      f"at --max-connections, a request gets JSON 503: {out[:200]!r}")
for path in (b"/health", b"/metrics"):
    out, _ = exchange(sport, b"GET " + path + b" HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n")
    if TABLE:
        print(f"{'at --max-connections: GET ' + path.decode():45} {parse(out)[0]:6}  {parse(out)[1] or '-'}")
    check(out.startswith(b"HTTP/1.1 200"), f"at --max-connections, {path.decode()} still answers: {out[:80]!r}")
# --max-connections heads still arriving wait at the gate; one more
# connection makes the oldest of them go, and is served.
slow = []
for i in range(16):
    c = socket.create_connection(("127.0.0.1", sport), timeout=5)
    c.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
    slow.append(c)
# all 16 accepted by the gate (a probe request would be one more connection)
check(wait_until(lambda: accept_backlog(sport) == 0, DEADLINE), "the gate accepted the 16 slow heads")
out, _ = exchange(sport, b"GET /health HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n")
check(out.startswith(b"HTTP/1.1 200"), f"with --max-connections heads waiting, one more is served: {out[:60]!r}")
slow[0].settimeout(2)
try:
    evicted = slow[0].recv(1) == b""
except ConnectionResetError:
    evicted = True
except socket.timeout:
    evicted = False
check(evicted, "the oldest waiting head made room")
for c in held + slow:
    c.close()
rc = small.stop()
check(rc == 0, f"the small server exits cleanly: {rc}")
finish()
