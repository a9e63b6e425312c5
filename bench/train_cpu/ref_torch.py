#!/usr/bin/env python3
"""PyTorch side of bench/train_cpu: the same fine-tuning step as
qac_bench_train (same texts, same token ids, transformers BertModel in train
mode with the checkpoint's dropout, mean pooling + normalisation as the
default model's config, InfoNCE tau 0.05 on cosine, torch.optim.AdamW with
weight decay 0.01 off biases and LayerNorm weights, grad-norm clip 1.0),
same thread count. Prints one line like the qac side.
Usage: ref_torch.py CRAN_DIR MODEL_DIR NQ N Q_LEN P_LEN STEPS THREADS"""
import os
import resource
import sys
import time

import torch
from transformers import BertModel, BertTokenizerFast

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/reference"))
from gen_encoder_fixtures import read_cranfield  # noqa: E402
from gen_train_fixtures import read_queries  # noqa: E402


def main():
    cran, model_dir = sys.argv[1], sys.argv[2]
    nq, n, qlen, plen, steps, threads = map(int, sys.argv[3:9])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    queries = read_queries(os.path.join(cran, "cran.qry"))[:nq]
    docs = read_cranfield(os.path.join(cran, "cran.all.1400"))[:nq * n]
    tok = BertTokenizerFast.from_pretrained(model_dir)
    q = tok(queries, truncation=True, max_length=qlen, padding=True, return_tensors="pt")
    p = tok(docs, truncation=True, max_length=plen, padding=True, return_tensors="pt")
    tokens = int(q["attention_mask"].sum() + p["attention_mask"].sum())
    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False)
    model.train()
    decay = [t for k, t in model.named_parameters() if not (k.endswith("bias") or "LayerNorm.weight" in k)]
    rest = [t for k, t in model.named_parameters() if k.endswith("bias") or "LayerNorm.weight" in k]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=2e-5)

    def enc(x):
        h = model(**x).last_hidden_state
        m = x["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=1)

    def step():
        opt.zero_grad(set_to_none=True)
        s = enc(q) @ enc(p).T / 0.05
        loss = torch.nn.functional.cross_entropy(s, torch.arange(nq) * n)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    first = step()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(steps):
        last = step()
    secs = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / steps
    rss = r1.ru_maxrss / 1024
    print(f"torch steps={steps} seconds={secs:.3f} passages_per_s={steps * nq * n / secs:.2f} "
          f"tokens_per_s={steps * tokens / secs:.1f} cpu_s_per_step={cpu:.2f} peak_rss_mib={rss:.0f} first_loss={first:.6f} "
          f"last_loss={last:.6f}")


if __name__ == "__main__":
    main()
