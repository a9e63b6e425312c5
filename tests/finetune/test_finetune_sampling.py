#!/usr/bin/env python3
"""Tevatron sampling against a reference written from TRAINING.md (ftlib):
qac_ft_sample and qac_ft_order over many shapes and seeds, properties of
the rule itself, and the batches `qac finetune --dry-run --dump-batches`
draws from a Tevatron file (skips, title [SEP] text, order across epochs).
Usage: test_finetune_sampling.py FT_TOOL"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ftlib import check, finish, order, read_jsonl, run, sample  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

TOOL = sys.argv[1]


def tool(*args):
    return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, check=True).stdout.splitlines()


# 1. the sampling function, every (example, epoch) of several shapes
for seed in (42, 7, 2**63 + 5):
    for npos, nneg, n in ((1, 30, 8), (3, 30, 8), (2, 7, 8), (5, 3, 8), (1, 5, 1), (4, 16, 4), (2, 0, 1), (1, 1, 2)):
        got = tool("sample", seed, 12, 6, npos, nneg, n)
        want = []
        for ex in range(12):
            for ep in range(6):
                p, negs = sample(seed, ex, ep, npos, nneg, n)
                want.append(" ".join(map(str, [ex, ep, p, *negs])))
        check(got == want, f"qac_ft_sample = reference (seed {seed}, {npos} positives, {nneg} negatives, n {n})")

for seed in (42, 1):
    got = tool("order", seed, 3, 17)
    check(got == [" ".join(map(str, order(seed, ep, 17))) for ep in range(3)], f"epoch order = reference (seed {seed})")

# 2. the rule's properties, from qac's own output
rows = [list(map(int, l.split())) for l in tool("sample", 42, 5, 8, 3, 30, 8)]
for ex in range(5):
    mine = [r for r in rows if r[0] == ex]
    check(all((mine[e + 1][2] - mine[e][2]) % 3 == 1 for e in range(7)), f"example {ex}: the positive rotates by one per epoch")
    stream = sum((r[3:] for r in mine), [])
    check(sorted(stream[:28]) == sorted(set(stream[:28])) and stream[30:37] == stream[0:7],
          f"example {ex}: the window walks one fixed shuffle by n-1 per epoch, wrapping after 30")

# 3. the data module and batch source end to end
tmp = scratch.mkdtemp(prefix="qac-ft-sampling-")
P = lambda d, t, title="": {"docid": d, "title": title, "text": t}  # noqa: E731
examples = [
    {"query_id": "a", "query": "alpha query", "positive_passages": [P("a1", "alpha one", "Alpha"), P("a2", "alpha two")],
     "negative_passages": [P(f"an{i}", f"alpha negative {i}") for i in range(5)]},
    {"query_id": "b", "query": "bravo query", "positive_passages": [P("b1", "bravo one")],
     "negative_passages": [P("bn0", "bravo negative")]},
    {"query_id": "c", "query": "charlie without positives", "positive_passages": [],
     "negative_passages": [P("cn0", "x")]},
    {"query_id": "d", "query": "delta without negatives", "positive_passages": [P("d1", "delta one")]},
    {"query_id": 5, "query": "echo query", "positive_passages": [P(5, "echo one", "Echo")],
     "negative_passages": [P(f"en{i}", f"echo negative {i}", "T") for i in range(3)]},
    {"query_id": "f", "query": "foxtrot query", "positive_passages": [P("f1", "foxtrot one"), P("f2", "foxtrot 2"),
                                                                        P("f3", "foxtrot 3")],
     "negative_passages": [P(f"fn{i}", f"foxtrot negative {i}") for i in range(4)]},
]
train = os.path.join(tmp, "train.jsonl")
with open(train, "w") as f:
    for e in examples:
        f.write(json.dumps(e) + "\n")
    f.write("\n")  # blank lines are skipped
dump = os.path.join(tmp, "batches.jsonl")
r = run(["finetune", "--train", train, "--dry-run", "--dump-batches", dump, "--batch", "3", "--n-passages", "3",
         "--steps", "5", "--seed", "9", "--out", os.path.join(tmp, "out")], env={**os.environ, "QAC_QUIET": "0"})
check(r.returncode == 0, "dry run succeeds: " + r.stderr[-300:])
check("skipped 1 queries without a positive and 1 without negatives" in r.stderr, "skips are counted and reported")
kept = [e for e in examples if e["positive_passages"] and e.get("negative_passages")]


def text(p):
    return f"{p['title']} [SEP] {p['text']}" if p["title"] else p["text"]


want, pos = [], 0
for step in range(5):
    qs, ps = [], []
    for k in range(3):
        ep, i = divmod(pos, len(kept))
        ex = order(9, ep, len(kept))[i]
        e = kept[ex]
        p, negs = sample(9, ex, ep, len(e["positive_passages"]), len(e["negative_passages"]), 3)
        qs.append(e["query"])
        ps.append([text(e["positive_passages"][p])] + [text(e["negative_passages"][j]) for j in negs])
        pos += 1
    want.append({"step": step + 1, "queries": qs, "passages": ps})
got = read_jsonl(dump) if os.path.exists(dump) else []
check(got == want, "dumped batches = reference (order over epochs, rotation, window, replacement, title [SEP] text)")
if got != want and got:
    print("got ", got[0], "\nwant", want[0])
finish()
