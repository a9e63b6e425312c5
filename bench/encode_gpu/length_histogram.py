"""Writes bench/encode_gpu/lengths.txt, the passage length distribution of
the encoding benchmark: the token counts of the 58,294 Debian long
descriptions (../shared/data/debian-packages) under the default model's
BERT uncased WordPiece, [CLS] and [SEP] included, cut at 144 tokens (the
fine-tuning recipe's p_max_len), scaled to 16,384 passages by largest
remainders. Lines "length count", then a "# mean ..." comment. MS MARCO
passages average roughly 70-80 BERT tokens; this has mean 77.8, median 69.
    python3 length_histogram.py [debian packages.jsonl.gz] [model dir]"""
import collections
import gzip
import json
import os
import sys

from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
TOTAL, CUT = 16384, 144


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "shared", "data",
                                                              "debian-packages", "packages.jsonl.gz")
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.expanduser("~/.local/share/qac/models/all-MiniLM-L6-v2")
    tok = AutoTokenizer.from_pretrained(model)
    with gzip.open(data, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    lens = [len(ids) for ids in tok(texts, truncation=True, max_length=CUT)["input_ids"]]
    hist = collections.Counter(lens)
    exact = {k: v * TOTAL / len(lens) for k, v in hist.items()}
    counts = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: (counts[k] - exact[k], k))[:TOTAL - sum(counts.values())]:
        counts[k] += 1
    mean = sum(k * v for k, v in counts.items()) / TOTAL
    with open(os.path.join(HERE, "lengths.txt"), "w") as f:
        for k in sorted(counts):
            if counts[k]:
                f.write(f"{k} {counts[k]}\n")
        f.write(f"# {len(lens)} Debian long descriptions, BERT uncased WordPiece with [CLS] [SEP], cut at {CUT}: "
                f"mean {sum(lens) / len(lens):.2f} ({mean:.2f} over the {TOTAL} scaled), "
                f"{sum(1 for x in lens if x == CUT) / len(lens):.1%} cut\n")


if __name__ == "__main__":
    main()
