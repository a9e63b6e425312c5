#!/usr/bin/env python3
"""qac's CPU encoder (fp32, bf16, int8) against sentence-transformers with
the ONNX Runtime and OpenVINO backends (fp32, int8), in the same run,
alternating rounds, each side's best round kept.

Workloads, each on two models: the default model (all-MiniLM-L6-v2) and a
BERT-base-shaped one (12 layers, 768 hidden; random weights from
transformers' own initialisation, saved as a sentence-transformers directory
that every side loads: the same weights everywhere):
  passages  Cranfield documents cut at 128 tokens, batch 64: throughput
  queries   the same texts cut at 32 tokens, one at a time (batch 1): the
            latency a single request sees
All sides use THREADS threads (2). qac runs through qac_bench_encode (the
library's encode call); the references through ref_backends.py, in their
own environment (its docstring has the install line).

    bench/encode_int8/run.py --build build \\
        --ref-python ~/venv-cpubench/bin/python --cache ~/.cache/qac-bench-int8

The cache holds the ONNX and OpenVINO exports and the BERT-base model (made
once). Prints one table per model and workload: passages/s (wall), per
second of process CPU time, ms per text, and the ratios of qac int8 to the
faster reference int8 (best rounds, and with more than 2 rounds also the
medians of the rounds: the best round favours the side whose rounds spread
more), to qac fp32 and to qac bf16."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def shared_data(build):
    if os.environ.get("QAC_SHARED_DATA"):
        return os.environ["QAC_SHARED_DATA"]
    try:
        for line in open(os.path.join(build, "CMakeCache.txt")):
            if line.startswith("QAC_SHARED_DATA:"):
                return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return os.path.join(ROOT, "..", "shared", "data")


def parse(line):
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", line)}


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"run.py: {' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    return [parse(l) for l in p.stdout.splitlines() if "passages_per_s=" in l]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ref-python", default=os.path.expanduser("~/venv-cpubench/bin/python"))
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/qac-bench-int8"))
    ap.add_argument("--data", help="folder holding cranfield/ and debian-packages/ (default: $QAC_SHARED_DATA, the "
                    "build's QAC_SHARED_DATA, or ../shared/data beside the clone)")
    ap.add_argument("--model", default=os.path.expanduser("~/.local/share/qac/models/all-MiniLM-L6-v2"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="minilm,bertbase")
    ap.add_argument("--sides", default="qac-fp32,qac-bf16,qac-int8,onnx-fp32,onnx-int8,openvino-fp32,openvino-int8")
    ap.add_argument("--passages", type=int, default=512, help="passages per round (BERT-base: a quarter)")
    ap.add_argument("--queries", type=int, default=200, help="queries per round (BERT-base: half)")
    ap.add_argument("--json", help="also write the best rounds here")
    args = ap.parse_args()
    args.data = args.data or shared_data(args.build)
    os.makedirs(args.cache, exist_ok=True)
    texts = os.path.join(args.cache, "cranfield.txt")
    if not os.path.exists(texts):
        with open(texts + ".tmp", "w", encoding="utf-8") as f:
            for d in read_cranfield(os.path.join(args.data, "cranfield", "cran.all.1400")):
                f.write(d.replace("\n", " ") + "\n")
        os.replace(texts + ".tmp", texts)
    calib = os.path.join(args.cache, "calib")  # OpenVINO's calibration texts: Debian descriptions, not Cranfield
    if not os.path.exists(os.path.join(calib, "train.jsonl")):
        import gzip
        os.makedirs(calib, exist_ok=True)
        with gzip.open(os.path.join(args.data, "debian-packages", "packages.jsonl.gz"), "rt") as f, \
                open(os.path.join(calib, "train.jsonl"), "w") as out:
            for i, line in enumerate(f):
                if i % 97 == 0:
                    out.write(json.dumps({"text": json.loads(line)["text"]}) + "\n")
    bertbase = os.path.join(args.cache, "bertbase")
    if "bertbase" in args.models and not os.path.isdir(bertbase):
        run([args.ref_python, os.path.join(ROOT, "bench", "encode_int8", "ref_backends.py"), "make-bertbase",
             bertbase, args.model])
    bench = os.path.join(args.build, "bench", "encode_cpu", "qac_bench_encode")
    models = {"minilm": args.model, "bertbase": bertbase}
    sides = args.sides.split(",")
    results = {}
    print(f"machine: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, "
          f"{os.cpu_count()} cores; threads={args.threads}, best of {args.rounds} alternating rounds", flush=True)
    for mname in args.models.split(","):
        mdir = models[mname]
        div = 4 if mname == "bertbase" else 1
        runs = [("passages", 128, 64, args.passages // div), ("queries", 32, 1, args.queries // (2 if div > 1 else 1))]
        best, every = {}, {}
        for r in range(args.rounds):
            for side in sides:
                kind, dtype = side.split("-")
                if kind == "qac":
                    env = dict(os.environ, QAC_BENCH_DTYPE=dtype)
                    lines = [run([bench, texts, mdir, str(ml), str(n), str(args.threads), str(b)], env)[0]
                             for _, ml, b, n in runs]
                else:
                    spec = ",".join(f"{ml}:{b}:{n}" for _, ml, b, n in runs)
                    lines = run([args.ref_python, os.path.join(ROOT, "bench", "encode_int8", "ref_backends.py"),
                                 "--model", mdir, "--backend", kind, "--dtype", dtype, "--texts", texts, "--runs",
                                 spec, "--threads", str(args.threads), "--cache", args.cache, "--calib", calib])
                for (wl, _, _, _), got in zip(runs, lines):
                    key = (wl, side)
                    every.setdefault(key, []).append(got["passages_per_s"])
                    if key not in best or got["passages_per_s"] > best[key]["passages_per_s"]:
                        best[key] = got
                print(f"  round {r + 1} {mname} {side}: " +
                      ", ".join(f"{wl} {g['passages_per_s']:.1f}/s" for (wl, _, _, _), g in zip(runs, lines)), flush=True)
        for wl, ml, b, n in runs:
            print(f"\n{mname}, {wl} ({ml} tokens, batch {b}, {n} texts a round)")
            print(f"{'side':<15} {'texts/s':>9} {'texts/CPU-s':>12} {'ms/text':>9}")
            for side in sides:
                g = best[(wl, side)]
                print(f"{side:<15} {g['passages_per_s']:9.2f} {g['cpu_passages_per_s']:12.2f} {g['ms_per_text']:9.3f}")
            q = best.get((wl, "qac-int8"))
            refs = [s for s in ("onnx-int8", "openvino-int8") if (wl, s) in best]
            if q and refs:
                fast = max(refs, key=lambda s: best[(wl, s)]["passages_per_s"])
                print(f"qac int8 / {fast} (the faster reference int8): "
                      f"{q['passages_per_s'] / best[(wl, fast)]['passages_per_s']:.2f}x")
                if args.rounds > 2:  # the best round favours the side whose rounds spread more
                    med = {s: statistics.median(every[(wl, s)]) for s in ("qac-int8", fast)}
                    print(f"  by the medians of the rounds: {med['qac-int8']:.2f} / {med[fast]:.2f} = "
                          f"{med['qac-int8'] / med[fast]:.2f}x")
            for other in ("qac-fp32", "qac-bf16"):
                if q and (wl, other) in best:
                    print(f"qac int8 / {other}: {q['passages_per_s'] / best[(wl, other)]['passages_per_s']:.2f}x")
            results.update({f"{mname}/{wl}/{s}": best[(wl, s)] for s in sides})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
