"""Reference for bench_train_gpu: Hugging Face BertModel (SDPA attention)
fine-tuned with bf16 autocast and torch.optim.AdamW(fused=True), the same
BERT-base shape, batch, loss (InfoNCE over [CLS], dot, tau 1), dropout 0.1,
clip 1.0, on the same GPU. Prints RESULT lines in the C bench's format.
    python3 reference.py --init DIR [queries] [passages] [q_len] [p_len]
        writes the model both sides start from (BertModel's initialisation,
        seed 0, as an HF directory) and the batch's ids (DIR/batch.i32); CPU only
    python3 reference.py [queries] [passages] [q_len] [p_len] [steps] [peak_tflops] [init_dir]
        times the training steps, from init_dir when given"""
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel


def config():
    return BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, max_position_embeddings=512, hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12)


def write_init(out, nq, n, qT, pT):
    torch.manual_seed(0)
    model = BertModel(config(), add_pooling_layer=False)
    model.save_pretrained(out, safe_serialization=True)
    # qac loads a tokenizer with every model: a vocabulary of the config's
    # size with BERT's special tokens at their usual ids.
    vocab = [f"[unused{i}]" for i in range(30522)]
    vocab[0], vocab[100], vocab[101], vocab[102], vocab[103] = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    g = np.random.default_rng(0)
    q = g.integers(1000, 30000, (nq, qT), dtype=np.int32)
    p = g.integers(1000, 30000, (nq * n, pT), dtype=np.int32)
    for x in (q, p):
        x[:, 0], x[:, -1] = 101, 102
    with open(os.path.join(out, "batch.i32"), "wb") as f:
        f.write(q.tobytes() + p.tobytes())


def main():
    a = sys.argv[1:]
    if a and a[0] == "--init":
        dims = [int(x) for x in a[2:6]] + [64, 8, 32, 128][len(a[2:6]):]
        write_init(a[1], *dims)
        return
    nq = int(a[0]) if len(a) > 0 else 64
    n = int(a[1]) if len(a) > 1 else 8
    qT = int(a[2]) if len(a) > 2 else 32
    pT = int(a[3]) if len(a) > 3 else 128
    steps = int(a[4]) if len(a) > 4 else 20
    peak = float(a[5]) if len(a) > 5 else 989.0
    init = a[6] if len(a) > 6 else None
    np_ = nq * n
    torch.manual_seed(0)
    if init:
        model = BertModel.from_pretrained(init, attn_implementation="sdpa", add_pooling_layer=False)
        ids = np.fromfile(os.path.join(init, "batch.i32"), dtype=np.int32)
        q = torch.from_numpy(ids[: nq * qT].reshape(nq, qT).astype(np.int64)).to("cuda")
        p = torch.from_numpy(ids[nq * qT:].reshape(np_, pT).astype(np.int64)).to("cuda")
    else:
        model = BertModel(config(), add_pooling_layer=False, attn_implementation="sdpa")
        q = torch.randint(1000, 30000, (nq, qT), device="cuda")
        p = torch.randint(1000, 30000, (np_, pT), device="cuda")
        q[:, 0], q[:, -1], p[:, 0], p[:, -1] = 101, 102, 101, 102
    model = model.to("cuda").train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
    qm, pm = torch.ones_like(q), torch.ones_like(p)
    target = torch.arange(nq, device="cuda") * n

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            qr = model(input_ids=q, attention_mask=qm).last_hidden_state[:, 0]
            pr = model(input_ids=p, attention_mask=pm).last_hidden_state[:, 0]
        scores = qr.float() @ pr.float().T
        loss = F.cross_entropy(scores, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    first = step().item()
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    losses = [step() for _ in range(steps)]  # read after the timing: no host sync inside it
    torch.cuda.synchronize()
    sec = (time.perf_counter() - t0) / steps
    losses = [x.item() for x in losses]
    C, I, L = 768, 3072, 12
    tokens = nq * qT + np_ * pT
    flop = 6.0 * L * (4 * C * C + 2 * C * I) * tokens + 12.0 * L * C * (nq * qT * qT + np_ * pT * pT)
    print(f"RESULT torch_bf16_step_ms {sec * 1e3:.2f}")
    print(f"RESULT torch_bf16_tokens_per_s {tokens / sec:.0f}")
    print(f"RESULT torch_bf16_tflops {flop / sec / 1e12:.1f}")
    print(f"RESULT torch_bf16_mfu {flop / sec / 1e12 / peak:.3f}")
    print(f"RESULT torch_loss_first {first:.4f}")
    print(f"RESULT torch_loss_last {losses[-1]:.4f}")
    print("LOSSES torch " + " ".join(f"{x:.4f}" for x in losses))
    print(f"NOTE torch loss {first:.4f} -> {losses[-1]:.4f} over {steps + 3} steps ({init or 'random init, random ids'})")


if __name__ == "__main__":
    main()
