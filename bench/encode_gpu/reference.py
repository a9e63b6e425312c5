"""Reference for bench_encode_gpu: Hugging Face BertModel in PyTorch, same
BERT-base shape, same precision, SDPA attention, same GPU. Prints RESULT
lines in the C bench's format.
    python3 reference.py [bf16|fp16] [passages] [batch] [peak_tflops]"""
import statistics
import sys
import time

import torch
from transformers import BertConfig, BertModel

MSMARCO = 8841823


def main():
    prec = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    peak = float(sys.argv[4]) if len(sys.argv) > 4 else 989.0
    dtype = torch.bfloat16 if prec == "bf16" else torch.float16
    cfg = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, max_position_embeddings=512, attn_implementation="sdpa")
    model = BertModel(cfg, add_pooling_layer=False).to("cuda", dtype).eval()
    T, TQ = 128, 32
    ids = torch.randint(1000, 30000, (n, T), device="cuda")
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        model(input_ids=ids[:batch], attention_mask=mask[:batch])
        torch.cuda.synchronize()
        best = 1e30
        for _ in range(3):
            t0 = time.perf_counter()
            for i in range(0, n, batch):
                out = model(input_ids=ids[i:i + batch], attention_mask=mask[i:i + batch]).last_hidden_state[:, 0]
                out.float().cpu()
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        pps = n / best
        C, I, L = 768, 3072, 12
        flop = 2.0 * T * L * (4 * C * C + 2 * C * I) + L * 4.0 * T * T * C
        print(f"RESULT torch_{prec}_passages_per_s {pps:.1f}")
        print(f"RESULT torch_{prec}_tflops {pps * flop / 1e12:.1f}")
        print(f"RESULT torch_{prec}_mfu {pps * flop / 1e12 / peak:.3f}")
        print(f"RESULT torch_{prec}_msmarco_hours {MSMARCO / pps / 3600:.3f}")
        q = torch.randint(1000, 30000, (1, TQ), device="cuda")
        qm = torch.ones_like(q)
        for _ in range(20):
            model(input_ids=q, attention_mask=qm).last_hidden_state[:, 0].float().cpu()
        lat = []
        for _ in range(200):
            t0 = time.perf_counter()
            model(input_ids=q, attention_mask=qm).last_hidden_state[:, 0].float().cpu()
            lat.append(time.perf_counter() - t0)
        lat.sort()
        print(f"RESULT torch_{prec}_query_latency_ms_p50 {statistics.median(lat) * 1e3:.3f}")
        print(f"RESULT torch_{prec}_query_latency_ms_p99 {lat[len(lat) * 99 // 100] * 1e3:.3f}")


if __name__ == "__main__":
    main()
