#!/usr/bin/env python3
"""qac hlp against an independent Python implementation of the rule in
api/qac_pretrain.h (graph, dual-link, co-mention through non-hub third
documents, query side, seeded shuffle and cap), on the full
../shared/data/debian-packages file and on small graphs of edge cases
(TSV edges, unresolved and self links, repeated ids, documents without text
or title, hub thresholds, pair-kind selection), plus bad input.
Usage: test_hlp.py (QAC_BIN, QAC_SHARED_DATA from the environment)"""
import gzip
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402
import testdata  # noqa: E402
from testlib import QAC, check, finish  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "finetune"))
from ftlib import key, shuffle  # noqa: E402  util/qac_rng.h's keys and shuffle

DEB = testdata.path("debian-packages", "packages.jsonl.gz")
STREAM = 0x484C5001


# ---- the rule ----
def first_sentence(t):
    i, n = 0, len(t)
    while i < n and t[i] in " \t\n\r":
        i += 1
    while i < n:
        if t[i] == "\n" and i + 1 < n and t[i + 1] == "\n":
            return t[:i]
        if t[i] in ".!?" and i + 1 < n and t[i + 1] in " \t\n\r":
            return t[:i + 1]
        i += 1
    return t


def as_id(v):
    return str(v)


def reference(records, tsv=None, pairs="both", max_per_doc=5, hub_top=0.1, hub_degree=0, seed=42):
    ids, docs = {}, []
    dups = 0
    for r in records:
        i = as_id(r["id"])
        links = [as_id(x) for x in (r.get("links") or [])] if tsv is None else []
        if i in ids:
            docs[ids[i]]["links"] += links
            dups += 1
            continue
        ids[i] = len(docs)
        docs.append({"id": i, "text": r.get("text") or "", "title": r.get("title") or "", "links": links})
    n = len(docs)
    st = {"docs": n, "duplicate_ids": dups, "edges_unresolved": 0, "self_links": 0}
    raw = [(d["id"], l) for d in docs for l in d["links"]] if tsv is None else tsv
    edges = set()
    for a, b in raw:
        if a not in ids or b not in ids:
            st["edges_unresolved"] += 1
        elif a == b:
            st["self_links"] += 1
        else:
            edges.add((ids[a], ids[b]))
    st["edges"] = len(edges)
    out = [set() for _ in range(n)]
    inn = [set() for _ in range(n)]
    for a, b in edges:
        out[a].add(b)
        inn[b].add(a)
    indeg = [len(s) for s in inn]
    if hub_degree > 0:
        K = hub_degree
    else:
        K = next(v for v in range(0, max(indeg, default=0) + 1) if sum(d > v for d in indeg) <= hub_top * n)
    st["hub_degree"], st["hubs"] = K, sum(d > K for d in indeg)
    dl_pairs = cm_pairs = 0
    lines, written, qw, capped, no_text = [], 0, 0, 0, 0
    for p in range(n):
        dl = sorted(q for q in out[p] if p in out[q])
        cm = set()
        for c in out[p]:
            if indeg[c] <= K:
                cm |= inn[c]
        cm = sorted(cm - {p} - set(dl))
        dl_pairs += sum(q > p for q in dl)
        cm_pairs += sum(q > p for q in cm)
        if not docs[p]["text"].strip(" \t\n\r"):
            no_text += 1
            continue
        if pairs == "co-mention":
            dl = []
        if pairs == "dual-link":
            cm = []
        dl = shuffle(key(seed, p, STREAM, 0), dl)
        cm = shuffle(key(seed, p, STREAM, 1), cm)
        qs, ps, ks = [], [], []
        for kind, v in (("dual-link", dl), ("co-mention", cm)):
            for q in v:
                d = docs[q]
                qt = d["title"] or first_sentence(d["text"]).strip(" \t\n\r")
                if not qt:
                    continue
                if max_per_doc and len(qs) >= max_per_doc:
                    capped += 1
                    continue
                qs.append(qt), ps.append(d["id"]), ks.append(kind)
        if qs:
            lines.append({"id": docs[p]["id"], "text": docs[p]["text"], "queries": qs, "partners": ps, "kinds": ks})
            written += 1
            qw += len(qs)
    st.update(dual_link_pairs=dl_pairs, co_mention_pairs=cm_pairs, no_text=no_text, written=written,
              queries_written=qw, capped=capped)
    return lines, st


