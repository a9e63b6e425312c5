#!/usr/bin/env python3
"""PyTorch side of bench/pretrain_cpu: the same pre-training step as
qac_bench_pretrain on the same token ids (the batch it dumped), written the
way the reference implementations write it: transformers' BertModel in
train mode (the checkpoint's dropout, its default attention), fresh
transformers BertLayer heads (2 for the Condenser head, 1 for the CoT-MAE
decoder) and a BertOnlyMLMHead with its decoder tied to the word
embeddings; coCondenser: head MLM + late MLM + the symmetric contrastive
loss over the raw [CLS]; CoT-MAE: encoder MLM + decoder MLM, each text the
other's decoder target; torch.optim.AdamW (lr 1e-4, weight decay 0.01 off
biases and LayerNorm) over encoder and heads, grad-norm clip 1.0, same
thread count. Prints one line like the qac side.
Usage: ref_torch.py DUMP MODEL_DIR cocondenser|cotmae STEPS THREADS"""
import resource
import sys
import time

import numpy as np
import torch
from transformers import BertModel
from transformers.models.bert.modeling_bert import BertLayer, BertOnlyMLMHead


def read_dump(path, cot):
    x = np.fromfile(path, dtype=np.int32)
    B, k, sides = int(x[0]), 1, []
    for _ in range(4 if cot else 2):
        T = int(x[k])
        k += 1
        ids, lab = x[k:k + B * T].reshape(B, T), x[k + B * T:k + 2 * B * T].reshape(B, T)
        k += 2 * B * T
        lens = x[k:k + B]
        k += B
        sides.append(tuple(torch.from_numpy(a.astype(np.int64)) for a in (ids, lab, lens)))
    return B, sides


def main():
    dump, model_dir, objective = sys.argv[1:4]
    steps, threads = int(sys.argv[4]), int(sys.argv[5])
    cot = objective == "cotmae"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    B, sides = read_dump(dump, cot)
    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False)
    cfg = model.config
    heads = torch.nn.ModuleList([BertLayer(cfg) for _ in range(1 if cot else 2)])
    mlm = BertOnlyMLMHead(cfg)
    heads.apply(model._init_weights), mlm.apply(model._init_weights)
    mlm.predictions.decoder.weight = model.embeddings.word_embeddings.weight
    for m in (model, heads, mlm):
        m.train()
    named = [(k, t) for part in (model, heads, mlm) for k, t in part.named_parameters()]
    seen, decay, rest = set(), [], []
    for k, t in named:
        if id(t) in seen:
            continue
        seen.add(id(t))
        (rest if k.endswith("bias") or "LayerNorm.weight" in k else decay).append(t)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}], lr=1e-4)
    tokens = int(sum(s[2].sum() for s in sides[:2]))

    def keep(lens, T):
        return torch.arange(T)[None, :] < lens[:, None]

    def ext(lens, T):  # additive mask for the bare layers
        return (~keep(lens, T))[:, None, None, :].float() * torch.finfo(torch.float32).min

    def mlm_loss(hs, labels):
        h = torch.cat([x.reshape(-1, x.shape[-1]) for x in hs])
        lab = torch.cat([y.reshape(-1) for y in labels])
        sel = lab >= 0
        return torch.nn.functional.cross_entropy(mlm(h[sel]), lab[sel])

    def step():
        opt.zero_grad(set_to_none=True)
        outs = []
        for ids, _, lens in sides[:2]:
            outs.append(model(input_ids=ids, attention_mask=keep(lens, ids.shape[1]).long(),
                              output_hidden_states=not cot))
        lasts = [o.last_hidden_state for o in outs]
        if not cot:
            hx = []
            for (ids, _, lens), o in zip(sides[:2], outs):
                x = torch.cat([o.last_hidden_state[:, :1], o.hidden_states[cfg.num_hidden_layers // 2][:, 1:]], 1)
                for layer in heads:
                    x = layer(x, attention_mask=ext(lens, ids.shape[1]))
                hx.append(x)
            labels = [s[1] for s in sides[:2]]
            cls = torch.stack([lasts[0][:, 0], lasts[1][:, 0]], 1).reshape(2 * B, -1)
            S = (cls @ cls.T).masked_fill(torch.eye(2 * B, dtype=torch.bool), float("-inf"))
            loss = mlm_loss(hx, labels) + mlm_loss(lasts, labels) + torch.nn.functional.cross_entropy(
                S, torch.arange(2 * B) ^ 1)
        else:
            dx = []
            for s, (dids, _, dlens) in enumerate(sides[2:]):
                x = model.embeddings(input_ids=dids)
                x = torch.cat([lasts[s][:, :1], x[:, 1:]], 1)
                for layer in heads:
                    x = layer(x, attention_mask=ext(dlens, dids.shape[1]))
                dx.append(x)
            loss = mlm_loss(lasts, [s[1] for s in sides[:2]]) + mlm_loss(dx, [s[1] for s in sides[2:]])
        loss.backward()
        torch.nn.utils.clip_grad_norm_([t for g in opt.param_groups for t in g["params"]], 1.0)
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
    print(f"torch objective={objective} steps={steps} seconds={secs:.3f} pairs_per_s={steps * B / secs:.2f} "
          f"tokens_per_s={steps * tokens / secs:.1f} cpu_s_per_step={cpu:.2f} peak_rss_mib={r1.ru_maxrss / 1024:.0f} "
          f"first_loss={first:.6f} last_loss={last:.6f}")


if __name__ == "__main__":
    main()
