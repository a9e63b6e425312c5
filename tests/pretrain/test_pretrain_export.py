#!/usr/bin/env python3
"""The output of qac pretrain is an encoder-only Hugging Face checkpoint.

1. A tiny random BERT (CLS pooling) pre-trained for 3 coCondenser steps:
   OUT holds config, safetensors, tokenizer and sentence-transformers files
   with exactly the encoder's tensors (no head); transformers' AutoModel
   loads OUT and its last-layer [CLS] vectors equal `qac encode`'s within
   fp32 tolerance (max |diff| <= 1e-4 max |x|); the weights moved; `qac
   finetune` trains from OUT.
2. The default model (mean pooling, normalised) after a CoT-MAE step:
   AutoModel's and sentence-transformers' embeddings of OUT equal `qac
   encode`'s (cosine >= 0.99999).
3. A BertForMaskedLM checkpoint's own MLM head (cls.predictions.*) is the
   one pre-training starts from: after one step at lr 0 the head in the
   training state equals the checkpoint's tensors bit for bit."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from ptlib import check, debian_pairs, default_model_dir, finish, run, tiny_model  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-pt-export-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
data = debian_pairs(p("pairs.jsonl"), n=40)
texts = ["Real-time strategy game of ancient warfare", "library for parsing JSON documents in C",
         "command-line tool to convert images between formats"]
with open(p("texts.tsv"), "w") as f:
    f.writelines(f"{i}\t{t}\n" for i, t in enumerate(texts))


def qac_encode(model, name):
    out = p(name + ".npy")
    r = run(["encode", "--model", model, "--input", p("texts.tsv"), "--output", out, "--max-len", "64"])
    check(r.returncode == 0, f"qac encode --model {os.path.basename(model)} " + r.stderr[-300:])
    return np.load(out)


def safetensors_keys(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return sorted(k for k in json.loads(f.read(n)) if k != "__metadata__")


import torch  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

# 1. tiny model, CLS pooling
tiny = tiny_model(p("tiny"))
out = p("tiny-pt")
r = run(["pretrain", "--model", tiny, "--data", data, "--objective", "cocondenser", "--steps", "3", "--batch", "4",
         "--lr", "1e-3", "--max-len", "48", "--threads", "2", "--out", out])
check(r.returncode == 0, "tiny pre-training " + r.stderr[-400:])
for f in ("config.json", "model.safetensors", "vocab.txt", "modules.json", os.path.join("1_Pooling", "config.json")):
    check(os.path.exists(os.path.join(out, f)), f"OUT has {f}")
check(not os.path.exists(os.path.join(out, "training_state.qts")) and
      os.path.exists(os.path.join(out, "checkpoint-3", "training_state.qts")),
      "the heads' training state is in the checkpoint, not in the exported encoder")
ref_keys = [k.removeprefix("bert.") for k in safetensors_keys(os.path.join(tiny, "model.safetensors"))]
got_keys = safetensors_keys(os.path.join(out, "model.safetensors"))
check(set(got_keys) == set(ref_keys) - {"embeddings.position_ids"},
      f"OUT's weights are the encoder's tensors and nothing else ({len(got_keys)} tensors)")
ours = qac_encode(out, "tiny")
tok, hf = AutoTokenizer.from_pretrained(out), AutoModel.from_pretrained(out)
with torch.no_grad():
    x = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    cls = hf(**x).last_hidden_state[:, 0].numpy()
err = np.abs(ours - cls).max() / np.abs(cls).max()
check(err <= 1e-4, f"AutoModel's [CLS] equals qac encode (max rel diff {err:.2e})")
base = qac_encode(tiny, "tiny-base")
check(np.abs(base - ours).max() > 1e-3, "the exported weights are the trained ones")
tev = p("train.jsonl")
with open(tev, "w") as f:
    for i in range(4):
        f.write(json.dumps({"query_id": str(i), "query": texts[i % 3], "positive_passages": [
            {"docid": f"p{i}", "title": "", "text": texts[(i + 1) % 3]}], "negative_passages": [
            {"docid": f"n{i}", "title": "", "text": texts[(i + 2) % 3]}]}) + "\n")
r = run(["finetune", "--model", out, "--train", tev, "--steps", "2", "--batch", "2", "--n-passages", "2",
         "--p-max-len", "32", "--threads", "2", "--out", p("ft")])
check(r.returncode == 0, "qac finetune starts from the pre-trained encoder " + r.stderr[-300:])

# 2. the default model: mean pooling, normalised
mini = p("mini-pt")
r = run(["pretrain", "--model", default_model_dir(), "--data", data, "--objective", "cotmae", "--steps", "1",
         "--batch", "2", "--max-len", "64", "--threads", "2", "--out", mini])
check(r.returncode == 0, "MiniLM pre-training " + r.stderr[-400:])
ours = qac_encode(mini, "mini")
tok, hf = AutoTokenizer.from_pretrained(mini), AutoModel.from_pretrained(mini)
with torch.no_grad():
    x = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    h = hf(**x).last_hidden_state
    m = x["attention_mask"].unsqueeze(-1).float()
    v = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1).numpy()
cos = (ours * v).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(v, axis=1)
check(cos.min() >= 0.99999, f"AutoModel (mean, normalised) equals qac encode (min cosine {cos.min():.8f})")
from sentence_transformers import SentenceTransformer  # noqa: E402
st = SentenceTransformer(mini, device="cpu").encode(texts, convert_to_numpy=True)
cos = (ours * st).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(st, axis=1)
check(cos.min() >= 0.99999, f"sentence-transformers equals qac encode (min cosine {cos.min():.8f})")

# 3. a checkpoint with an MLM head: the state holds exactly that head after a step at lr 0
from transformers import BertConfig, BertForMaskedLM  # noqa: E402
torch.manual_seed(1)
C, L, V = 32, 2, 30522
mlm_dir = p("tiny-mlm")
BertForMaskedLM(BertConfig(vocab_size=V, hidden_size=C, num_hidden_layers=L, num_attention_heads=2,
                           intermediate_size=2 * C, max_position_embeddings=128)).save_pretrained(mlm_dir)
for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
    if os.path.exists(os.path.join(tiny, f)):
        with open(os.path.join(tiny, f), "rb") as a, open(os.path.join(mlm_dir, f), "wb") as b:
            b.write(a.read())
out = p("mlm-pt")
r = run(["pretrain", "--model", mlm_dir, "--data", data, "--objective", "cotmae", "--steps", "1", "--batch", "2",
         "--lr", "0", "--max-len", "32", "--threads", "2", "--out", out], env={**os.environ, "QAC_QUIET": "0"})
check(r.returncode == 0 and "read from the checkpoint" in r.stderr, "MLM head read from the checkpoint " + r.stderr[-300:])
from safetensors.numpy import load_file  # noqa: E402
ref = load_file(os.path.join(mlm_dir, "model.safetensors"))
state = np.fromfile(os.path.join(out, "checkpoint-1", "training_state.qts"), dtype=np.uint8)
I, HL = 2 * C, 1
stack = HL * (3 * C * C + 3 * C + C * C + C + 2 * C + I * C + I + C * I + C + 2 * C)
# magic, header (version 3: 168, pooling and normalize, 32 of context, lengths and ratios), cursor (5 u64), the
# decoder layer
off = 8 + 176 + 32 + 40 + 4 * stack
head = state[off:off + 4 * (C * C + 3 * C + V)].view(np.float32)
want = np.concatenate([ref[k].reshape(-1) for k in (
    "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
    "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias")])
check(head.shape == want.shape and np.array_equal(head, want), "the training state's MLM head is the checkpoint's")
finish()
