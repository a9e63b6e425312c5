#!/usr/bin/env python3
"""A PyTorch reference for qac finetune --cross-encoder: the same groups in
the same order, from the same initial weights, with the same optimiser, and
the two per-step loss curves side by side.

qac's run writes its groups (--dump-batches: each step's queries, query ids,
passages and docids, the positive first) and its per-step log (log.jsonl);
this script checks each group (the positive is a qrels positive of the
query, the negatives are not, the passages are distinct), trains
transformers' BertForSequenceClassification on exactly those groups
(tokenized by the Hugging Face tokenizer as pairs, longest_first at
--max-len), the softmax cross-entropy of each group with the positive first,
averaged over the groups, AdamW with Hugging Face Trainer's decay groups (no
decay on biases and LayerNorm weights), gradient clipping at 1.0 and the
linear schedule with warmup (lr 0 at the first step, as get_linear_schedule
_with_warmup), dropout off (qac's run must be given --dropout 0), and prints
each step's loss, learning rate and gradient norm against qac's.

INIT is qac's initial reranker: `build/tests/xenc/qac_xenc_tool fresh MODEL
INIT 1 SEED` writes the reranker qac finetune --cross-encoder --seed SEED
starts from MODEL (its pooler, the classifier qac draws), so both sides
start from the same weights.

  .venv/bin/python3 bench/rerank_study/torch_ref.py --init INIT \\
      --dump DUMP.jsonl --log RUN/log.jsonl [--qrels TRAIN.qrels] \\
      --lr 1e-4 --warmup 9 --total 90 --max-len 128 [--steps 30] [--eval ...]

With --json OUT the curves are written as {"qac": [...], "torch": [...]}.
"""
import argparse
import json
import math
import os
import sys

import torch


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_groups(steps, qrels):
    """Each group: the positive first and relevant, the negatives not, every
    passage distinct. Returns the number of groups checked."""
    n = 0
    for s in steps:
        for qid, docs in zip(s["qids"], s["docids"]):
            assert len(set(docs)) == len(docs), f"step {s['step']} query {qid}: repeated passages {docs}"
            if qrels is not None:
                rel = qrels.get(qid, {})
                assert rel.get(docs[0], 0) > 0, f"step {s['step']} query {qid}: first passage {docs[0]} not relevant"
                for d in docs[1:]:
                    assert rel.get(d, 0) <= 0, f"step {s['step']} query {qid}: negative {d} is relevant"
            n += 1
    return n


def read_qrels(path):
    out = {}
    for line in open(path):
        f = line.split()  # TREC's "qid 0 docid rel" or "qid docid rel"
        if len(f) in (3, 4):
            out.setdefault(f[0], {})[f[-2]] = int(f[-1])
    return out


def lr_at(step, lr, warmup, total):
    """transformers' get_linear_schedule_with_warmup at 0-based step."""
    if step < warmup:
        return lr * step / max(1, warmup)
    return lr * max(0.0, (total - step) / max(1, total - warmup))


def train(init, steps, lr, warmup, total, wd, max_len, dtype=torch.float32, max_grad_norm=1.0):
    """The per-step {step, loss, lr, grad_norm} of the reference run on
    the dumped steps (dtype: float32, or float64 for its own deviation)."""
    from transformers import AutoTokenizer, BertForSequenceClassification
    tok = AutoTokenizer.from_pretrained(init)
    model = BertForSequenceClassification.from_pretrained(init, hidden_dropout_prob=0.0,
                                                          attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
    model.to(dtype).train()
    decay, no_decay = [], []
    for name, prm in model.named_parameters():
        (no_decay if "bias" in name or "LayerNorm.weight" in name else decay).append(prm)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.999), eps=1e-8)
    out = []
    for i, s in enumerate(steps):
        qs = [q for q, g in zip(s["queries"], s["passages"]) for _ in g]
        ps = [p for g in s["passages"] for p in g]
        G, n = len(s["passages"]), len(s["passages"][0])
        enc = tok(qs, ps, truncation="longest_first", max_length=max_len, padding=True, return_tensors="pt")
        logits = model(**enc).logits
        scores = logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]
        loss = torch.nn.functional.cross_entropy(scores.view(G, n).double(), torch.zeros(G, dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
        cur = lr_at(i, lr, warmup, total)
        for g in opt.param_groups:
            g["lr"] = cur
        opt.step()
        out.append({"step": s["step"], "loss": loss.item(), "lr": cur, "grad_norm": norm})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--qrels")
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--warmup", type=int, required=True, help="warmup steps (qac: round(ratio * total))")
    ap.add_argument("--total", type=int, required=True, help="the run's total steps (the schedule's length)")
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=0, help="compare the first N steps (0: all in the dump)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    steps = read_jsonl(a.dump)
    qac = read_jsonl(a.log)
    if a.steps:
        steps = steps[:a.steps]
    qac = qac[:len(steps)]
    ng = check_groups(steps, read_qrels(a.qrels) if a.qrels else None)
    print(f"{ng} groups checked: the positive first and relevant, negatives not relevant, passages distinct",
          file=sys.stderr)
    ref = train(a.init, steps, a.lr, a.warmup, a.total, a.wd, a.max_len)
    print("step\tqac_loss\ttorch_loss\trel_diff\tqac_lr\ttorch_lr\tqac_gnorm\ttorch_gnorm")
    worst = 0.0
    for q, t in zip(qac, ref):
        rel = abs(q["loss"] - t["loss"]) / abs(t["loss"])
        worst = max(worst, rel)
        print(f"{t['step']}\t{q['loss']:.6f}\t{t['loss']:.6f}\t{rel:.2e}\t{q['lr']:.3e}\t{t['lr']:.3e}\t"
              f"{q['grad_norm']:.5f}\t{t['grad_norm']:.5f}")
    print(f"worst relative loss difference over {len(ref)} steps: {worst:.2e}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"qac": qac, "torch": ref}, f)


if __name__ == "__main__":
    main()
