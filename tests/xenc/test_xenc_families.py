#!/usr/bin/env python3
"""Cross-encoders of the families beyond BERT against sentence-transformers.

No such checkpoints can be downloaded here, so each is made as the
families' tests make theirs (tests/reference/gen_family_fixtures.py): the
family's small config and trained tokenizer from the family fixture, a
...ForSequenceClassification with random weights (drawn as that script
draws them, the head included) saved by transformers, the tokenizer's
files beside it:
  roberta         RobertaForSequenceClassification, 1 label (byte-level BPE;
                  pairs <s> a </s></s> b </s>): classifier.dense + tanh,
                  classifier.out_proj on <s>
  xlmr            XLMRobertaForSequenceClassification, 2 labels (SentencePiece)
  modernbert      ModernBertForSequenceClassification, 1 label,
                  classifier_pooling cls, gelu, no biases
  modernbert_mean the biased ModernBERT fixture's config, classifier_pooling
                  mean, classifier_bias and norm_bias, gelu_pytorch_tanh
Pairs: Cranfield queries with judged and other documents, several documents
joined (cut at the tokenizer's 128 tokens), an empty passage, multilingual
lines.

Token ids: `qac tokenize --pairs` against the Hugging Face tokenizer of the
checkpoint on every pair (longest_first at 128).

Scores: `qac rerank --pairs` against CrossEncoder.predict on every pair.
The bound, as tests/xenc/test_xenc_parity.py derives it: torch runs the
same checkpoint in float64 too; qac's fp32 logits must lie within 4 x E of
the float64 logits, E the largest error torch's own fp32 run makes on these
pairs (both sides fp32 with sums of the same lengths in other orders; 4x
leaves room for qac's sequential sums against torch's blocked ones), so
within 5 x E of predict's fp32 logits (triangle inequality), checked too.

Training stays BERT's: starting a reranker from these (qac finetune
--cross-encoder) and writing one are refused, naming what loads.
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
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import scratch  # noqa: E402
import testdata  # noqa: E402
from gen_family_fixtures import MULTILINGUAL, randomize  # noqa: E402
from testlib import check, finish, run  # noqa: E402

FIX, TOOL = sys.argv[1], sys.argv[2]
tmp = scratch.mkdtemp(prefix="qac-xfam-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
torch.set_num_threads(2)

# name: (fixture, architecture, num_labels, config fields set over the fixture's)
MODELS = {
    "roberta": ("roberta", "RobertaForSequenceClassification", 1, {}),
    "xlmr": ("xlmr", "XLMRobertaForSequenceClassification", 2, {}),
    "modernbert": ("modernbert", "ModernBertForSequenceClassification", 1, {"classifier_pooling": "cls"}),
    "modernbert_mean": ("modernbert_bias", "ModernBertForSequenceClassification", 1,
                        {"classifier_pooling": "mean", "classifier_bias": True, "norm_bias": True,
                         "classifier_activation": "gelu_pytorch_tanh"}),
}
# the tokenizer's files (the fixture's; its bi-encoder files are left behind)
TOK_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "sentencepiece.bpe.model",
             "vocab.json", "merges.txt")


def make_pairs():
    docs, queries, qrels = testdata.cranfield()
    ids = sorted(docs, key=int)
    rs = np.random.RandomState(38)
    pairs = []
    for qi in range(30):
        judged = qrels.get(qi + 1, [])
        picks = judged[:1] + [ids[k] for k in rs.choice(len(ids), 2, replace=False)]
        pairs += [(queries[qi], docs[d]) for d in picks]
    for k in range(8):  # several documents joined: cut at 128 tokens
        pairs.append((queries[k], " ".join(docs[ids[j]] for j in rs.choice(len(ids), 3, replace=False))))
    pairs += [(queries[0], ""), (" ".join(queries[:6]), docs[ids[3]])]
    pairs += [(MULTILINGUAL[i], MULTILINGUAL[(i + 3) % len(MULTILINGUAL)]) for i in range(len(MULTILINGUAL))]
    return pairs


def make(name):
    from transformers import AutoConfig, AutoModelForSequenceClassification
    fixture, arch, nl, over = MODELS[name]
    src = os.path.join(FIX, fixture)
    cfg = AutoConfig.from_pretrained(src)
    for k, v in over.items():
        setattr(cfg, k, v)
    cfg.num_labels, cfg.architectures = nl, [arch]
    torch.manual_seed(38)
    model = AutoModelForSequenceClassification.from_config(cfg)
    check(type(model).__name__ == arch, f"{name}: transformers makes a {arch}")
    randomize(model, 38 + len(name))
    out = p(name)
    model.save_pretrained(out)
    for f in TOK_FILES:
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), out)
    return out


def write_pairs(path, pairs):
    with open(path, "w", encoding="utf-8") as f:
        for a, b in pairs:
            f.write(json.dumps({"query": a, "passage": b}) + "\n")
    return path


def qac_ids(model, pairs_file, max_len):
    r = run(["tokenize", "--model", model, "--pairs", pairs_file, "--truncation", "longest_first", "--max-len",
             str(max_len), "--type-ids"])
    check(r.returncode == 0, f"qac tokenize --pairs on {os.path.basename(model)}: {r.stderr[-300:]}")
    return [[int(x) for x in line.split("\t")[0].split()] for line in r.stdout.splitlines()]


def qac_scores(model, pairs_file):
    r = run(["rerank", "--model", model, "--pairs", pairs_file, "--device", "cpu"])
    check(r.returncode == 0, f"qac rerank --pairs on {os.path.basename(model)}: {r.stderr[-300:]}")
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    return np.array([x["logits"] for x in rows], np.float64)


def st_scores(model, pairs):
    """CrossEncoder.predict's logits in fp32 and fp64."""
    from sentence_transformers import CrossEncoder
    ce = CrossEncoder(model, device="cpu")
    logits32 = ce.predict(pairs, batch_size=16, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    ce.to(torch.float64)
    logits64 = ce.predict(pairs, batch_size=16, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    shape = (len(pairs), -1)
    return (np.asarray(logits32, np.float64).reshape(shape), np.asarray(logits64, np.float64).reshape(shape),
            ce.tokenizer)


pairs = make_pairs()
pairs_file = write_pairs(p("pairs.jsonl"), pairs)
for name in MODELS:
    d = make(name)
    ref32, ref64, tok = st_scores(d, pairs)
    max_len = tok.model_max_length
    check(max_len == 128, f"{name}: the tokenizer's limit is the fixture's 128 ({max_len})")
    want = [tok([a], [b], truncation="longest_first", max_length=max_len)["input_ids"][0] for a, b in pairs]
    check(sum(len(w) == max_len for w in want) >= 8, f"{name}: pairs are cut at {max_len}")
    got = qac_ids(d, pairs_file, max_len)
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    check(len(got) == len(want) and not bad,
          f"{name}: token ids equal the Hugging Face tokenizer's pair template on {len(pairs)} pairs "
          f"(first differing: {bad[:1] and (got[bad[0]][:12], want[bad[0]][:12])})")
    logits = qac_scores(d, pairs_file)
    E = float(np.max(np.abs(ref32 - ref64)))
    e_qac = float(np.max(np.abs(logits - ref64))) if logits.shape == ref64.shape else float("inf")
    e_32 = float(np.max(np.abs(logits - ref32))) if logits.shape == ref32.shape else float("inf")
    print(f"{name}: {len(pairs)} pairs, {ref32.shape[1]} logit(s) (spread {np.std(ref64):.3f}); torch fp32 vs "
          f"fp64 E = {E:.3e}; qac vs fp64 {e_qac:.3e} ({e_qac / E:.2f} E), vs torch fp32 {e_32:.3e}", flush=True)
    check(e_qac <= 4 * E, f"{name}: qac's logits within 4 E of the float64 reference")
    check(e_32 <= 5 * E, f"{name}: qac's logits within 5 E of CrossEncoder.predict's")

    # training and writing stay BERT's, refused naming what loads
    r = subprocess.run([TOOL, "fresh", d, p(name + ".out"), "1", "7"], capture_output=True, text=True)
    check(r.returncode != 0 and "BERT checkpoints only" in r.stderr and "load for scoring" in r.stderr,
          f"{name}: starting a reranker from it is refused, naming what loads: {r.stderr.strip()[-240:]}")
    r = subprocess.run([TOOL, "roundtrip", d, p(name + ".again")], capture_output=True, text=True)
    check(r.returncode != 0 and "BertForSequenceClassification rerankers only" in r.stderr,
          f"{name}: writing it is refused: {r.stderr.strip()[-200:]}")

# a RoBERTa tokenizer without model_max_length: pairs are cut at the 512 positions past the padding offset (of
# max_position_embeddings 514), as CrossEncoder(max_length=512) cuts them
nolimit = p("roberta_nolimit")
shutil.copytree(p("roberta"), nolimit)
tc_path = os.path.join(nolimit, "tokenizer_config.json")
tc = json.load(open(tc_path))
tc.pop("model_max_length", None)
json.dump(tc, open(tc_path, "w"))
long_pairs = [(q, t) for q, t in pairs if len(t) > 3000][:6]
from sentence_transformers import CrossEncoder  # noqa: E402
ce = CrossEncoder(nolimit, device="cpu", max_length=512)
n_tok = [len(ce.tokenizer([a], [b], truncation="longest_first", max_length=512)["input_ids"][0]) for a, b in long_pairs]
check(len(long_pairs) >= 4 and min(n_tok) == 512, f"long pairs are cut at 512 ({n_tok})")
ref32 = np.asarray(ce.predict(long_pairs, activation_fn=torch.nn.Identity()), np.float64).reshape(len(long_pairs), -1)
ce.to(torch.float64)
ref64 = np.asarray(ce.predict(long_pairs, activation_fn=torch.nn.Identity()), np.float64).reshape(len(long_pairs), -1)
got = qac_scores(nolimit, write_pairs(p("long.jsonl"), long_pairs))
E = float(np.max(np.abs(ref32 - ref64)))
e_qac = float(np.max(np.abs(got - ref64))) if got.shape == ref64.shape else float("inf")
print(f"roberta without model_max_length: {len(long_pairs)} pairs of 512 tokens; E = {E:.3e}, qac vs fp64 {e_qac:.3e}")
check(e_qac <= 4 * E, "the pairs cut at 512, not 514: logits within 4 E of the float64 reference")

# the encoder alone (the family fixture, no head) is not a cross-encoder, said in the family's terms
r = run(["rerank", "--model", os.path.join(FIX, "roberta"), "--pairs", pairs_file])
check(r.returncode == 1 and "classifier.out_proj.weight" in r.stderr and "RobertaForSequenceClassification" in r.stderr,
      "rerank with a RoBERTa bi-encoder names the head it lacks: " + r.stderr.strip()[-240:])
finish()
