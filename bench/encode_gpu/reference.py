"""Reference for bench_encode_gpu: Hugging Face BertModel in PyTorch, same
precision, SDPA attention, same GPU. Prints RESULT lines in the C bench's
format.
    python3 reference.py [bf16|fp16] [passages] [batch] [peak_tflops] [MODEL:LENGTHS:TAG ...]
Each MODEL:LENGTHS:TAG (default bert-base:128:) is one run: MODEL is
"bert-base" (BERT-base's shape, BertModel's own random initialisation, CLS
pooling) or a model directory (mean pooling and L2 normalisation, as
sentence-transformers runs the default model); LENGTHS a token count or a
"length count" file (bench/encode_gpu/lengths.txt), expanded and taken at
evenly spaced places (all of it when passages equals its 16,384), as the C
bench does. Variable lengths run as a user would run
them (sentence-transformers does the same): sorted by length, longest
first, batches padded to their longest, with the attention mask. The
classic run (empty TAG) also times single-query latency at 32 tokens."""
import os
import statistics
import sys
import time

import torch
from transformers import BertConfig, BertModel

MSMARCO = 8841823
DEV = os.environ.get("QAC_REFERENCE_DEVICE", "cuda")  # "cpu" only to try the script without a GPU


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def lengths(spec, n):
    try:
        return [int(spec)] * n
    except ValueError:
        pass
    all_lens = []
    with open(spec) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            length, count = (int(x) for x in line.split())
            all_lens += [length] * count
    return [all_lens[i * len(all_lens) // n] for i in range(n)]  # evenly over the distribution


def run(prec, n, batch, peak, model_spec, len_spec, tag):
    dtype = torch.bfloat16 if prec == "bf16" else torch.float16
    if model_spec == "bert-base":
        cfg = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, max_position_embeddings=512, attn_implementation="sdpa")
        model = BertModel(cfg, add_pooling_layer=False)
        mean_pool = False
    else:
        model = BertModel.from_pretrained(model_spec, add_pooling_layer=False, attn_implementation="sdpa")
        cfg = model.config
        mean_pool = True
    model = model.to(DEV, dtype).eval()
    lens = lengths(len_spec, n)
    order = sorted(range(n), key=lambda i: -lens[i])
    tmax = max(lens)
    ids = torch.randint(1000, 30000, (n, tmax), device=DEV)
    ids[:, 0] = 101
    lens_t = torch.tensor(lens, device=DEV)
    pos = torch.arange(tmax, device=DEV)[None, :]
    ids[pos == (lens_t[:, None] - 1)] = 102
    mask = (pos < lens_t[:, None]).long()
    ids = ids * mask
    batches = []
    for s in range(0, n, batch):
        idx = torch.tensor(order[s:s + batch], device=DEV)
        t = max(lens[i] for i in order[s:s + batch])
        batches.append((ids[idx, :t], mask[idx, :t]))

    def encode(b_ids, b_mask):
        h = model(input_ids=b_ids, attention_mask=b_mask).last_hidden_state
        if mean_pool:
            m = b_mask[:, :, None].to(h.dtype)
            v = (h * m).sum(1) / m.sum(1).clamp(min=1)
            return torch.nn.functional.normalize(v.float(), dim=1)
        return h[:, 0]

    C, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    flop = sum(2.0 * T * L * (4 * C * C + 2 * C * I) + L * 4.0 * T * T * C for T in lens)
    with torch.inference_mode():
        for b_ids, b_mask in batches:
            encode(b_ids, b_mask).float().cpu()
        sync()
        best = 1e30
        for _ in range(3):
            t0 = time.perf_counter()
            for b_ids, b_mask in batches:
                encode(b_ids, b_mask).float().cpu()
            sync()
            best = min(best, time.perf_counter() - t0)
        pps = n / best
        print(f"RESULT torch_{prec}{tag}_passages_per_s {pps:.1f}")
        print(f"RESULT torch_{prec}{tag}_mean_tokens {sum(lens) / n:.2f}")
        print(f"RESULT torch_{prec}{tag}_tflops {flop / best / 1e12:.1f}")
        print(f"RESULT torch_{prec}{tag}_mfu {flop / best / 1e12 / peak:.3f}")
        print(f"RESULT torch_{prec}{tag}_msmarco_hours {MSMARCO / pps / 3600:.3f}")
        print(f"RESULT torch_{prec}{tag}_msmarco_minutes {MSMARCO / pps / 60:.2f}")
        if tag:
            return
        TQ = 32
        q = torch.randint(1000, 30000, (1, TQ), device=DEV)
        qm = torch.ones_like(q)
        for _ in range(20):
            encode(q, qm).float().cpu()
        lat = []
        for _ in range(200):
            t0 = time.perf_counter()
            encode(q, qm).float().cpu()
            lat.append(time.perf_counter() - t0)
        lat.sort()
        print(f"RESULT torch_{prec}_query_latency_ms_p50 {statistics.median(lat) * 1e3:.3f}")
        print(f"RESULT torch_{prec}_query_latency_ms_p99 {lat[len(lat) * 99 // 100] * 1e3:.3f}")


def main():
    prec = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    peak = float(sys.argv[4]) if len(sys.argv) > 4 else 989.0
    for spec in sys.argv[5:] or ["bert-base:128:"]:
        model_spec, len_spec, tag = spec.rsplit(":", 2)
        run(prec, n, batch, peak, model_spec, len_spec, tag)
        if DEV == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
