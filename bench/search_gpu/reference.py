"""Reference for bench_search_gpu: torch.matmul + torch.topk over the same
synthetic fp16 corpus (same counter hash as the C bench), same GPU.
    python3 reference.py [rows] [k]"""
import statistics
import sys
import time

import torch

DIM, NQ, CHUNK = 768, 256, 1 << 20
QUERY_OFFSET = 1 << 40


def hash_values(start, count):
    idx = torch.arange(start, start + count, device="cuda", dtype=torch.int64)
    v = (idx * 2654435761) & 0xFFFFFFFF
    v = v ^ (v >> 15)
    v = (v * 2246822519) & 0xFFFFFFFF
    v = v ^ (v >> 13)
    return (v.double() / 4294967296.0 * 2.0 - 1.0).float()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8841823
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    x = torch.empty((n, DIM), device="cuda", dtype=torch.float16)
    for r in range(0, n, CHUNK):
        m = min(CHUNK, n - r)
        x[r:r + m] = hash_values(r * DIM, m * DIM).view(m, DIM).half()
    q = hash_values(QUERY_OFFSET, NQ * DIM).view(NQ, DIM).half()
    for b in (1, 16, 256):
        qb = q[:b]

        def run():
            s, i = torch.topk(torch.matmul(qb, x.T), k, dim=1)
            return s.float().cpu(), i.cpu()

        run()
        torch.cuda.synchronize()
        reps = 30 if b == 1 else 15 if b == 16 else 7
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            _, rows = run()
            ts.append(time.perf_counter() - t0)
        med = statistics.median(ts)
        print(f"RESULT torch_b{b}_ms {med * 1e3:.3f}")
        print(f"RESULT torch_b{b}_qps {b / med:.1f}")
        print(f"RESULT torch_b{b}_top1_row {int(rows[0, 0])}")


if __name__ == "__main__":
    main()
