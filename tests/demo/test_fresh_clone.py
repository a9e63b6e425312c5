"""The main job in a clone with nothing beside it.

The repository is cloned into an empty temporary directory (the working
tree's uncommitted changes to tracked files applied on top), so there is no
../shared and QAC_DATA is unset; QAC_HOME is a fresh directory holding only
the default model (a link), and Cranfield's download address is a local
server that answers 404, so the run is the same with or without a network.
Then, in the clone:

1. scripts/demo.sh (QAC_BIN: the binary under test, no build) says in one
   line, before setup.sh reports, what is missing and how to get it, indexes
   the installed Debian packages and reaches a serving state. Checked against
   independent references: the corpus against /var/lib/dpkg/status parsed
   here, the printed nDCG@10 and MRR@10 against pytrec_eval on the demo's own
   run files, and the served top 10 against the dense run.
2. scripts/data.sh cranfield downloads Cranfield from a local server: a
   tarball with one byte changed is refused by its SHA-256 sums and leaves
   nothing behind; the real files are installed under QAC_HOME/data. A
   relative QAC_DATA is taken from where the command runs.
3. scripts/test.sh with no collection to be had (QAC_FETCH=0) stops at once
   with one line and builds nothing.
"""
import functools
import http.server
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402
import testdata  # noqa: E402
from testlib import check, finish  # noqa: E402

try:
    import pytrec_eval
except ImportError:  # the reference is required: a missing one is a failure
    print("FAIL: pytrec_eval is not installed (scripts/setup.sh --test)")
    sys.exit(1)

QAC = os.path.abspath(os.environ["QAC_BIN"])
SOURCE = os.environ.get("QAC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_model():
    """Where qac looks for the default model (qac_default_model_dir)."""
    home = os.environ.get("QAC_HOME") or os.path.join(os.environ["HOME"], ".local", "share", "qac")
    return os.environ.get("QAC_MODEL") or os.path.join(home, "models", "all-MiniLM-L6-v2")


class Files(http.server.BaseHTTPRequestHandler):
    """Serves self.server.files {path: bytes}; anything else is a 404."""

    def do_GET(self):
        body = self.server.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *a):
        pass


