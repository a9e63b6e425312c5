#!/usr/bin/env python3
"""Reference gradients for the cross-encoder trainer (tests/xenc/), from
transformers' BertForSequenceClassification and torch autograd.

The model: a random BERT for sequence classification (2 layers, hidden 64,
4 heads, intermediate 128, the default model's vocabulary), its weights
drawn with torch's generator at std 0.1 (transformers' own 0.02 leaves
every [CLS] nearly the same vector), saved as an HF checkpoint directory
(OUT_DIR/l1, OUT_DIR/l2) that the C test loads with qac_xenc_load.

The batch is real: 3 Cranfield queries, each with a judged relevant
document first and 3 other documents (a group of n = 4), tokenized as pairs
by the default model's Hugging Face tokenizer (longest_first at 64 tokens,
token types 0 and 1). Each pair's score is its logit (one label) or
l1 - l0 (two); the loss is each group's softmax cross-entropy with the
positive as the target, averaged over the groups (Tevatron's reranker).

Cases: "l1" one label, "l2" two labels, both without dropout; "drop" one
label with dropout 0.1 at BERT's four sites and before the classifier,
torch given exactly the masks qac draws (key qac_rng_key(42, 0,
"drop", 0), pair i at row i; the classifier's at layer num_layers, site
0). Each runs in float32 and again in float64 (the whole model and loss),
so the C test can measure torch's own rounding.

Output (safetensors OUT_DIR/fixture.safetensors): "ids", "types" [P, T]
int32, "lens" [P]; "<case>.loss32", "<case>.loss64" (F64); for every
tensor of qac's layout (qac_bert_params order, Q/K/V fused, layers
stacked, the pooler as pooler_w/pooler_b) and cls_w, cls_b:
"<case>.g32.<tensor>" and "<case>.g64.<tensor>" (F32 / F64).

Run: python3 tests/reference/gen_xenc_fixtures.py --out DIR [--data DIR] [--model DIR]
"""
import argparse
import contextlib
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_train_fixtures import InjectedDropout, keep_scale, qac_dropout_masks, qac_layout, rng_key  # noqa: E402
import testdata  # noqa: E402  (gen_encoder_fixtures puts tests/ on the path)

CFG = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
           max_position_embeddings=128, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu", pad_token_id=0)
GROUPS, N, MAXLEN, STD = 3, 4, 64, 0.1
DROP = 0.1
STEP_STREAM = 0x64726F70  # "drop": the trainer's dropout key stream


def cranfield(data):
    """(documents' .W texts, queries, relevant doc numbers by query number): tests/testdata.py's reader."""
    docs, queries, rel = testdata.cranfield(data)
    return list(docs.values()), queries, {q: [int(d) for d in ds] for q, ds in rel.items()}


def make_batch(data, tok):
    docs, queries, rel = cranfield(data)
    a, b = [], []
    for g, qn in enumerate((3, 17, 40)):
        others = [d for d in (5 + 37 * g + 11 * k for k in range(20)) if d not in rel[qn]][:N - 1]
        for d in [rel[qn][0]] + others:
            a.append(queries[qn - 1])
            b.append(docs[d - 1])
    enc = tok(a, b, truncation="longest_first", max_length=MAXLEN)
    P, T = len(a), max(len(x) for x in enc["input_ids"])
    ids, types = np.zeros((P, T), np.int32), np.zeros((P, T), np.int32)
    lens = np.array([len(x) for x in enc["input_ids"]], np.int32)
    for i in range(P):
        ids[i, :lens[i]] = enc["input_ids"][i]
        types[i, :lens[i]] = enc["token_type_ids"][i]
    return ids, types, lens


def build(num_labels, tok_dir, out_dir, seed):
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(**CFG, num_labels=num_labels, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    cfg._attn_implementation = "eager"
    model = BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.named_parameters():
            if "LayerNorm.weight" in name:
                t.copy_(1 + 0.1 * torch.randn(t.shape, generator=g))
            else:
                t.copy_(STD * torch.randn(t.shape, generator=g))
    model.save_pretrained(out_dir, safe_serialization=True)
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(tok_dir, f)):
            shutil.copy(os.path.join(tok_dir, f), out_dir)
    return model


def head_masks(key, P, C, L, p):
    """The classifier's dropout masks: layer L, site 0, position 0 of each pair."""
    cols = np.arange(C, dtype=np.uint64)
    return np.stack([keep_scale(rng_key(int(key), i, L, 0), cols, p) for i in range(P)])


def run_case(model, ids, types, lens, drop, dtype):
    m = model.to(dtype)
    m.zero_grad()
    ids_t, types_t = torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(types.astype(np.int64))
    mask = (torch.arange(ids.shape[1])[None, :] < torch.from_numpy(lens.astype(np.int64))[:, None]).long()
    P, T = ids.shape
    c = dict(CFG)
    ctx = InjectedDropout() if drop else contextlib.nullcontext()
    with ctx as inj:
        if drop:
            key = rng_key(42, 0, STEP_STREAM, 0)
            masks = qac_dropout_masks(key, 0, P, T, c, drop) + [head_masks(key, P, c["hidden_size"],
                                                                           c["num_hidden_layers"], drop)]
            inj.queue = [x.astype(np.float64 if dtype == torch.float64 else np.float32) for x in masks]
            m.train()
        else:
            m.eval()
        logits = m(input_ids=ids_t, attention_mask=mask, token_type_ids=types_t).logits
        if drop:
            assert not inj.queue, "every mask was used"
    s = logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]
    loss = torch.nn.functional.cross_entropy(s.view(GROUPS, N), torch.zeros(GROUPS, dtype=torch.long))
    loss.backward()
    out = {k: v.astype(np.float64 if dtype == torch.float64 else np.float32)
           for k, v in qac_layout(m.bert, c, "grad").items()}
    out["pooler_w"] = m.bert.pooler.dense.weight.grad.detach().numpy()
    out["pooler_b"] = m.bert.pooler.dense.bias.grad.detach().numpy()
    out["cls_w"] = m.classifier.weight.grad.detach().numpy()
    out["cls_b"] = m.classifier.bias.grad.detach().numpy()
    return float(loss.item()), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "../../../shared/data/cranfield"))
    ap.add_argument("--model", default=os.path.expanduser("~/.local/share/qac/models/all-MiniLM-L6-v2"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.model)
    ids, types, lens = make_batch(a.data, tok)
    os.makedirs(a.out, exist_ok=True)
    tensors = {"ids": ids, "types": types, "lens": lens}
    models = {1: build(1, a.model, os.path.join(a.out, "l1"), 35), 2: build(2, a.model, os.path.join(a.out, "l2"), 36)}
    for case, nl, drop in (("l1", 1, 0.0), ("l2", 2, 0.0), ("drop", 1, DROP)):
        for dtype, tag in ((torch.float32, "32"), (torch.float64, "64")):
            loss, grads = run_case(models[nl], ids, types, lens, drop, dtype)
            tensors[f"{case}.loss{tag}"] = np.array([loss], np.float64)
            for k, v in grads.items():
                tensors[f"{case}.g{tag}.{k}"] = np.ascontiguousarray(v)
        models[nl].to(torch.float32)
    from safetensors.numpy import save_file
    path = os.path.join(a.out, "fixture.safetensors")
    save_file(tensors, path + ".tmp", metadata={"groups": str(GROUPS), "n": str(N), "dropout": str(DROP)})
    os.replace(path + ".tmp", path)
    print(f"{path}: {len(tensors)} tensors, {ids.shape[0]} pairs of up to {ids.shape[1]} tokens")


if __name__ == "__main__":
    main()
