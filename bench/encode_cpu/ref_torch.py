#!/usr/bin/env python3
"""PyTorch side of bench/encode_cpu: the same texts through
sentence-transformers (minilm) or a BERT-base-shaped transformers BertModel
with CLS pooling (bertbase), torch.set_num_threads(THREADS), batch 32.
DTYPE fp32 (default) runs in fp32; bf16 runs the forward under
torch.autocast("cpu", dtype=torch.bfloat16), as a user would ask PyTorch
for bf16 on a CPU (oneDNN's bf16 kernels where the CPU has them).
Usage: ref_torch.py CRAN_FILE MODEL_DIR|bertbase MAX_LEN N THREADS [DTYPE]"""
import contextlib
import resource
import sys
import time

import torch


def read_cranfield(path):
    docs, title, body, field = [], [], [], None
    def flush():
        if field is not None:
            docs.append(" ".join(x for x in (" ".join(title), " ".join(body)) if x))
    for raw in open(path, encoding="utf-8", errors="replace"):
        line = raw.strip()
        if raw.startswith(".I"):
            flush()
            title, body, field = [], [], ""
        elif len(line) == 2 and line[0] == "." and line[1].isupper():
            field = line[1]
        elif line and field == "T":
            title.append(line)
        elif line and field == "W":
            body.append(line)
    flush()
    return docs


def main():
    cran, model, max_len, n, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    dtype = sys.argv[6] if len(sys.argv) > 6 else "fp32"
    if dtype not in ("fp32", "bf16"):
        sys.exit(f"ref_torch.py: DTYPE must be fp32 or bf16, not {dtype}")
    torch.set_num_threads(threads)
    docs = read_cranfield(cran)
    texts = [docs[i % len(docs)] for i in range(n)]
    if model == "bertbase":
        from transformers import AutoTokenizer, BertConfig, BertModel
        from sentence_transformers import SentenceTransformer  # noqa: F401  (same imports as minilm)
        import os
        tok = AutoTokenizer.from_pretrained(os.environ["QAC_BENCH_TOKENIZER"])
        net = BertModel(BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                   intermediate_size=3072, max_position_embeddings=512), add_pooling_layer=False).eval()

        def encode(ts):
            out = []
            # sort by length like sentence-transformers does, batch 32
            order = sorted(range(len(ts)), key=lambda i: -len(ts[i]))
            with torch.inference_mode():
                for s in range(0, len(ts), 32):
                    b = tok([ts[i] for i in order[s:s + 32]], truncation=True, max_length=max_len, padding=True,
                            return_tensors="pt")
                    out.append(net(**b).last_hidden_state[:, 0])
            return torch.cat(out)
        name = "bertbase"
    else:
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(model, device="cpu")
        st.max_seq_length = max_len

        def encode(ts):
            return st.encode(ts, batch_size=32, convert_to_numpy=True)
        name = "minilm"
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()
    with amp:
        encode(texts[:32])  # warm-up
        t0, c0 = time.perf_counter(), time.process_time()
        encode(texts)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"torch {name} dtype={dtype} max_len={max_len} passages={n} seconds={dt:.3f} passages_per_s={n / dt:.2f} "
          f"peak_rss_mib={rss:.1f} cpu_passages_per_s={n / cpu:.2f}")


if __name__ == "__main__":
    main()
