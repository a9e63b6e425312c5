#!/usr/bin/env python3
"""PyTorch's own bf16-against-fp32 drift on a fine-tuning run: the same
steps as `qac finetune` on exactly the batches it drew (`qac finetune
--dry-run --dump-batches`), trained by transformers' BertModel with mean
pooling, L2 normalisation and InfoNCE over in-batch passages (1/tau
scaled dot products of the normalised vectors, as qac with --sim dot on a
normalising checkpoint), AdamW (no decay on biases and LayerNorm), linear
schedule with warmup, gradient clip 1.0, as qac's defaults.

--precision:
  fp32      everything in fp32;
  bf16      the mixed-precision recipe: the encoder under torch.autocast
            (bfloat16 matrix-product inputs, fp32 accumulation), with
            softmax and LayerNorm in fp32 as CUDA autocast's op policy puts
            them (CPU autocast would leave them in bf16); pooling,
            normalisation, similarities and the loss in fp32 outside
            autocast; fp32 master weights and AdamW state;
  bf16-cpu  plain CPU autocast over the whole step (softmax, LayerNorm,
            normalisation and the similarity product in bf16 too), for
            comparison.

Dropout: the model's rates (hidden and attention-probability), each mask
drawn from its own generator seeded by (--dropout-seed, step, the call's
index in the step), so two runs with the same --dropout-seed use the same
masks whatever their precision (the draw does not depend on the dtype).

--device cuda runs the same on a GPU, under CUDA autocast (whose own op
policy keeps softmax and LayerNorm in fp32), without TF32 and without
reduced-precision (bf16) split-K reductions, as qac sets cuBLAS.

Writes one JSON line per step: step, loss, grad_norm, lr, seconds. With
--grad-err N it trains nothing: for each of the first N batches it takes the
gradient at the initial weights in fp32 and in bf16 (the same masks) and
prints, per parameter tensor in qac's layout (layers stacked, Q, K and V as
one qkv tensor, the key bias left out as its gradient is zero in exact
arithmetic), the relative error ||g_bf16 - g_fp32|| / ||g_fp32||, the
largest over the batches, as "GRADERR name value" lines.

Usage: drift.py --model DIR --batches B.jsonl --out OUT.jsonl --precision P
       [--tau 0.05] [--lr 2e-5] [--warmup-ratio 0.1] [--wd 0.01]
       [--q-max 32] [--p-max 128] [--threads 2] [--dropout-seed 42] [--steps N]
       [--device cpu|cuda] [--grad-err N]"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertModel, get_linear_schedule_with_warmup

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--batches", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--precision", choices=("fp32", "bf16", "bf16-cpu"), required=True)
ap.add_argument("--tau", type=float, default=0.05)
ap.add_argument("--lr", type=float, default=2e-5)
ap.add_argument("--warmup-ratio", type=float, default=0.1)
ap.add_argument("--wd", type=float, default=0.01)
ap.add_argument("--q-max", type=int, default=32)
ap.add_argument("--p-max", type=int, default=128)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--dropout-seed", type=int, default=42)
ap.add_argument("--steps", type=int, default=0)
ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
ap.add_argument("--grad-err", type=int, default=0)
args = ap.parse_args()
dev = torch.device(args.device)
if args.device == "cuda":
    # the recipe: fp32 accumulation throughout (no TF32 in fp32, no split-K
    # partial sums reduced in bf16), as qac's trainers set cuBLAS
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
torch.set_num_threads(args.threads)
torch.manual_seed(0)

batches = [json.loads(l) for l in open(args.batches) if l.strip()]
if args.steps:
    batches = batches[: args.steps]
tok = AutoTokenizer.from_pretrained(args.model)
# fp32 master weights whatever the checkpoint stores (a bf16 copy included)
model = BertModel.from_pretrained(args.model, attn_implementation="eager", add_pooling_layer=False,
                                  dtype=torch.float32).to(dev)
model.train()

# ---- dropout with masks independent of the precision ----
drop_state = {"step": 0, "call": 0}
_orig_dropout = F.dropout


def keyed_dropout(x, p=0.5, training=True, inplace=False):
    if not training or p == 0.0:
        return x
    g = torch.Generator().manual_seed(
        (args.dropout_seed * 1000003 + drop_state["step"]) * 1000003 + drop_state["call"])
    drop_state["call"] += 1
    keep = (torch.rand(x.shape, generator=g) >= p).to(x.device)
    return x * keep.to(x.dtype) * (1.0 / (1.0 - p))


F.dropout = keyed_dropout
torch.nn.functional.dropout = keyed_dropout

# ---- CUDA autocast's fp32 ops, on the CPU ----
_orig_softmax, _orig_layer_norm = F.softmax, F.layer_norm


def softmax_fp32(x, dim=None, _stacklevel=3, dtype=None):
    with torch.autocast(args.device, enabled=False):
        return _orig_softmax(x.float(), dim=dim)


def layer_norm_fp32(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    with torch.autocast(args.device, enabled=False):
        return _orig_layer_norm(x.float(), normalized_shape, None if weight is None else weight.float(),
                                None if bias is None else bias.float(), eps)


if args.precision == "bf16":
    F.softmax = softmax_fp32
    torch.nn.functional.softmax = softmax_fp32
    F.layer_norm = layer_norm_fp32
    torch.nn.functional.layer_norm = layer_norm_fp32

no_decay = ("bias", "LayerNorm.weight")
named = list(model.named_parameters())
groups = [{"params": [p for n, p in named if not any(k in n for k in no_decay)], "weight_decay": args.wd},
          {"params": [p for n, p in named if any(k in n for k in no_decay)], "weight_decay": 0.0}]
opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
sched = get_linear_schedule_with_warmup(opt, round(args.warmup_ratio * len(batches)), len(batches))


def encode(texts, max_len):
    f = {k: v.to(dev) for k, v in tok(texts, max_length=max_len, truncation=True, padding=True,
                                       return_tensors="pt").items()}
    h = model(input_ids=f["input_ids"], attention_mask=f["attention_mask"],
              token_type_ids=f.get("token_type_ids")).last_hidden_state
    m = f["attention_mask"].unsqueeze(-1)
    if args.precision == "bf16":
        h = h.float()  # pooling and what follows in fp32
    return h, m


def pooled(h, m):
    v = (h * m.to(h.dtype)).sum(1) / m.sum(1).to(h.dtype)
    return F.normalize(v, dim=-1)


def ctx(precision):
    if precision == "fp32":
        return torch.autocast(args.device, enabled=False)
    return torch.autocast(args.device, dtype=torch.bfloat16)


def batch_loss(b, step, precision):
    """The loss of batch b at dropout step `step`, in the given precision."""
    drop_state["step"], drop_state["call"] = step, 0
    n = len(b["passages"][0])
    passages = [g[j] for g in b["passages"] for j in range(n)]  # query i's group at i n .. i n + n - 1
    with ctx(precision):
        hq, mq = encode(b["queries"], args.q_max)
        hp, mp = encode(passages, args.p_max)
        if precision == "bf16-cpu":
            q, p = pooled(hq, mq), pooled(hp, mp)
            scores = q @ p.T / args.tau
    if precision != "bf16-cpu":
        q, p = pooled(hq, mq), pooled(hp, mp)
        scores = q @ p.T / args.tau
    target = torch.arange(len(b["queries"]), device=dev) * n
    return F.cross_entropy(scores.float(), target)


def qac_layout(grads):
    """Gradients by qac's tensor names, layers stacked (qkv: Q, K, V rows)."""
    out = {}
    emb = "embeddings."
    for name, key in (("word_emb", "word_embeddings.weight"), ("pos_emb", "position_embeddings.weight"),
                      ("type_emb", "token_type_embeddings.weight"), ("emb_ln_w", "LayerNorm.weight"),
                      ("emb_ln_b", "LayerNorm.bias")):
        out[name] = grads[emb + key].flatten()
    L = model.config.num_hidden_layers
    per = {"qkv_w": [], "qkv_b": [], "attn_out_w": [], "attn_out_b": [], "ln1_w": [], "ln1_b": [], "ffn_in_w": [],
           "ffn_in_b": [], "ffn_out_w": [], "ffn_out_b": [], "ln2_w": [], "ln2_b": []}
    for l in range(L):
        a = f"encoder.layer.{l}."
        g = lambda k: grads[a + k].flatten()
        per["qkv_w"] += [g("attention.self.query.weight"), g("attention.self.key.weight"),
                         g("attention.self.value.weight")]
        per["qkv_b"] += [g("attention.self.query.bias"), g("attention.self.value.bias")]  # key bias: zero
        per["attn_out_w"].append(g("attention.output.dense.weight"))
        per["attn_out_b"].append(g("attention.output.dense.bias"))
        per["ln1_w"].append(g("attention.output.LayerNorm.weight"))
        per["ln1_b"].append(g("attention.output.LayerNorm.bias"))
        per["ffn_in_w"].append(g("intermediate.dense.weight"))
        per["ffn_in_b"].append(g("intermediate.dense.bias"))
        per["ffn_out_w"].append(g("output.dense.weight"))
        per["ffn_out_b"].append(g("output.dense.bias"))
        per["ln2_w"].append(g("output.LayerNorm.weight"))
        per["ln2_b"].append(g("output.LayerNorm.bias"))
    out.update({k: torch.cat(v) for k, v in per.items()})
    return out


if args.grad_err:
    worst = {}
    for i, b in enumerate(batches[: args.grad_err]):
        gs = {}
        for precision in ("fp32", args.precision):
            model.zero_grad()
            batch_loss(b, i + 1, precision).backward()
            gs[precision] = qac_layout({n: p.grad.detach().double().clone() for n, p in model.named_parameters()})
        for name, g32 in gs["fp32"].items():
            e = ((gs[args.precision][name] - g32).norm() / g32.norm()).item()
            worst[name] = max(worst.get(name, 0.0), e)
    for name, e in worst.items():
        print(f"GRADERR {name} {e:.4g}")
    sys.exit(0)

tmp = args.out + ".tmp"
with open(tmp, "w") as out:
    for i, b in enumerate(batches):
        t0 = time.time()
        loss = batch_loss(b, i + 1, args.precision)
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        out.write(json.dumps({"step": i + 1, "loss": loss.item(), "grad_norm": norm.item(), "lr": lr,
                              "seconds": time.time() - t0}) + "\n")
        out.flush()
os.replace(tmp, args.out)
