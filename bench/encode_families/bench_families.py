#!/usr/bin/env python3
"""CPU encoding throughput of the encoder families at their real shapes:
qac against PyTorch (sentence-transformers' modules) on the same token ids
in the same run, and the cost of ModernBERT's local attention against its
global attention at 512 tokens.

Models (random weights at the real shapes: speed does not depend on the
values; tests/reference/gen_family_fixtures.py --real makes them, saved by
sentence-transformers, with tokenizers trained on Cranfield, so the
vocabularies are small but the layers are the real ones):
  e5_small        multilingual-e5-small (XLM-R: 12 layers, 384 hidden, mean)
  bge_m3_6l       bge-m3's layers (XLM-R large: 1024 hidden, 16 heads, 4096
                  intermediate), 6 of its 24, CLS
  gte_modernbert  gte-modernbert-base (22 layers, 768 hidden, GeGLU 1152,
                  local window 128 every layer but each third, CLS)

Texts: N Cranfield documents, tokenized once by the model's own tokenizer
(cut at MAX_LEN); both sides get those ids, sorted by length in batches of
32 (sentence-transformers' order), fp32, THREADS threads. Each side runs
ROUNDS times, alternating, and keeps its best. The attention line times one
layer's attention (12 heads of 64) over 512 random tokens, global and with
gte-modernbert's window (64 on each side), alternating, best of 20.

Run (under the bench lock, at normal priority):
  .venv/bin/python3 bench/encode_families/bench_families.py --build build [--n 64] [--threads 2]
      [--rounds 2] [--max-len 256] [--work ~/.cache/qac-bench-families] [--results bench/RESULTS.md [--note TEXT]]
--results adds the run (machine, date, the table) at the top of the
encode_families section of that file, newest first.
"""
import argparse
import datetime
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["e5_small", "bge_m3_6l", "gte_modernbert"]


def cranfield_docs(data):
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    from gen_family_fixtures import cranfield
    return cranfield(data)[0]


def torch_side(st, ids, threads):
    """sentence-transformers' modules on padded batches of 32, longest first."""
    import torch
    torch.set_num_threads(threads)
    pad = st.tokenizer.pad_token_id
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    batches = []
    for s in range(0, len(order), 32):
        chunk = [ids[i] for i in order[s:s + 32]]
        T = max(len(x) for x in chunk)
        t = torch.full((len(chunk), T), pad, dtype=torch.long)
        m = torch.zeros((len(chunk), T), dtype=torch.long)
        for i, x in enumerate(chunk):
            t[i, :len(x)] = torch.tensor(x)
            m[i, :len(x)] = 1
        batches.append({"input_ids": t, "attention_mask": m})
    with torch.inference_mode():
        st.forward(dict(batches[-1]))  # warm-up
        t0, c0 = time.perf_counter(), time.process_time()
        embs = [st.forward(dict(b))["sentence_embedding"] for b in batches]
        rate = len(ids) / (time.perf_counter() - t0), len(ids) / (time.process_time() - c0)
    emb = torch.cat(embs).float().numpy()
    back = emb.copy()
    back[order] = emb  # the input's order
    return rate, back


def min_cosine(a, b):
    import numpy as np
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())


