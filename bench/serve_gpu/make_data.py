"""Data for bench/serve_gpu: passages of 2 to 4 random Cranfield sentences
(seeded, as bench/serve does) and one /search body per Cranfield query.
    python3 make_data.py CRANFIELD_DIR PASSAGES OUT_DIR [k]
writes OUT_DIR/passages.tsv and OUT_DIR/bodies.jsonl. Standard library only."""
import json
import os
import random
import sys


def sentences(path):
    text, keep = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("."):
                keep = line.startswith(".W")
                continue
            if keep:
                text.append(line.strip())
    sents = [s.strip() for s in " ".join(text).split(" . ")]
    return [s for s in sents if len(s.split()) >= 4]


def queries(path):
    qs, cur = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(".I"):
                if cur:
                    qs.append(" ".join(cur))
                cur = None
            elif line.startswith(".W"):
                cur = []
            elif cur is not None:
                cur.append(line.strip())
    if cur:
        qs.append(" ".join(cur))
    return qs


def main():
    data, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    k = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    sents = sentences(os.path.join(data, "cran.all.1400"))
    rnd = random.Random(13)
    with open(os.path.join(out, "passages.tsv"), "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(f"p{i}\t{' . '.join(rnd.sample(sents, rnd.randint(2, 4)))} .\n")
    with open(os.path.join(out, "bodies.jsonl"), "w", encoding="utf-8") as f:
        for q in queries(os.path.join(data, "cran.qry")):
            f.write(json.dumps({"query": q, "k": k}) + "\n")


if __name__ == "__main__":
    main()
