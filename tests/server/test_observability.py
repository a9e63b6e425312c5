"""What an operator sees of `qac serve`:

  access log      one line per request on stderr (method, path, status, bytes,
                  duration, request id, client), as JSON objects or text, at
                  --log-level info; the request id also in the X-Request-Id
                  response header, the client's own when valid; requests the
                  connection gate or a mid-body 413 answers are logged too
  listening       the address announced once (stdout), not twice
  /metrics        the standard process metrics equal what psutil reads of the
                  same process, the exposition parses with prometheus_client,
                  and a build-info metric names the version
  --help          lists --log-level and --log-format
"""
import json
import os
import re
import socket
import subprocess
import sys
import time

import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import QAC, Server, check, finish, http, wait_until  # noqa: E402

RID = re.compile(r"^[0-9a-f]{32}$")  # the server's own request ids


def raw(port, data, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except OSError:
        pass
    s.close()
    return out


def header(out, name):
    for line in out.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name.lower():
            return v.strip().decode()
    return None


def exercise(srv):
    """Requests of every kind; returns what each access line must say."""
    port = int(srv.base.rsplit(":", 1)[1])
    want = []
    s, h, _ = http(srv.base, "GET", "/health", headers={"X-Request-Id": "client-id.42:a/b"})
    check(h.get("X-Request-Id") == "client-id.42:a/b", f"a valid client id is kept: {h.get('X-Request-Id')}")
    want.append(("GET", "/health", 200, "client-id.42:a/b"))
    for bad in ("has space", "x" * 129, "semi;colon"):
        s, h, _ = http(srv.base, "GET", "/health", headers={"X-Request-Id": bad})
        rid = h.get("X-Request-Id", "")
        check(RID.match(rid) is not None, f"an invalid client id {bad[:20]!r} is replaced: {rid!r}")
        want.append(("GET", "/health", 200, rid))
    s, h, body = http(srv.base, "POST", "/encode", {"texts": ["boundary layer"]})
    check(s == 200, f"/encode {s}")
    want.append(("POST", "/encode", 200, h.get("X-Request-Id")))
    s, h, _ = http(srv.base, "GET", "/nowhere")
    want.append(("GET", "/nowhere", 404, h.get("X-Request-Id")))
    r = requests.head(srv.base + "/health", timeout=30)
    want.append(("HEAD", "/health", 200, r.headers.get("X-Request-Id")))
    out = raw(port, b"GARBAGE\r\n\r\n")  # answered by the connection gate
    check(out.startswith(b"HTTP/1.1 400") and header(out, b"X-Request-Id"), f"the gate's answer has an id: {out[:200]!r}")
    want.append(("-", "-", 400, header(out, b"X-Request-Id")))
    out = raw(port, b"POST /encode HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
              (b"2000\r\n" + b"a" * 8192 + b"\r\n") * 9)  # past --max-body-bytes 65536: answered mid-body
    check(out.startswith(b"HTTP/1.1 413") and header(out, b"X-Request-Id"), f"a mid-body 413 has an id: {out[:200]!r}")
    want.append(("POST", "/encode", 413, header(out, b"X-Request-Id")))
    ids = [w[3] for w in want]
    check(len(set(ids)) == len(ids), f"request ids are unique: {ids}")
    return want


def access_lines(stderr, json_format):
    lines = []
    for ln in stderr.splitlines():
        if json_format:
            try:
                o = json.loads(ln)
            except ValueError:
                check(False, f"a log line that is not JSON: {ln!r}")
                continue
            check({"ts", "level", "msg"} <= set(o), f"a JSON log line without ts/level/msg: {ln!r}")
            if o.get("msg") == "request":
                lines.append(o)
        else:
            m = re.match(r"^\S+Z qac serve info: request (.*)$", ln)
            if m:
                lines.append({k: v for k, v in (kv.split("=", 1) for kv in m.group(1).split())})
    return lines


def check_log(fmt):
    srv = Server("--log-format", fmt, "--log-level", "info", "--max-body-bytes", "65536")
    try:
        want = exercise(srv)
    finally:
        rc = srv.stop()
    out, err = srv.proc.stdout.read(), srv.proc.stderr.read()
    check(rc == 0, f"{fmt}: exit code {rc}")
    lines = access_lines(err, fmt == "json")
    print(f"{fmt}: {len(lines)} access lines for {len(want)} requests; first: {lines[:1]}")
    check(len(lines) == len(want), f"{fmt}: one access line per request ({len(lines)} for {len(want)})")
    by_id = {str(ln.get("request_id")): ln for ln in lines}
    for method, path, status, rid in want:
        ln = by_id.get(rid)
        ok = ln is not None and ln["method"] == method and ln["path"] == path and int(ln["status"]) == status
        ok = ok and float(ln["duration_ms"]) >= 0 and int(ln["bytes"]) >= 0 and ln["client"] in ("127.0.0.1", "-")
        check(ok, f"{fmt}: the access line of {method} {path} ({status}, id {rid}): {ln}")
    head = next((ln for ln in lines if ln["method"] == "HEAD"), {})
    check(int(head.get("bytes", -1)) == 0, f"{fmt}: HEAD sends no body bytes: {head}")
    enc = next((ln for ln in lines if ln["path"] == "/encode" and int(ln["status"]) == 200), {})
    check(int(enc.get("bytes", 0)) > 1000, f"{fmt}: /encode's body bytes logged: {enc}")
    said = 1 + (out + err).count("listening on")  # Server() read the first stdout line, the handshake
    check(said == 1, f"{fmt}: 'listening on' said once, not {said} times")


def check_quiet():
    for args, env in ((["--log-level", "warn"], {}), ([], {"QAC_QUIET": "1"})):
        srv = Server(*args, env=env)
        try:
            http(srv.base, "GET", "/health")
        finally:
            rc = srv.stop()
        err = srv.proc.stderr.read()
        check(rc == 0 and "request" not in err, f"{args or env}: exit code {rc}, no access lines: {err[-300:]!r}")


def check_metrics():
    srv = Server()
    try:
        proc = psutil.Process(srv.proc.pid)
        sess = requests.Session()  # one kept-alive connection: the descriptor count holds still
        sess.get(srv.base + "/health", timeout=30)
        before = (proc.cpu_times(), proc.memory_info(), proc.num_fds())
        r = sess.get(srv.base + "/metrics", timeout=30)
        after = (proc.cpu_times(), proc.memory_info(), proc.num_fds())
        check(r.status_code == 200, f"/metrics {r.status_code}")
        fams = {f.name: f for f in text_string_to_metric_families(r.text)}  # raises on a malformed exposition
        val = {n: f.samples[0].value for n, f in fams.items() if f.samples}
        cpu = [t.user + t.system for t in (before[0], after[0])]
        # both read utime + stime of /proc/<pid>/stat, in clock ticks: the scrape lies between the two reads
        check(cpu[0] - 1e-9 <= val.get("process_cpu_seconds", -1) <= cpu[1] + 1e-9,
              f"process_cpu_seconds_total {val.get('process_cpu_seconds')} within psutil's {cpu}")
        # resident and virtual size move by the pages one scrape touches: allow 1 MiB either side
        rss = [m.rss for m in (before[1], after[1])]
        check(min(rss) - (1 << 20) <= val.get("process_resident_memory_bytes", -1) <= max(rss) + (1 << 20),
              f"process_resident_memory_bytes {val.get('process_resident_memory_bytes')} vs psutil {rss}")
        vms = [m.vms for m in (before[1], after[1])]
        check(min(vms) - (1 << 20) <= val.get("process_virtual_memory_bytes", -1) <= max(vms) + (1 << 20),
              f"process_virtual_memory_bytes {val.get('process_virtual_memory_bytes')} vs psutil {vms}")
        fds = [before[2], after[2]]
        check(min(fds) <= val.get("process_open_fds", -1) <= max(fds),
              f"process_open_fds {val.get('process_open_fds')} vs psutil {fds}")
        check(val.get("process_max_fds") == proc.rlimit(psutil.RLIMIT_NOFILE)[0],
              f"process_max_fds {val.get('process_max_fds')} vs {proc.rlimit(psutil.RLIMIT_NOFILE)}")
        # boot time + start ticks, printed to 15 digits (1e-5 s at this magnitude)
        check(abs(val.get("process_start_time_seconds", 0) - proc.create_time()) < 1e-4,
              f"process_start_time_seconds {val.get('process_start_time_seconds')} vs psutil {proc.create_time()}")
        print("process metrics:", {k: v for k, v in val.items() if k.startswith("process_")})
        build = fams.get("qac_build_info")
        labels = build.samples[0].labels if build and build.samples else {}
        _, _, info = http(srv.base, "GET", "/info")
        check(build is not None and build.samples[0].value == 1 and labels.get("version") == info["version"] and
              labels.get("cuda") in ("yes", "no") and labels.get("compiler"),
              f"qac_build_info names the version {info['version']}: {labels}")
        # issue 38: qac_build_info{cuda="yes"} beside `qac --version` saying "cuda: no" (one meant compiled in,
        # the other a usable GPU). Both now say both, and agree.
        version = subprocess.run([QAC, "--version"], capture_output=True, text=True).stdout
        built = "CUDA compiled in" in version
        usable = "a usable GPU" in version and "no usable GPU" not in version
        gpu = fams.get("qac_cuda_gpu_available")
        check(built == (labels.get("cuda") == "yes") and gpu is not None and gpu.samples[0].value == float(usable)
              and (built or not usable), f"qac --version {version.strip()!r} agrees with qac_build_info {labels} "
              f"and qac_cuda_gpu_available {gpu.samples[0].value if gpu else None}")
        # a client that leaves before its answer counts as code="499" (issue 38: it was code="other")
        def requests_total(code):
            text = sess.get(srv.base + "/metrics", timeout=30).text
            for f in text_string_to_metric_families(text):
                for smp in f.samples:
                    if smp.name == "qac_http_requests_total" and smp.labels == {"route": "/encode", "code": code}:
                        return smp.value
            return 0.0

        def tokens():
            text = sess.get(srv.base + "/metrics", timeout=30).text
            return [smp.value for f in text_string_to_metric_families(text) for smp in f.samples
                    if smp.name == "qac_batch_tokens_sum"][0]

        long_text = " ".join(["aerodynamic heating of a slender cone in hypersonic flow"] * 30)
        payload = json.dumps({"texts": [f"{i} {long_text}" for i in range(128)]}).encode()
        tok0 = tokens()
        c = socket.create_connection(("127.0.0.1", int(srv.base.rsplit(":", 1)[1])))
        c.sendall(b"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(payload) + payload)
        check(wait_until(lambda: tokens() > tok0, 120), "the bulk /encode is being encoded before its client leaves")
        c.close()
        check(wait_until(lambda: requests_total("499") == 1, 30) and requests_total("other") == 0,
              f"a client that left: code 499 {requests_total('499')}, other {requests_total('other')}")
    finally:
        rc = srv.stop()
    check(rc == 0, f"metrics server exit code {rc}")


def check_help():
    out = subprocess.run([QAC, "serve", "--help"], capture_output=True, text=True).stdout
    for flag in ("--log-level", "--log-format", "debug|info|warn|error", "text|json"):
        check(flag in out, f"qac serve --help lists {flag}")
    # an option's help may wrap onto following lines, up to the next option
    check(re.search(r"--max-texts\b(?:(?!\n  --).)*default: 2048", out, re.S) is not None,
          "qac serve --help: --max-texts default 2048")


def main():
    t0 = time.time()
    check_help()
    check_log("json")
    check_log("text")
    check_quiet()
    check_metrics()
    print(f"{time.time() - t0:.1f} s")
    finish()


if __name__ == "__main__":
    main()
