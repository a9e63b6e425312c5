#!/usr/bin/env python3
"""Split Cranfield's 225 queries into 5 folds (seeded shuffle); write, per
fold, train/test queries (qid<TAB>text) and qrels (Cranfield form).
Usage: folds.py CRANFIELD_DIR OUT_DIR [SEED]"""
import os
import random
import sys

src, out = sys.argv[1], sys.argv[2]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 42

# cran.qry: the i-th query has id i (its .I number is not used by cranqrel)
queries, cur = [], None
for line in open(os.path.join(src, "cran.qry")):
    if line.startswith(".I"):
        cur = []
        queries.append(cur)
    elif line.strip() != ".W":
        cur.append(line.strip())
texts = {str(i + 1): " ".join(w for w in q if w) for i, q in enumerate(queries)}
qrels = [l.split() for l in open(os.path.join(src, "cranqrel")) if l.strip()]

ids = sorted(texts, key=int)
random.Random(seed).shuffle(ids)
for k in range(5):
    test = set(ids[k::5])
    d = os.path.join(out, f"fold{k}")
    os.makedirs(d, exist_ok=True)
    for part, keep in (("train", lambda q: q not in test), ("test", lambda q: q in test)):
        with open(os.path.join(d, f"{part}.tsv"), "w") as f:
            for q in sorted(texts, key=int):
                if keep(q):
                    f.write(f"{q}\t{texts[q]}\n")
        with open(os.path.join(d, f"{part}.qrels"), "w") as f:
            for r in qrels:
                if keep(r[0]):
                    f.write(" ".join(r[:3]) + "\n")
    print(f"fold{k}: {225 - len(test)} train, {len(test)} test queries")