def run_hlp(docs_path, out, *extra, ok=True):
    r = subprocess.run([QAC, "hlp", "--docs", docs_path, "--out", out, *map(str, extra)], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise RuntimeError(r.stderr)
    stats = dict((k, int(v)) for k, v in (l.split() for l in r.stdout.splitlines())) if r.returncode == 0 else None
    return r, stats


def compare(label, docs_path, records, tsv=None, **kw):
    extra = []
    if tsv is not None:
        extra += ["--edges", kw.pop("tsv_path")]
    for k, flag in (("pairs", "--pairs"), ("max_per_doc", "--max-per-doc"), ("hub_top", "--hub-top"),
                    ("hub_degree", "--hub-degree"), ("seed", "--seed")):
        if k in kw:
            extra += [flag, kw[k]]
    out = os.path.join(tmp, "out.jsonl")
    _, got_st = run_hlp(docs_path, out, *extra)
    with open(out) as f:
        got = [json.loads(l) for l in f]
    want, want_st = reference(records, tsv, **kw)
    diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    check(got == want, f"{label}: {len(got)} passages = reference ({len(want)})"
          + ("" if diff is None else f"; first difference at line {diff + 1}: {got[diff]} vs {want[diff]}"))
    got_sub = {k: got_st.get(k) for k in want_st}
    check(got_sub == want_st, f"{label}: stats {got_sub} = reference {want_st}" if got_sub != want_st else f"{label}: stats = reference")
    return got_st


tmp = scratch.mkdtemp(prefix="qac-hlp-")

# 1. the real file, in full
with gzip.open(DEB, "rt", encoding="utf-8") as f:
    deb = [json.loads(l) for l in f]
st = compare("debian-packages", DEB, deb)
print("debian-packages stats: " + " ".join(f"{k}={v}" for k, v in st.items()), flush=True)
compare("debian-packages, seed 7, cap 2, hubs above in-degree 50", DEB, deb, seed=7, max_per_doc=2, hub_degree=50)

# 2. edge cases
small = [
    {"id": "a", "text": "Alpha doc. Second sentence.", "title": "", "links": ["b", "c", "zz", "a", "b"]},
    {"id": "b", "text": "Bravo doc!", "title": "Bravo title", "links": ["a", "c"]},
    {"id": "c", "text": "Charlie hub", "links": ["a"]},
    {"id": 4, "text": "", "title": "Empty text four", "links": ["a", "c"]},  # never a passage, still a partner
    {"id": "e", "text": "  \n\nEcho first. more", "links": ["c", "4"]},
    {"id": "f", "text": "Foxtrot", "links": ["c"]},
    {"id": "g", "text": "Golf", "links": None},
    {"id": "a", "text": "repeat of a", "links": ["g"]},  # repeated id: links merged, text of the first
    {"id": "h", "text": "   ", "title": "", "links": ["c"]},  # no text and no title: gives no query
]
small_path = os.path.join(tmp, "small.jsonl")
with open(small_path, "w") as f:
    for r in small:
        f.write(json.dumps(r) + "\n\n")
for kw in ({}, {"max_per_doc": 0}, {"max_per_doc": 1}, {"pairs": "dual-link"}, {"pairs": "co-mention"},
           {"hub_degree": 1}, {"hub_top": 0.0}, {"hub_top": 1.0}, {"seed": 3, "max_per_doc": 2}):
    compare(f"small graph {kw}", small_path, small, **kw)

tsv = [("a", "b"), ("b", "a"), ("a", "c"), ("e", "c"), ("f", "c"), ("e", "a"), ("a", "a"), ("x", "a"), ("a", "b"), ("g", "c")]
tsv_path = os.path.join(tmp, "edges.tsv")
with open(tsv_path, "w") as f:
    f.write("from\tto\n" + "".join(f"{a}\t{b}\n" for a, b in tsv) + "\n")
compare("TSV edges (header, duplicate, self, unresolved)", small_path, small, tsv, tsv_path=tsv_path, max_per_doc=0)

gz_path = os.path.join(tmp, "small.jsonl.gz")
with gzip.open(gz_path, "wt") as f:
    for r in small:
        f.write(json.dumps(r) + "\n")
compare("gzip input", gz_path, small)

# 3. determinism and atomic output
o1, o2 = os.path.join(tmp, "o1.jsonl"), os.path.join(tmp, "o2.jsonl")
run_hlp(small_path, o1, "--seed", 5, "--max-per-doc", 1)
run_hlp(small_path, o2, "--seed", 5, "--max-per-doc", 1)
check(open(o1).read() == open(o2).read(), "the same seed writes the same file")

# 4. bad input
bad = os.path.join(tmp, "bad.jsonl")
with open(bad, "w") as f:
    f.write('{"id":"a","text":"x","links":["b"]}\n{"id":"b","text":"y","links":"a"}\n')
r, _ = run_hlp(bad, os.path.join(tmp, "never.jsonl"), ok=False)
check(r.returncode == 1 and "bad.jsonl:2" in r.stderr and "links" in r.stderr and
      not os.path.exists(os.path.join(tmp, "never.jsonl")), f"links not an array: error names file and line, no output: {r.stderr.strip()}")
with open(bad, "w") as f:
    f.write('{"id":"a","text":"x"}\n{"text":"no id"}\n')
r, _ = run_hlp(bad, os.path.join(tmp, "never.jsonl"), ok=False)
check(r.returncode == 1 and "bad.jsonl:2" in r.stderr and "id" in r.stderr, f"missing id: {r.stderr.strip()}")
with open(bad, "w") as f:
    f.write('{"id":"a","text":"x"}\n\n[1, 2]\n')
r, _ = run_hlp(bad, os.path.join(tmp, "never.jsonl"), ok=False)
check(r.returncode == 1 and "bad.jsonl:3: not a JSON object" in r.stderr,
      f"a JSON array line: not an object, blank lines counted: {r.stderr.strip()}")
with open(bad, "w") as f:
    f.write('{"id":"a","text":"x"}\n{"_id":"b","text":"y"}\n')
r, _ = run_hlp(bad, os.path.join(tmp, "never.jsonl"), ok=False)
check(r.returncode == 1 and 'bad.jsonl:2: missing "id" (string or integer)' in r.stderr,
      f"hlp reads \"id\" only: {r.stderr.strip()}")
badtsv = os.path.join(tmp, "bad.tsv")
with open(badtsv, "w") as f:
    f.write("a\tb\nno tab here\n")
r, _ = run_hlp(small_path, os.path.join(tmp, "never.jsonl"), "--edges", badtsv, ok=False)
check(r.returncode == 1 and "bad.tsv:2" in r.stderr, f"TSV line without a tab: {r.stderr.strip()}")
r, _ = run_hlp(small_path, os.path.join(tmp, "never.jsonl"), "--hub-top", 2, ok=False)
check(r.returncode == 2, "--hub-top out of range is a usage error")
r = subprocess.run([QAC, "hlp", "--help"], capture_output=True, text=True)
check(r.returncode == 0 and "--max-per-doc" in r.stdout + r.stderr, "--help lists the options")

finish()
