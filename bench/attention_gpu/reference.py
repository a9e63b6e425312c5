"""Reference for bench_attention_gpu: PyTorch's scaled_dot_product_attention
on the same GPU at the same shapes (256 sequences x 128 tokens, 12 heads of
64 and of 32), each fused backend PyTorch can pick (cuDNN's, FlashAttention's,
memory-efficient), forward for inference, and the backward of a training
forward with attention dropout 0.1. Prints RESULT lines in the C bench's
format, with the same floor (Q, K, V read and O written once; backward: Q,
K, V, O, dO and the log-sum-exp read, dQ, dK, dV written once).
    python3 reference.py [peak_GBps] [reps]"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [("bert-base-256x128", 256, 128, 12, 64), ("minilm-256x128", 256, 128, 12, 32)]
BACKENDS = [("torch-cudnn", SDPBackend.CUDNN_ATTENTION), ("torch-flash", SDPBackend.FLASH_ATTENTION),
            ("torch-efficient", SDPBackend.EFFICIENT_ATTENTION)]


def time_us(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) * 1000.0 / reps)
    return best


def report(shape, prec, pas, path, us, floor, peak):
    gbps = floor / (us * 1e-6) / 1e9
    print(f"RESULT attention {shape} {prec} {pas} {path} - us {us:.1f} GBps {gbps:.0f} floor_frac {gbps / peak:.3f}",
          flush=True)


def main():
    peak = float(sys.argv[1]) if len(sys.argv) > 1 else 3350.0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    for prec, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        for name, B, T, NH, D in SHAPES:
            N, C = B * T, NH * D
            fwd_floor, bwd_floor = 4.0 * N * C * 2, 8.0 * N * C * 2 + N * NH * 4.0
            q, k, v = (torch.rand(B, NH, T, D, device="cuda", dtype=dtype) * 2 - 1 for _ in range(3))
            dout = torch.rand(B, NH, T, D, device="cuda", dtype=dtype) - 0.5
            for path, backend in BACKENDS:
                try:
                    with sdpa_kernel(backend), torch.inference_mode():
                        us = time_us(lambda: F.scaled_dot_product_attention(q, k, v), reps)
                    report(name, prec, "fwd", path, us, fwd_floor, peak)
                    if prec != "bf16":
                        continue
                    qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
                    with sdpa_kernel(backend):
                        us = time_us(lambda: F.scaled_dot_product_attention(qg, kg, vg, dropout_p=0.1), reps)
                        report(name, prec, "fwd-train", path, us, fwd_floor, peak)
                        out = F.scaled_dot_product_attention(qg, kg, vg, dropout_p=0.1)
                        us = time_us(lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True), reps)
                        report(name, prec, "bwd", path, us, bwd_floor, peak)
                except RuntimeError as e:  # a backend this GPU or build lacks
                    print(f"# {name} {prec} {path}: unavailable ({str(e).splitlines()[0][:120]})", flush=True)


if __name__ == "__main__":
    main()
