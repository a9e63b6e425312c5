"""Shared by the pre-training tests: a small pre-training file cut from the
real Debian corpus, and the fine-tuning tests' helpers."""
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "finetune"))
from ftlib import SHARED, check, default_model_dir, file_bytes, finish, read_jsonl, run, run_files, tiny_model  # noqa: E402,F401
import testdata  # noqa: E402


def debian_pairs(out, n=60):
    """The first n Debian descriptions that have a query, as pre-training jsonl."""
    src = testdata.path("debian-packages", "packages.jsonl.gz")
    kept = 0
    with gzip.open(src, "rt", encoding="utf-8") as f, open(out, "w") as g:
        for line in f:
            rec = json.loads(line)
            if not rec.get("text") or not rec.get("queries"):
                continue
            g.write(json.dumps({"id": rec["id"], "text": rec["text"], "queries": rec["queries"]}) + "\n")
            kept += 1
            if kept == n:
                break
    return out


def trajectory(out):
    """Every step's loss, parts, rate and norm as the exact printed digits."""
    keep = ("step", "loss", "lr", "grad_norm", "mlm", "head_mlm", "contrastive", "dec_mlm", "next_token", "span_frac",
            "tokens")
    return [tuple((k, repr(l[k])) for k in keep if k in l) for l in read_jsonl(os.path.join(out, "log.jsonl"))]
