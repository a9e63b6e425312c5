"""Reference for bench_train_gpu: Hugging Face BertModel (SDPA attention)
fine-tuned with bf16 autocast and torch.optim.AdamW(fused=True), the same
BERT-base shape, batch, loss (InfoNCE over [CLS], dot, tau 1), dropout 0.1,
clip 1.0, on the same GPU. Prints RESULT lines in the C bench's format.
    python3 reference.py [queries] [passages] [q_len] [p_len] [steps] [peak_tflops]"""
import sys
import time

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel


def main():
    a = sys.argv[1:]
    nq = int(a[0]) if len(a) > 0 else 64
    n = int(a[1]) if len(a) > 1 else 8
    qT = int(a[2]) if len(a) > 2 else 32
    pT = int(a[3]) if len(a) > 3 else 128
    steps = int(a[4]) if len(a) > 4 else 20
    peak = float(a[5]) if len(a) > 5 else 989.0
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, max_position_embeddings=512, hidden_dropout_prob=0.1,
                     attention_probs_dropout_prob=0.1, attn_implementation="sdpa")
    model = BertModel(cfg, add_pooling_layer=False).to("cuda").train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
    np_ = nq * n
    q = torch.randint(1000, 30000, (nq, qT), device="cuda")
    p = torch.randint(1000, 30000, (np_, pT), device="cuda")
    q[:, 0], q[:, -1], p[:, 0], p[:, -1] = 101, 102, 101, 102
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
        return loss

    for _ in range(3):
        first = step().item()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    last = loss.item()
    torch.cuda.synchronize()
    sec = (time.perf_counter() - t0) / steps
    C, I, L = 768, 3072, 12
    tokens = nq * qT + np_ * pT
    flop = 6.0 * L * (4 * C * C + 2 * C * I) * tokens + 12.0 * L * C * (nq * qT * qT + np_ * pT * pT)
    print(f"RESULT torch_bf16_step_ms {sec * 1e3:.2f}")
    print(f"RESULT torch_bf16_tokens_per_s {tokens / sec:.0f}")
    print(f"RESULT torch_bf16_tflops {flop / sec / 1e12:.1f}")
    print(f"RESULT torch_bf16_mfu {flop / sec / 1e12 / peak:.3f}")
    print(f"NOTE torch loss {first:.4f} -> {last:.4f} over {steps} steps")


if __name__ == "__main__":
    main()
