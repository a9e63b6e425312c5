"""Data for bench/serve_gpu: bench/serve's synthetic passages (2 to 4
random Cranfield sentences, seeded) and one /search body per Cranfield query.
    python3 make_data.py CRANFIELD_DIR PASSAGES OUT_DIR [k]
writes OUT_DIR/passages.tsv and OUT_DIR/bodies.jsonl. Standard library only."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from bench_serve import cranfield_queries, synthetic_passages  # noqa: E402


def main():
    data, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    k = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    passages = synthetic_passages(data, n)
    with open(os.path.join(out, "passages.tsv"), "w", encoding="utf-8") as f:
        for pid, text in passages:
            f.write(f"{pid}\t{text}\n")
    with open(os.path.join(out, "bodies.jsonl"), "w", encoding="utf-8") as f:
        for q in cranfield_queries(os.path.join(data, "cran.qry")):
            f.write(json.dumps({"query": q, "k": k}) + "\n")


if __name__ == "__main__":
    main()
