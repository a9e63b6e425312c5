#!/usr/bin/env python3
"""The same training in sentence-transformers: MultipleNegativesRankingLoss
(scale 1/tau) with hard negatives, on exactly the batches `qac finetune
--dry-run --dump-batches` drew (same examples, order, positives and
negatives), with the same optimiser (AdamW, no decay on biases and
LayerNorm, linear schedule with warmup, clip 1.0) as `fit` uses. Saves the
model for `qac index build`; prints seconds per step and per epoch.

Usage: st_train.py --model INIT --batches B.jsonl --out DIR --lr LR --warmup W
       --wd WD --tau TAU --q-max Q --p-max P --threads T --seed S --epochs E"""
import argparse
import json
import os
import shutil
import time

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.losses import MultipleNegativesRankingLoss
from transformers import get_linear_schedule_with_warmup

ap = argparse.ArgumentParser()
for a, t in (("--model", str), ("--batches", str), ("--out", str), ("--lr", float), ("--warmup", int),
             ("--wd", float), ("--tau", float), ("--q-max", int), ("--p-max", int), ("--threads", int),
             ("--seed", int), ("--epochs", float)):
    ap.add_argument(a, type=t, required=True)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)
batches = [json.loads(l) for l in open(args.batches)]
model = SentenceTransformer(args.model, device="cpu")
orig_max = model.max_seq_length
loss_fn = MultipleNegativesRankingLoss(model, scale=1.0 / args.tau)
no_decay = ("bias", "LayerNorm.bias", "LayerNorm.weight")
params = list(loss_fn.named_parameters())
groups = [{"params": [p for n, p in params if not any(nd in n for nd in no_decay)], "weight_decay": args.wd},
          {"params": [p for n, p in params if any(nd in n for nd in no_decay)], "weight_decay": 0.0}]
opt = torch.optim.AdamW(groups, lr=args.lr)
sched = get_linear_schedule_with_warmup(opt, args.warmup, len(batches))


def features(texts, max_len):
    model.max_seq_length = max_len
    return model.tokenize(texts)


model.train()
t0 = time.time()
for b in batches:
    n = len(b["passages"][0])
    cols = [features(b["queries"], args.q_max)]
    cols += [features([g[j] for g in b["passages"]], args.p_max) for j in range(n)]
    loss = loss_fn(cols, None)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(loss_fn.parameters(), 1.0)
    opt.step()
    sched.step()
seconds = time.time() - t0
model.max_seq_length = orig_max  # as the checkpoint had it, like qac's
model.save(args.out)
# newer sentence-transformers save only tokenizer.json; qac reads vocab.txt
for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
    src, dst = os.path.join(args.model, f), os.path.join(args.out, f)
    if os.path.exists(src) and not os.path.exists(dst):
        shutil.copy(src, dst)
print(json.dumps({"steps": len(batches), "seconds": seconds, "seconds_per_epoch": seconds / args.epochs,
                  "final_loss": loss.item()}))