def serve_files(files):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    srv.files = files
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def tarball(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def dpkg_status():
    """Installed packages' (name, summary, long text) from dpkg's database,
    parsed here independently of scripts/data.sh's dpkg-query + awk."""
    out, rec, key = {}, {}, None
    with open("/var/lib/dpkg/status", encoding="utf-8", errors="replace") as f:
        for line in list(f) + ["\n"]:
            line = line.rstrip("\n")
            if not line:
                name, status = rec.get("Package"), rec.get("Status", "")
                desc = rec.get("Description", "")
                if name and status.split()[-1:] == ["installed"] and name not in out:
                    first, _, rest = desc.partition("\n")
                    words = [w for ln in rest.split("\n") if ln.strip() != "." for w in ln.split()]
                    if words and first.split():
                        out[name] = (" ".join(first.split()), " ".join(words))
                rec, key = {}, None
            elif line[0] in " \t" and key:
                rec[key] += "\n" + line
            else:
                key, _, v = line.partition(":")
                rec[key] = v.strip()
    return out


def metrics(qrels_path, run_path):
    qrels, run = {}, {}
    for line in open(qrels_path):
        q, _, d, r = line.split()
        qrels.setdefault(q, {})[d] = int(r)
    for line in open(run_path):
        q, _, d, rank, score, _ = line.split()
        if int(rank) <= 10:  # qac eval -M 10
            run.setdefault(q, {})[d] = float(score)
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recip_rank"})
    res = ev.evaluate(run)
    n = len(res)
    return (sum(v["ndcg_cut_10"] for v in res.values()) / n, sum(v["recip_rank"] for v in res.values()) / n)


tmp = scratch.mkdtemp(prefix="qac-fresh-")
clone = os.path.join(tmp, "qac")
r = subprocess.run(["git", "clone", "-q", "--no-hardlinks", SOURCE, clone], capture_output=True, text=True)
if not check(r.returncode == 0, f"git clone {SOURCE}: {r.stderr.strip()}"):
    sys.exit(1)
diff = subprocess.run(["git", "-C", SOURCE, "diff", "--binary", "HEAD"], capture_output=True).stdout
if diff:
    r = subprocess.run(["git", "-C", clone, "apply", "--binary", "-"], input=diff, capture_output=True)
    check(r.returncode == 0, "uncommitted changes applied to the clone: " + r.stderr.decode().strip())
check(not os.path.exists(os.path.join(tmp, "shared")), "nothing beside the clone")

home = os.path.join(tmp, "home")
os.makedirs(os.path.join(home, "models"))
model = default_model()
check(os.path.isfile(os.path.join(model, "model.safetensors")), f"default model at {model}")
os.symlink(model, os.path.join(home, "models", "all-MiniLM-L6-v2"))
nowhere, nowhere_url = serve_files({})
env = {k: v for k, v in os.environ.items() if k not in ("QAC_DATA", "QAC_SHARED_DATA", "QAC_MODEL", "QAC_FETCH")}
env.update(QAC_HOME=home, QAC_BIN=QAC, QAC_CRANFIELD_URL=nowhere_url + "/cran.tar.gz", QAC_THREADS="2")

# 1. the demo
port = free_port()
log_path = os.path.join(tmp, "demo.log")
t0 = time.time()
with open(log_path, "w") as log:
    demo = subprocess.Popen(["bash", os.path.join(clone, "scripts", "demo.sh")], cwd=tmp, stdout=log,
                            stderr=subprocess.STDOUT, env=dict(env, QAC_PORT=str(port)), start_new_session=True)
up = False
while time.time() - t0 < 300 and demo.poll() is None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            up = resp.status == 200
            break
    except OSError:
        time.sleep(0.5)
log = open(log_path).read()
check(up, f"demo serving after {time.time() - t0:.1f} s (exit status {demo.poll()})")
lines = log.splitlines()
demo_lines = [ln for ln in lines if ln.startswith("demo:")]
missing = [i for i, ln in enumerate(lines) if "no Cranfield collection" in ln]
check(len(missing) == 1, f"one line says Cranfield is missing: {missing}")
if missing:
    line = lines[missing[0]]
    check("QAC_DATA" in line and "cran.tar.gz" in line and "installed Debian packages" in line,
          "it says how to get it and what runs instead: " + line)
    setup = [i for i, ln in enumerate(lines) if ln.startswith("setup:")]
    check(bool(setup) and missing[0] < setup[0], "it comes before setup.sh (and so before any build)")

ddir = os.path.join(clone, "demo", "debian")
ref = dpkg_status()
corpus = dict(ln.rstrip("\n").split("\t", 1) for ln in open(os.path.join(ddir, "corpus.tsv"), encoding="utf-8"))
check(set(corpus) == set(ref), f"corpus: the {len(ref)} installed packages with a long description ({len(corpus)})")
bad = [n for n in ref if n in corpus and corpus[n] != ref[n][1]]
check(not bad, f"corpus texts equal dpkg's long descriptions ({len(bad)} differ: {bad[:3]})")
queries = dict(ln.rstrip("\n").split("\t", 1) for ln in open(os.path.join(ddir, "queries.tsv"), encoding="utf-8"))
check(set(queries.values()) == {s for s, _ in ref.values()}, f"one query per distinct summary ({len(queries)})")
qrels = {}
for ln in open(os.path.join(ddir, "qrels.txt")):
    q, _, d, _ = ln.split()
    qrels.setdefault(q, set()).add(d)
check(all(qrels[q] == {n for n, (s, _) in ref.items() if s == text} for q, text in queries.items()),
      "qrels: every package whose summary the query is")

scores = [ln for ln in demo_lines if "dense nDCG@10" in ln]
if check(len(scores) == 1, "one line of scores"):
    words = scores[0].split()
    for name in ("dense", "bm25"):
        nd, mrr = metrics(os.path.join(ddir, "qrels.txt"), os.path.join(clone, "demo", f"{name}.run"))
        at = words.index("dense" if name == "dense" else "BM25")
        got = (float(words[at + 2]), float(words[at + 4].rstrip(",")))
        # printed to 4 decimals: within half a unit of the last digit
        check(abs(got[0] - nd) <= 5e-5 and abs(got[1] - mrr) <= 5e-5,
              f"{name}: printed nDCG@10 {got[0]} MRR@10 {got[1]}, pytrec_eval {nd:.5f} {mrr:.5f}")

if up:
    qid = sorted(queries)[0]
    want = [ln.split()[2] for ln in open(os.path.join(clone, "demo", "dense.run")) if ln.split()[0] == qid][:10]
    req = urllib.request.Request(f"http://127.0.0.1:{port}/search", data=json.dumps(
        {"query": queries[qid], "k": 10}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        got = [h["docid"] for h in json.load(resp)["results"][0]]
    check(got == want, f"served top 10 for {queries[qid]!r} equal the dense run's")
if demo.poll() is None:
    os.killpg(demo.pid, signal.SIGTERM)
    try:
        demo.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGKILL)
        demo.wait()

# 2. the download, checked
cran = testdata.path("cranfield")
files = {f: open(os.path.join(cran, f), "rb").read() for f in ("cran.all.1400", "cran.qry", "cranqrel")}
spoiled = dict(files, **{"cran.qry": files["cran.qry"].replace(b"flow", b"flaw", 1)})
good, good_url = serve_files({"/bad.tar.gz": tarball(spoiled), "/cran.tar.gz": tarball(files)})
data_sh = os.path.join(clone, "scripts", "data.sh")
r = subprocess.run([data_sh, "cranfield"], capture_output=True, text=True, cwd=tmp,
                   env=dict(env, QAC_CRANFIELD_URL=good_url + "/bad.tar.gz"))
check(r.returncode == 1 and "SHA-256" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
      "a spoiled download is refused, in one line: " + r.stderr.strip())
check(not os.path.exists(os.path.join(home, "data", "cranfield")) and
      not [f for f in os.listdir(os.path.join(home, "data")) if f.startswith(".cranfield")], "and leaves nothing")
r = subprocess.run([data_sh, "cranfield"], capture_output=True, text=True, cwd=tmp,
                   env=dict(env, QAC_CRANFIELD_URL=f"{nowhere_url}/x {good_url}/cran.tar.gz"))
where = r.stdout.strip()
check(r.returncode == 0 and where == os.path.join(home, "data", "cranfield"), f"downloaded into {where}: {r.stderr}")
check(all(open(os.path.join(where, f), "rb").read() == b for f, b in files.items()), "the files are Cranfield's")
r = subprocess.run([data_sh, "cranfield"], capture_output=True, text=True, cwd=tmp, env=dict(env, QAC_FETCH="0"))
check(r.stdout.strip() == where, "found there next time without a download")
for rel, want in (("mine", "mine"), ("holder", os.path.join("holder", "cranfield"))):
    os.makedirs(os.path.join(tmp, want))
    for f, b in files.items():
        open(os.path.join(tmp, want, f), "wb").write(b)
    r = subprocess.run([data_sh, "cranfield"], capture_output=True, text=True, cwd=tmp,
                       env=dict(env, QAC_DATA=rel, QAC_FETCH="0"))
    check(r.stdout.strip() == os.path.join(tmp, want), f"QAC_DATA={rel} (relative to where it runs): {r.stdout.strip()}")
shutil.rmtree(os.path.join(home, "data"))

# 3. the test command without collections
r = subprocess.run([os.path.join(clone, "scripts", "test.sh")], capture_output=True, text=True, cwd=tmp,
                   env=dict(env, QAC_FETCH="0"), timeout=120)
err = r.stderr.strip().splitlines()
check(r.returncode == 1 and len(err) == 1 and "no Cranfield collection" in err[0],
      f"test.sh stops with one line (exit {r.returncode}): {err}")
check(not os.path.exists(os.path.join(clone, "build")), "and builds nothing")

nowhere.shutdown()
good.shutdown()
finish()
