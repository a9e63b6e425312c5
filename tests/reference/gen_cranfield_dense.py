#!/usr/bin/env python3
"""Reference dense run on Cranfield, made by sentence-transformers, for
tests/index/test_index_cranfield.py.

The default model (all-MiniLM-L6-v2) encodes what qac reads from the SMART
files: documents are .T and .W joined by a space, truncated at 128 tokens
(the test's `qac index build --max-len 128`); queries are .W, numbered 1..225
in file order as cranqrel numbers them, truncated at 32 tokens (the test
gives `qac search` the output's query_max_len as --max-len). Scores are dot
products of the normalised float32 vectors; each query keeps its top 100,
ordered as trec_eval orders them (score descending, then docid descending).
pytrec_eval (trec_eval's C code) scores the run with cranqrel's grades
mapped as qac maps them (gain 5 - rel, -1 as 0).

Output: tests/reference/cranfield/st_dense_metrics.json: the mean MAP,
nDCG@10 and recall@100 over the 225 queries, the settings above, the
versions used and the SHA-256 of the model's weights (the test refuses to
compare against another model).

Run: python3 tests/reference/gen_cranfield_dense.py [--data DIR] [--model DIR]
"""
import argparse
import collections
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testdata  # noqa: E402

DOC_MAX_LEN, QUERY_MAX_LEN, K = 128, 32, 100
MEASURES = ("map", "ndcg_cut_10", "recall_100")


def smart(path):
    """(id, text) of each record: .T and .W joined, as qac's reader does (tests/testdata.py's reader)."""
    return testdata.cranfield_texts(os.path.basename(path), cran_dir=os.path.dirname(path))


def cran_qrels(path):
    rel = collections.defaultdict(dict)
    for ln in open(path):
        q, d, r = ln.split()
        rel[q][d] = 5 - int(r) if int(r) > 0 else 0
    return rel


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("QAC_SHARED_DATA", os.path.join(repo, "..", "shared", "data")))
    ap.add_argument("--model", default=os.environ.get("QAC_MODEL", os.path.expanduser(
        os.path.join(os.environ.get("QAC_HOME", "~/.local/share/qac"), "models", "all-MiniLM-L6-v2"))))
    ap.add_argument("--out", default=os.path.join(here, "cranfield", "st_dense_metrics.json"))
    args = ap.parse_args()

    import pytrec_eval
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    cran = os.path.join(args.data, "cranfield")
    docs = smart(os.path.join(cran, "cran.all.1400"))
    queries = [(str(i + 1), t) for i, (_, t) in enumerate(smart(os.path.join(cran, "cran.qry")))]
    assert len(docs) == 1400 and len(queries) == 225, (len(docs), len(queries))

    st = SentenceTransformer(args.model, device="cpu")
    st.max_seq_length = DOC_MAX_LEN
    dv = st.encode([t for _, t in docs], batch_size=32, convert_to_numpy=True).astype(np.float32)
    st.max_seq_length = QUERY_MAX_LEN
    qv = st.encode([t for _, t in queries], batch_size=32, convert_to_numpy=True).astype(np.float32)
    scores = qv @ dv.T

    run = {}
    for qi, (qid, _) in enumerate(queries):
        order = sorted(range(len(docs)), key=lambda j: (-scores[qi, j], tuple(-ord(c) for c in docs[j][0])))[:K]
        run[qid] = {docs[j][0]: float(scores[qi, j]) for j in order}
    ev = pytrec_eval.RelevanceEvaluator(cran_qrels(os.path.join(cran, "cranqrel")), {"map", "ndcg_cut.10", "recall.100"})
    res = ev.evaluate(run)
    out = {
        "what": "sentence-transformers dense run on Cranfield, scored by pytrec_eval",
        "generator": "tests/reference/gen_cranfield_dense.py",
        "model_safetensors_sha256": sha256(os.path.join(args.model, "model.safetensors")),
        "doc_max_len": DOC_MAX_LEN,
        "query_max_len": QUERY_MAX_LEN,
        "k": K,
        "num_q": len(res),
        "metrics": {m: float(np.mean([r[m] for r in res.values()])) for m in MEASURES},
        "versions": {"sentence_transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__,
                     "pytrec_eval_terrier": _version("pytrec_eval_terrier")},
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    print(json.dumps(out["metrics"]))


def _version(dist):
    from importlib.metadata import version
    return version(dist)


if __name__ == "__main__":
    main()
