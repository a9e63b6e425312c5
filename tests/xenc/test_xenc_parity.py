#!/usr/bin/env python3
"""Cross-encoders against sentence-transformers and transformers.

Checkpoints with a fresh head, from a small random BERT with the default
model's vocabulary, pooler and 512 positions (2 layers of 64: the same
code paths as the default model at a fraction of the time, so every pair
is scored on both sides for the two checkpoints the issue names):
  st1      CrossEncoder(num_labels=1) saved by sentence-transformers (its
           current layout: modules.json, config_sentence_transformers.json
           with the activation);
  st2tanh  CrossEncoder(num_labels=2, activation_fn=Tanh), the same layout;
  st2old   st2tanh rewritten in the layout of sentence-transformers 4 and 5
           (no modules.json; config.json "sentence_transformers":
           {"activation_fn": Identity});
  trained  a reranker qac trained from the small BERT (qac finetune
           --cross-encoder, 3 steps on Cranfield BM25 negatives), loaded by
           CrossEncoder and by transformers' BertForSequenceClassification;
and from the default model itself (MiniLM-L6, its trained weights):
  qac1     a reranker qac started (qac_xenc_open: the model's pooler, a
           fresh classifier) and wrote, loaded by CrossEncoder.
Then a save and reload by qac keeps every logit bit for bit.

Pairs (>= 300): Cranfield queries with judged and unjudged documents, long
passages of several documents joined (cut at 512 tokens), an empty passage,
accents and CJK characters, a query longer than the passages.

Token ids and token types: `qac tokenize --pairs` against the Hugging Face
tokenizer of the same checkpoint on every pair, for longest_first at 512
and at 48 (both texts cut), only_second and only_first at 128, and left
truncation; only_second on a query longer than the limit is an error on
both sides.

Scores: `qac rerank --pairs` (logits and the model's activation) against
CrossEncoder.predict, on every pair for st1 and trained and on a sample of
35 (15 long pairs among them) for the others (qac1 on the default model:
a sample, its 6 layers of 384 being the test's cost). The bound is the reference's own deviation: torch
runs the same checkpoint in float64 too, and qac's fp32 logits must lie
within 4 x E of the float64 logits, E the largest error torch's own fp32
run makes on these pairs (both sides are fp32 with sums of the same
lengths, in other orders: each side's error is of torch's size; 4x leaves
room for qac's sequential sums against torch's blocked ones). By the
triangle inequality qac is then within 5 x E of torch's fp32 run, which is
checked too. The activated scores are functions of the logits with slope
<= 1, held to the same bound plus their own rounding to fp32 (an ulp).
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import scratch  # noqa: E402
import testdata  # noqa: E402
from testlib import check, default_model_dir, finish, run, tiny_model  # noqa: E402

TOOL = sys.argv[1]
tmp = scratch.mkdtemp(prefix="qac-xenc-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
torch.set_num_threads(2)



def make_pairs():
    docs, queries, qrels = testdata.cranfield()
    ids = sorted(docs, key=int)
    rs = np.random.RandomState(35)
    pairs = []
    for qi in range(75):  # cran.qry numbers its queries 1.. in order (cranqrel's numbering)
        q = queries[qi]
        judged = qrels.get(qi + 1, [])
        picks = judged[:2] + [ids[k] for k in rs.choice(len(ids), 2, replace=False)]
        pairs += [(q, docs[d]) for d in picks]
    for k in range(24):  # long passages: several documents joined, cut at 512 tokens
        n = 4 + k % 5
        text = " ".join(docs[ids[j]] for j in rs.choice(len(ids), n, replace=False))
        pairs.append((queries[k], text))
    long_query = " ".join(queries[:12])
    pairs += [(queries[0], ""), ("Überschall-Strömung à Mach 3 ： 超音速の流れ", docs[ids[5]]),
              (long_query, docs[ids[7]]), (long_query, "short passage"), ("café crème", "naïve résumé façade")]
    return pairs


def write_pairs(path, pairs):
    with open(path, "w", encoding="utf-8") as f:
        for a, b in pairs:
            f.write(json.dumps({"query": a, "passage": b}) + "\n")
    return path


def hf_ids(tok, pairs, strategy, max_len, side="right"):
    """Token ids and types of every pair (None where the tokenizer refuses)."""
    tok.truncation_side = side
    out = []
    for a, b in pairs:  # one at a time: a refused pair raises alone
        try:
            e = tok([a], [b], truncation=strategy, max_length=max_len)
            out.append((e["input_ids"][0], e["token_type_ids"][0]))
        except Exception:
            out.append(None)
    return out


def qac_ids(model, pairs_file, strategy, max_len, side="right"):
    r = run(["tokenize", "--model", model, "--pairs", pairs_file, "--truncation", strategy, "--max-len",
             str(max_len), "--truncation-side", side, "--type-ids"])
    if r.returncode != 0:
        return None, r.stderr
    out = []
    for line in r.stdout.splitlines():
        a, b = line.split("\t")
        out.append(([int(x) for x in a.split()], [int(x) for x in b.split()]))
    return out, ""


def qac_scores(model, pairs_file):
    r = run(["rerank", "--model", model, "--pairs", pairs_file, "--device", "cpu"])
    check(r.returncode == 0, f"qac rerank --pairs on {os.path.basename(model)}: {r.stderr[-300:]}")
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    return np.array([x["logits"] for x in rows], np.float64), np.array([x["activated"] for x in rows], np.float64)


def st_scores(model, pairs):
    """CrossEncoder.predict's logits in fp32 and fp64, and its scores: the
    model's activation of the fp32 logits, as predict applies it."""
    from sentence_transformers import CrossEncoder
    ce = CrossEncoder(model, device="cpu")
    logits32 = ce.predict(pairs, batch_size=32, activation_fn=torch.nn.Identity(), convert_to_tensor=True)
    act = ce.activation_fn(logits32)
    ce.to(torch.float64)
    logits64 = ce.predict(pairs, batch_size=32, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    shape = (len(pairs), -1)
    return (act.numpy().astype(np.float64).reshape(shape), logits32.numpy().astype(np.float64).reshape(shape),
            np.asarray(logits64, np.float64).reshape(shape), ce)


def ensure_vocab(d):
    """sentence-transformers 6 writes tokenizer.json alone; qac's WordPiece
    reads vocab.txt, the same vocabulary (the default model's)."""
    if not os.path.exists(os.path.join(d, "vocab.txt")):
        shutil.copy(os.path.join(default_model_dir(), "vocab.txt"), d)


def train_one(base):
    """A few steps of qac finetune --cross-encoder from base."""
    docs, queries, qrels = (testdata.path("cranfield", f) for f in ("cran.all.1400", "cran.qry", "cranqrel"))
    assert run(["bm25", "build", "--corpus", docs, "--out", p("bm25")]).returncode == 0
    assert run(["bm25", "search", "--index", p("bm25"), "--queries", queries, "--k", "30",
                "--run", p("bm25.run")]).returncode == 0
    r = run(["mine", "--run", p("bm25.run"), "--queries", queries, "--qrels", qrels, "--corpus", docs, "--n", "8",
             "--depth", "30", "--out", p("neg.jsonl")])
    assert r.returncode == 0, r.stderr
    r = run(["finetune", "--cross-encoder", "--model", base, "--train", p("neg.jsonl"), "--steps", "3",
             "--batch", "2", "--n-passages", "4", "--max-len", "96", "--lr", "5e-5", "--threads", "2",
             "--out", p("trained")], env={**os.environ, "QAC_QUIET": "0"})
    check(r.returncode == 0 and "its pooler, a fresh classifier" in r.stderr,
          "qac finetune --cross-encoder trains the small BERT 3 steps: " + r.stderr[-300:])
    return p("trained")


def make_checkpoints():
    from sentence_transformers import CrossEncoder
    base = tiny_model(p("tiny"), hidden=64, layers=2, heads=2, seed=35, max_position=512)
    out = {}
    torch.manual_seed(11)
    ce = CrossEncoder(base, num_labels=1, device="cpu")
    ce.save(p("st1"))
    out["st1"] = p("st1")
    torch.manual_seed(12)
    ce = CrossEncoder(base, num_labels=2, activation_fn=torch.nn.Tanh(), device="cpu")
    ce.save(p("st2tanh"))
    out["st2tanh"] = p("st2tanh")
    shutil.copytree(p("st2tanh"), p("st2old"))
    for f in ("modules.json", "config_sentence_transformers.json", "sentence_bert_config.json"):
        os.remove(os.path.join(p("st2old"), f))
    cfg = json.load(open(os.path.join(p("st2old"), "config.json")))
    cfg["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity", "version": "4.0.1"}
    json.dump(cfg, open(os.path.join(p("st2old"), "config.json"), "w"), indent=2)
    out["st2old"] = p("st2old")
    r = subprocess.run([TOOL, "fresh", default_model_dir(), p("qac1"), "1", "7"], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.strip() == "fresh 1",
          f"qac starts a reranker from the default model, its pooler read, a fresh classifier: {r.stdout} {r.stderr}")
    out["qac1"] = p("qac1")
    out["trained"] = train_one(base)
    for d in out.values():
        ensure_vocab(d)
    return out


pairs = make_pairs()
pairs_file = write_pairs(p("pairs.jsonl"), pairs)
check(len(pairs) >= 300, f"{len(pairs)} pairs")
ckpts = make_checkpoints()

# ---- token ids, every pair, every strategy ----
from transformers import AutoTokenizer  # noqa: E402
tok = AutoTokenizer.from_pretrained(ckpts["st1"])
n_long = sum(len(tok(a, b)["input_ids"]) > 512 for a, b in pairs)
check(n_long >= 20, f"{n_long} pairs are over 512 tokens and get cut")
for strategy, max_len, side in [("longest_first", 512, "right"), ("longest_first", 48, "right"),
                                ("only_second", 128, "right"), ("only_first", 128, "right"),
                                ("longest_first", 48, "left"), ("only_second", 128, "left")]:
    want = hf_ids(tok, pairs, strategy, max_len, side)
    ok_pairs = [i for i, w in enumerate(want) if w is not None]
    sub = write_pairs(p(f"ok-{strategy}-{max_len}-{side}.jsonl"), [pairs[i] for i in ok_pairs])
    got, err = qac_ids(ckpts["st1"], sub, strategy, max_len, side)
    same = got is not None and len(got) == len(ok_pairs) and all(
        (list(g[0]), list(g[1])) == (list(want[i][0]), list(want[i][1])) for g, i in zip(got, ok_pairs))
    check(same, f"token ids and types equal the Hugging Face tokenizer on {len(ok_pairs)} pairs "
                f"({strategy}, {max_len}, {side}) {err[-200:]}")
    for i in [i for i, w in enumerate(want) if w is None][:3]:  # refused by both
        one = write_pairs(p("one.jsonl"), [pairs[i]])
        g, err = qac_ids(ckpts["st1"], one, strategy, max_len, side)
        check(g is None and "use longest_first" in err,
              f"pair {i} that Hugging Face refuses ({strategy} at {max_len}) is refused: {err.strip()[-160:]}")
check(any(w is None for w in hf_ids(tok, pairs, "only_second", 128)), "only_second at 128 refuses the long query")

# ---- scores: every pair on st1 and trained; the other layouts and activations on a sample (with long pairs) ----
sample = list(range(0, 300, 15)) + list(range(300, len(pairs), 2))
sample_file = write_pairs(p("sample.jsonl"), [pairs[i] for i in sample])
for name, d in ckpts.items():
    full = name in ("st1", "trained")
    these = pairs if full else [pairs[i] for i in sample]
    logits, act = qac_scores(d, pairs_file if full else sample_file)
    ref_act, ref32, ref64, ce = st_scores(d, these)
    E = float(np.max(np.abs(ref32 - ref64)))
    e_qac = float(np.max(np.abs(logits - ref64)))
    e_32 = float(np.max(np.abs(logits - ref32)))
    # the activated value is rounded to fp32 once more on each side: half an ulp of it each
    e_act = float(np.max(np.abs(act - ref_act) - np.spacing(np.abs(ref_act).astype(np.float32))))
    print(f"{name}: {len(these)} pairs, {logits.shape[1]} logit(s), activation {type(ce.activation_fn).__name__}; torch fp32 vs fp64 "
          f"E = {E:.3e}; qac vs fp64 {e_qac:.3e} ({e_qac / E:.2f} E), vs torch fp32 {e_32:.3e}, "
          f"activated {e_act:.3e}", flush=True)
    check(logits.shape == ref32.shape, f"{name}: {ref32.shape[1]} logits per pair")
    check(e_qac <= 4 * E, f"{name}: qac's logits within 4 E of the float64 reference")
    check(e_32 <= 5 * E, f"{name}: qac's logits within 5 E of CrossEncoder.predict's")
    check(e_act <= 5 * E, f"{name}: the activated scores ({type(ce.activation_fn).__name__}) within 5 E (and their "
                          "rounding) of predict's")

# transformers' own class reads qac's checkpoint with no weight missing or left unused
from transformers import AutoModelForSequenceClassification  # noqa: E402
hf, info = AutoModelForSequenceClassification.from_pretrained(ckpts["trained"], output_loading_info=True)
check(type(hf).__name__ == "BertForSequenceClassification" and not info["missing_keys"]
      and not info["unexpected_keys"], f"transformers loads qac's reranker whole: {info}")

# a save by qac changes no bit
r = subprocess.run([TOOL, "roundtrip", ckpts["st2old"], p("again")], capture_output=True, text=True)
check(r.returncode == 0, "qac saves a loaded cross-encoder: " + r.stderr)
a, _ = qac_scores(ckpts["st2old"], sample_file)
b, _ = qac_scores(p("again"), sample_file)
check(np.array_equal(a, b), "the saved copy gives the same logits, bit for bit")
check(json.load(open(os.path.join(p("again"), "config_sentence_transformers.json")))["activation_fn"]
      == "torch.nn.modules.linear.Identity", "the activation of the older layout is kept")

# a plain bi-encoder is not a cross-encoder
r = run(["rerank", "--model", default_model_dir(), "--pairs", sample_file])
check(r.returncode == 1 and "qac finetune --cross-encoder" in r.stderr,
      "rerank with a bi-encoder says how to train a cross-encoder from it: " + r.stderr.strip()[-200:])
finish()
