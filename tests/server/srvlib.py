"""Helpers for the server integration tests: a small Cranfield index, a
real `qac serve` on a free port, and OpenAPI response validation."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import jsonschema_rs
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402
import testdata  # noqa: E402

QAC = os.environ.get("QAC_BIN", "qac")
SHARED = testdata.root()
SOURCE = os.environ.get("QAC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
CRAN_DOCS = os.path.join(SHARED, "cranfield", "cran.all.1400")
CRAN_QUERIES = os.path.join(SHARED, "cranfield", "cran.qry")

failures = []


def check(cond, msg):
    if cond:
        return True
    failures.append(msg)
    print("FAIL:", msg, file=sys.stderr)
    return False


def finish():
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        sys.exit(1)
    print("all checks passed")


def workdir(tag):
    return scratch.mkdtemp(prefix=f"qac-srv-{tag}-")


def cranfield_subset(out_path, n_docs):
    """The first n_docs Cranfield documents, as a Cranfield file."""
    return testdata.cranfield_subset(out_path, n_docs)


def build_indexes(d, n_docs=60, bm25=True):
    corpus = cranfield_subset(os.path.join(d, "corpus.all"), n_docs)
    ix = os.path.join(d, "index")
    subprocess.run([QAC, "index", "build", "--corpus", corpus, "--format", "cranfield", "--out", ix,
                    "--max-len", "128"], check=True, stdout=subprocess.DEVNULL)
    bm = None
    if bm25:
        bm = os.path.join(d, "bm25")
        subprocess.run([QAC, "bm25", "build", "--corpus", corpus, "--out", bm], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return corpus, ix, bm


class Server:
    """`qac serve` on a free port; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, *args, env=None, wait=True):
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen([QAC, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=e, text=True)
        self.base = None
        if wait:
            line = self.proc.stdout.readline()
            m = re.search(r"listening on (http://\S+)", line)
            if not m:
                err = self.proc.stderr.read()
                raise RuntimeError(f"server did not start: {line!r} {err}")
            self.base = m.group(1)

    def stop(self, timeout=300):  # generous: a drain on a loaded machine
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
            if rc != 0:  # show why (sanitizer reports land here)
                sys.stderr.write(self.proc.stderr.read()[-6000:])
            return rc
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def http(base, method, path, body=None, headers=None, raw=None, timeout=120):
    """Returns (status, headers, parsed JSON or text)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, hdrs, payload = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, payload = e.code, e.headers, e.read()
    ctype = hdrs.get("Content-Type", "")
    if ctype.startswith("application/json"):
        return status, hdrs, json.loads(payload)
    return status, hdrs, payload.decode("utf-8", "replace")


class Contract:
    """Validates responses against api/openapi.yaml (jsonschema_rs)."""

    def __init__(self):
        with open(os.path.join(SOURCE, "api", "openapi.yaml"), encoding="utf-8") as f:
            self.spec = yaml.safe_load(f)
        self.cache = {}

    def schema_for(self, method, path, status):
        op = self.spec["paths"][path][method.lower()]
        resp = op["responses"].get(str(status))
        if resp is None:
            return None
        if "$ref" in resp:
            resp = self.spec["components"]["responses"][resp["$ref"].split("/")[-1]]
        content = resp.get("content", {})
        media = content.get("application/json")
        return media["schema"] if media else None

    def validate(self, method, path, status, body):
        if path.split("?")[0] not in self.spec["paths"]:
            schema = {"$ref": "#/components/schemas/Error"}
        else:
            op = self.spec["paths"][path.split("?")[0]].get(method.lower())
            if op is None:
                schema = {"$ref": "#/components/schemas/Error"}
            else:
                if str(status) not in op["responses"]:
                    return check(False, f"{method} {path}: status {status} is not in the contract")
                schema = self.schema_for(method, path.split("?")[0], status)
        if schema is None:
            return True
        key = json.dumps(schema, sort_keys=True)
        if key not in self.cache:
            root = dict(schema)
            root["components"] = self.spec["components"]
            self.cache[key] = jsonschema_rs.validator_for(root)
        errs = [e.message for e in self.cache[key].iter_errors(body)]
        return check(not errs, f"{method} {path} {status}: response breaks the contract: {errs[:3]}")


def is_sanitized_binary():
    """ASan builds keep freed memory in quarantine, so RSS checks are looser there."""
    try:
        with open(shutil.which(QAC) or QAC, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


def metric(base, name):
    """The value of an unlabelled metric on /metrics (None if absent)."""
    _, _, text = http(base, "GET", "/metrics")
    for line in text.splitlines() if isinstance(text, str) else ():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def wait_until(pred, timeout=10.0, step=0.05):
    """Poll pred until it is true (True) or timeout seconds pass (False)."""
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def accept_backlog(port):
    """Connections in the kernel's accept queue of the socket listening on
    port, not yet accepted by the server (None: no such socket)."""
    found = None
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                rows = [ln.split() for ln in f.readlines()[1:]]
        except OSError:
            continue
        for r in rows:  # sl local rem st tx_queue:rx_queue ...; a listener's rx_queue is its accept queue
            if len(r) > 4 and r[3] == "0A" and int(r[1].rsplit(":", 1)[1], 16) == port:
                found = (found or 0) + int(r[4].split(":")[1], 16)
    return found
