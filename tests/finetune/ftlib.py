"""Independent references for the fine-tuning tests, written from the
rules in TRAINING.md and api/qac_finetune.h: the counter-based generator,
Tevatron's group sampling, the epoch order, XXH64 and mining; with
tests/testlib.py's checks, qac runner and tiny model."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testdata  # noqa: E402
from testlib import QAC, check, default_model_dir, failures, finish, run, tiny_model, toy_train  # noqa: E402,F401

SHARED = testdata.root()
CRAN = os.path.join(SHARED, "cranfield")
M = (1 << 64) - 1
STREAM_POS, STREAM_NEG, STREAM_REPL, STREAM_ORDER, STREAM_MINE = 0x46540001, 0x46540002, 0x46540003, 0x46540004, 0x46540005

# ---- qac_rng.h: splitmix64's finaliser, keys chained through it ----
def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def key(seed, a, b, c):
    k = mix((seed + 0x9E3779B97F4A7C15) & M)
    k = mix(k ^ ((a + 0x9E3779B97F4A7C15) & M))
    k = mix(k ^ ((b + 0x632BE59BD9B4E019) & M))
    return mix(k ^ ((c + 0x85157AF5) & M))


def below(k, ctr, n):
    return mix((k + (ctr + 1) * 0x9E3779B97F4A7C15) & M) % n


def shuffle(k, items):
    items = list(items)
    for i in range(len(items) - 1, 0, -1):
        j = below(k, i, i + 1)
        items[i], items[j] = items[j], items[i]
    return items


# ---- Tevatron sampling (TRAINING.md "Fine-tuning (Tevatron)") ----
def sample(seed, ex, epoch, npos, nneg, n):
    pos = ((key(seed, ex, STREAM_POS, 0) + epoch) & M) % npos   # (hash(example, seed) + epoch) mod n_pos
    k = n - 1
    if k <= 0 or nneg == 0:
        return pos, []
    if nneg < k:                                                 # too few: with replacement
        r = key(seed, ex, STREAM_REPL, epoch)
        return pos, [below(r, j, nneg) for j in range(k)]
    perm = shuffle(key(seed, ex, STREAM_NEG, 0), range(nneg))    # one fixed shuffle per example
    off = (epoch * k) % nneg                                     # window moves by n-1 per epoch, wrapping
    return pos, [perm[(off + j) % nneg] for j in range(k)]


def order(seed, epoch, n):
    return shuffle(key(seed, epoch, STREAM_ORDER, 0), range(n))


# ---- XXH64, seed 0 ----
P1, P2, P3, P4, P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161, 9650029242287828579,
                      2870177450012600261)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _round(acc, inp):
    return (_rotl((acc + inp * P2) & M, 31) * P1) & M


def xxh64(data):
    n, i = len(data), 0
    if n >= 32:
        v = [(P1 + P2) & M, P2, 0, (-P1) & M]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], int.from_bytes(data[i + 8 * j:i + 8 * j + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M
        for j in range(4):
            h = ((h ^ _round(0, v[j])) * P1 + P4) & M
    else:
        h = P5
    h = (h + n) & M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[i:i + 8], "little")), 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((int.from_bytes(data[i:i + 4], "little") * P1) & M), 23) * P2 + P3) & M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * P5) & M), 11) * P1) & M
        i += 1
    h = ((h ^ (h >> 33)) * P2) & M
    h = ((h ^ (h >> 29)) * P3) & M
    return h ^ (h >> 32)


assert xxh64(b"") == 0xEF46DB3751D8E999 and xxh64(b"abc") == 0x44BC2CF5AD770999


# ---- data helpers ----
def cranfield_docs():
    """id -> (title, body) as qac's reader: lines of .T and .W joined by spaces."""
    return {i: (" ".join(r.get("T", [])), " ".join(r.get("W", []))) for i, r in testdata.cranfield_records()}


def read_jsonl(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def mined_groups(p, docs, queries, qrels, n=16):
    """Training groups for the small runs: BM25's top 50 of every Cranfield
    query (p("bm25.run")), 5 negatives a query mined from them (qac mine),
    the first n groups in p("train.jsonl"), whose path it returns."""
    assert run(["bm25", "build", "--corpus", docs, "--out", p("bm25")]).returncode == 0
    assert run(["bm25", "search", "--index", p("bm25"), "--queries", queries, "--k", "50", "--run",
                p("bm25.run")]).returncode == 0
    r = run(["mine", "--run", p("bm25.run"), "--queries", queries, "--qrels", qrels, "--corpus", docs, "--n", "5",
             "--depth", "50", "--out", p("all.jsonl")])
    assert r.returncode == 0, r.stderr
    with open(p("all.jsonl")) as f, open(p("train.jsonl"), "w") as g:
        g.writelines(f.readlines()[:n])
    return p("train.jsonl")


def dev_set(p, qrels):
    """The dev set of the small runs: Cranfield queries 201-212 in
    p("dev.tsv") (id, tab, text), their judgements in p("dev.qrels")."""
    with open(p("dev.tsv"), "w") as f:
        qs = [t for _, t in testdata.cranfield_texts("cran.qry", "W")]
        for i in range(200, 212):
            f.write(f"{i + 1}\t{qs[i]}\n")
    with open(p("dev.qrels"), "w") as f:
        f.writelines(l for l in open(qrels) if 201 <= int(l.split()[0]) <= 212)


def latest(out):
    """The checkpoint a run directory's `latest` names."""
    return open(os.path.join(out, "latest")).read().strip()


def traj(out):
    """Every step's loss, rate and norm in log.jsonl, as the exact printed digits."""
    return [(l["step"], repr(l["loss"]), repr(l["lr"]), repr(l["grad_norm"])) for l in read_jsonl(os.path.join(out, "log.jsonl"))]


def run_files(out):
    """every file under a run directory, by relative path"""
    files = {}
    for d, _, names in os.walk(out):
        for n in names:
            files[os.path.relpath(os.path.join(d, n), out)] = file_bytes(os.path.join(d, n))
    return files