def qac_side(bench, model_dir, ids_file, threads, dim):
    import numpy as np
    emb_file = ids_file + ".qac.f32"
    out = subprocess.run([bench, "encode", model_dir, ids_file, str(threads), emb_file], capture_output=True,
                         text=True, check=True).stdout
    kv = dict(x.split("=") for x in out.split()[1:])
    return (float(kv["passages_per_s"]), float(kv["cpu_passages_per_s"])), np.fromfile(emb_file, np.float32).reshape(-1, dim)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--work", default=os.path.expanduser("~/.cache/qac-bench-families"))
    ap.add_argument("--data", default=None, help="the folder holding cranfield/ (default: as the tests find it)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--results", default=None, help="add the run to this RESULTS.md's encode_families section")
    ap.add_argument("--note", default="", help="a line about the run (e.g. the machine's load)")
    a = ap.parse_args()
    lines = []

    def say(line):
        print(line, flush=True)
        lines.append(line)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    bench = os.path.join(a.build, "bench", "encode_families", "qac_bench_family")
    if a.data is None:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import testdata
        a.data = testdata.root()
    cran = os.path.join(a.data, "cranfield")
    names = a.models.split(",")
    missing = [n for n in names if not os.path.exists(os.path.join(a.work, n, "config.json"))]
    if missing:
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "reference", "gen_family_fixtures.py"), "--real",
                        "--out", a.work, "--data", cran, "--only", ",".join(missing)], check=True,
                       stdout=subprocess.DEVNULL)
    from sentence_transformers import SentenceTransformer
    docs = cranfield_docs(cran)
    cpu = open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": \t")
    load = os.getloadavg()[0]
    say(f"machine: {cpu}, {os.cpu_count()} cores, load {load:.1f} at the start; threads={a.threads} n={a.n} "
        f"max_len={a.max_len} best of {a.rounds} alternating rounds")
    say(f"{'model':<15} {'tokens':>7} {'qac_pass/s':>11} {'torch_pass/s':>12} {'ratio':>7} {'cpu_ratio':>9} {'min_cosine':>12}")
    for name in names:
        d = os.path.join(a.work, name)
        st = SentenceTransformer(d, device="cpu")
        tok = st.tokenizer
        ids = [tok(t, truncation=True, max_length=a.max_len)["input_ids"] for t in docs[:a.n]]
        ids_file = os.path.join(a.work, name + ".ids")
        with open(ids_file, "w") as f:
            f.write("".join(" ".join(map(str, x)) + "\n" for x in ids))
        q = t = (0.0, 0.0)
        dim = st[0].auto_model.config.hidden_size
        for _ in range(a.rounds):
            rq, eq = qac_side(bench, d, ids_file, a.threads, dim)
            rt, et = torch_side(st, ids, a.threads)
            q, t = max(q, rq), max(t, rt)
        mean_len = sum(len(x) for x in ids) / len(ids)
        say(f"{name:<15} {mean_len:>7.0f} {q[0]:>11.2f} {t[0]:>12.2f} {q[0] / t[0]:>6.2f}x {q[1] / t[1]:>8.2f}x "
            f"{min_cosine(eq, et):>12.9f}")
    out = subprocess.run([bench, "attention", "512", "768", "12", "64", "20", str(a.threads)], capture_output=True,
                         text=True, check=True).stdout
    say(out.strip())
    if a.results:
        shown = [x for i, x in enumerate(sys.argv[1:]) if x not in ("--data", "--note", "--work") and
                 (i == 0 or sys.argv[i] not in ("--data", "--note", "--work"))]  # no local paths, no note twice
        add_results(a.results, lines, a.note, " ".join(shown))


SECTION = "## encode_families: the encoder families' CPU throughput against PyTorch"
INTRO = """`bench/encode_families/bench_families.py`: qac's CPU encoder (fp32) against
sentence-transformers' modules on the same token ids, alternating rounds,
best of each, 2 threads each, at the real shapes of multilingual-e5-small,
bge-m3's layers (6 of 24) and gte-modernbert-base (random weights; speed does
not depend on them). ratio: wall-clock passages/s, qac over PyTorch;
cpu_ratio: the same per CPU second (steadier on a loaded machine);
min_cosine: the two sides' embeddings of the same ids, the lowest. The
attention line: one ModernBERT layer's attention at 512 tokens, global
against the local window of 64 on each side (CPU time, best of 20).
Rerun: `.venv/bin/python3 bench/encode_families/bench_families.py --build build --results bench/RESULTS.md`
"""


def add_results(path, lines, note, args):
    text = open(path, encoding="utf-8").read()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    block = f"\n### {date}\n\n" + (note + "\n\n" if note else "") + f"`bench_families.py {args}`\n\n```\n" + \
        "\n".join(lines) + "\n```\n"
    if SECTION not in text:
        at = text.index("\n## ") + 1
        text = text[:at] + SECTION + "\n\n" + INTRO + "\n" + text[at:]
    at = text.index(SECTION)
    at = text.index(INTRO, at) + len(INTRO) if INTRO in text[at:] else text.index("\n", at) + 1
    text = text[:at] + block + text[at:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
