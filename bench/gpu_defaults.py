"""The GPU kernels' defaults chosen from a sweep's numbers.

    python3 bench/gpu_defaults.py gpu-sweep.tsv [COMMIT] [GPU] > gpu-defaults.h

Reads the TSV scripts/gpu_run.sh writes in its sweep phase (one row per
RESULT or VARIANT line: the step, then the line's fields) and prints a
complete kernels/qac_gpu_defaults.h: every default with the figures that
chose it in a comment beside it. Commit it by copying it there. The rules:

- attention tiles: per kernel (forward; the backward's dK/dV and dQ), the
  compiled variant with the least time summed over the sweep's bf16 shapes
  (the encoder's and the trainer's precision); the current default unless
  another is more than 2% faster;
- cuDNN's attention: off when qac's fastest forward beats it on every bf16
  shape, else auto (the encoder then measures both on each shape's first
  batch and keeps the faster); auto when cuDNN did not run (the reason is
  in the sweep's NOTE lines);
- the encoder's tunables, each varied alone from the default: a value is
  taken when it gives more than 2% more passages/s without costing more
  than 5% of single-query latency (the graphs and buckets: when both query
  latencies fall by more than 2%); the mean pooling's warps by passages/s
  on the default model;
- the flat search's tuning, each field varied alone: the value whose
  geometric mean of time ratios to the default over batches 1, 16 and 256
  is below 0.98, with hits identical to the default's; fields combined.
Values not measured keep the current default (read from the committed
kernels/qac_gpu_defaults.h beside this script)."""
import math
import os
import re
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
CURRENT = os.path.join(HERE, "..", "kernels", "qac_gpu_defaults.h")
ENC_FIELDS = ["graphs", "graph_rows", "graph_batch", "ln_warps", "pool_warps", "gelu_rows", "prune"]
ENC_VARIANTS = {  # bench/encode_gpu/variants.sh's names: (field, value)
    "no-graphs": ("graphs", 0), "no-buckets": ("graph_rows", 0), "ln-block": ("ln_warps", 0),
    "ln-1warp": ("ln_warps", 1), "ln-2warps": ("ln_warps", 2), "ln-8warps": ("ln_warps", 8),
    "ln-16warps": ("ln_warps", 16), "gelu-1row": ("gelu_rows", 1), "gelu-16rows": ("gelu_rows", 16),
    "no-prune": ("prune", 0),
}


def current_defaults(path=CURRENT):
    """The committed defaults: {macro: value text}."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"#define (QAC_\w+) (.*)$", line.strip())
            if m:
                out[m.group(1)] = m.group(2)
    return out


def read_tsv(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3:
                rows.append(parts)
    return rows


def field(parts, name):
    """The value after a name in a line's fields (RESULT ... us 12.3 ...)."""
    for i, p in enumerate(parts[:-1]):
        if p == name:
            try:
                return float(parts[i + 1])
            except ValueError:
                return None
    return None


def variant_tuple(name):
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)(?:x(\d+))?", name)
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4) or 1))


def choose_tiles(rows, cur):
    """{macro: (tuple, comment)} for the three kernels."""
    times = {"fwd": {}, "dkdv": {}, "dq": {}}  # kernel -> variant -> shape -> us
    cudnn, qac_fwd = {}, {}
    for p in rows:
        if p[1] != "RESULT" or len(p) < 10 or p[2] != "attention":
            continue
        shape, prec, pas, path, var = p[3], p[4], p[5], p[6], p[7]
        us = field(p, "us")
        if us is None or prec != "bf16":
            continue
        if path == "cudnn" and pas == "fwd":
            cudnn[shape] = us
        if path != "fused":
            continue
        if pas == "fwd":
            kern, v = "fwd", var
            qac_fwd[shape] = min(qac_fwd.get(shape, us), us)
        elif pas == "bwd" and ":" in var:
            kern, v = var.split(":", 1)
        else:
            continue
        t = variant_tuple(v)
        if t and kern in times:
            times[kern].setdefault(t, {})[shape] = us
    out = {}
    for kern, macro in (("fwd", "QAC_FA_FWD_DEFAULT"), ("dkdv", "QAC_FA_DKDV_DEFAULT"), ("dq", "QAC_FA_DQ_DEFAULT")):
        now = tuple(int(x) for x in cur[macro].replace(" ", "").split(","))
        by = times[kern]
        shapes = set()
        for v in by.values():
            shapes |= set(v)
        full = {t: sum(v.values()) for t, v in by.items() if set(v) == shapes and shapes}
        if not full:
            out[macro] = (now, "not measured: kept")
            continue
        best = min(full, key=lambda t: (full[t], t != now))
        pick = best if now not in full or full[best] < 0.98 * full[now] else now
        listed = ", ".join("%s %.1f" % ("x".join(map(str, t)), full[t]) for t in sorted(full, key=full.get))
        out[macro] = (pick, "us summed over %d bf16 shapes: %s" % (len(shapes), listed))
    return out, cudnn, qac_fwd


def choose_cudnn(cudnn, qac_fwd, cur):
    now = int(cur["QAC_CUDNN_MODE_DEFAULT"])
    if not cudnn:
        return 2, "cuDNN did not run in the sweep (its NOTE says why): auto, measured per shape at run time"
    wins = [s for s in cudnn if s in qac_fwd and cudnn[s] < qac_fwd[s]]
    listed = ", ".join("%s cuDNN %.1f us / qac %.1f us" % (s, cudnn[s], qac_fwd.get(s, float("nan")))
                       for s in sorted(cudnn))
    if not wins:
        return 0, "qac's forward beat cuDNN's on every bf16 shape: off (%s)" % listed
    return 2, "cuDNN faster on %d of %d bf16 shapes: auto (%s)" % (len(wins), len(cudnn), listed)


def choose_encoder(rows, cur):
    vals = dict(zip(ENC_FIELDS, (int(x) for x in cur["QAC_ENC_TUNABLES_DEFAULT"].replace(" ", "").split(","))))
    notes = []
    enc = {}
    pool = {}
    for p in rows:
        if p[1] != "VARIANT" or len(p) < 5:
            continue
        if p[2] == "encode" and p[3] != "best":
            enc[p[3]] = (field(p, "passages_per_s"), field(p, "query_ms"), field(p, "query16_ms"))
        elif p[2] == "encode-minilm":
            m = re.fullmatch(r"pool-(\d+)warps", p[3])
            if m and field(p, "passages_per_s"):
                pool[int(m.group(1))] = field(p, "passages_per_s")
    base = enc.get("default")
    if base and None not in base:
        gains = {}
        for name, (f, v) in ENC_VARIANTS.items():
            r = enc.get(name)
            if not r or None in r:
                continue
            if f in ("graphs", "graph_rows"):
                ok = r[1] < 0.98 * base[1] and r[2] < 0.98 * base[2]
                score = base[1] / r[1]
            else:
                ok = r[0] > 1.02 * base[0] and r[1] <= 1.05 * base[1]
                score = r[0] / base[0]
            notes.append("%s %.0f/s %.3f/%.3f ms" % (name, r[0], r[1], r[2]))
            if ok and score > gains.get(f, (1.0, None))[0]:
                gains[f] = (score, v)
        for f, (_, v) in gains.items():
            vals[f] = v
        notes.insert(0, "default %.0f passages/s, query %.3f ms, 16 queries %.3f ms" % base)
    if pool:
        now = vals["pool_warps"]
        best = max(pool, key=lambda w: (pool[w], w == now))
        if now not in pool or pool[best] > 1.02 * pool[now]:
            vals["pool_warps"] = best
        notes.append("pool warps: " + ", ".join("%d %.0f/s" % (w, pool[w]) for w in sorted(pool)))
    return vals, "; ".join(notes) if notes else "not measured: kept"


def choose_search(rows, cur):
    runs, differ = {}, set()
    for p in rows:
        if p[1] == "VARIANT" and len(p) >= 9 and p[2] == "search" and p[3] != "best":
            t = [field(p, "b1_ms"), field(p, "b16_ms"), field(p, "b256_ms")]
            if None not in t and all(x > 0 for x in t):
                runs[p[3]] = t
        if p[1] == "CHECK" and len(p) > 3 and p[2] == "variant":
            differ.add(p[3])
    base = runs.get("default")
    if not base:
        return cur["QAC_GPU_FLAT_TUNING_DEFAULT"].strip('"'), "not measured: kept"
    best = {}
    for spec, t in runs.items():
        if spec == "default" or spec in differ or "," in spec or "=" not in spec:
            continue
        g = math.exp(sum(math.log(a / b) for a, b in zip(t, base)) / 3)
        name = spec.split("=", 1)[0]
        if g < 0.98 and g < best.get(name, (1.0, None))[0]:
            best[name] = (g, spec)
    pick = ",".join(best[n][1] for n in sorted(best))
    listed = "; ".join("%s %.2f" % (best[n][1], best[n][0]) for n in sorted(best)) or "none below 0.98"
    return pick, "default %.3f / %.3f / %.3f ms at batches 1 / 16 / 256; taken (time ratio): %s" % (*base, listed)


def comment(text):
    """A C comment of text, wrapped at 100 columns."""
    lines = textwrap.wrap(text.replace("*/", "* /"), 96) or [""]
    if len(lines) == 1:
        return ["/* %s */" % lines[0]]
    return ["/* " + lines[0]] + [" * " + x for x in lines[1:-1]] + [" * %s */" % lines[-1]]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = read_tsv(argv[1])
    commit = argv[2] if len(argv) > 2 else "?"
    gpu = argv[3] if len(argv) > 3 else "a GPU"
    cur = current_defaults()
    tiles, cudnn, qac_fwd = choose_tiles(rows, cur)
    mode, mode_why = choose_cudnn(cudnn, qac_fwd, cur)
    enc, enc_why = choose_encoder(rows, cur)
    flat, flat_why = choose_search(rows, cur)
    o = []
    o.append("/* The GPU kernels' defaults, chosen by measurement: written by")
    o.append(" * bench/gpu_defaults.py from scripts/gpu_run.sh's sweep (the rules are")
    o.append(" * in its docstring), each value beside the figures that chose it. Each")
    o.append(" * stays replaceable through the environment (docs/gpu-attention.md,")
    o.append(" * docs/gpu-encoder.md, docs/gpu-search.md). Plain C: read by C and CUDA. */")
    o.append("#ifndef QAC_GPU_DEFAULTS_H")
    o.append("#define QAC_GPU_DEFAULTS_H")
    o.append("")
    o.append('#define QAC_GPU_DEFAULTS_SOURCE "measured on %s, bundle %s"' % (gpu.replace('"', "'"), commit))
    o.append("")
    for macro in ("QAC_FA_FWD_DEFAULT", "QAC_FA_DKDV_DEFAULT", "QAC_FA_DQ_DEFAULT"):
        t, why = tiles[macro]
        o += comment(why)
        o.append("#define %s %s" % (macro, ", ".join(map(str, t))))
    o.append("")
    o += comment(mode_why)
    o.append("#define QAC_CUDNN_MODE_DEFAULT %d" % mode)
    o.append("")
    o += comment("graphs, graph_rows, graph_batch, ln_warps, pool_warps, gelu_rows, prune: " + enc_why)
    o.append("#define QAC_ENC_TUNABLES_DEFAULT %s" % ", ".join(str(enc[f]) for f in ENC_FIELDS))
    o.append("")
    o += comment(flat_why)
    o.append('#define QAC_GPU_FLAT_TUNING_DEFAULT "%s"' % flat)
    o.append("")
    o.append("#endif")
    print("\n".join(o))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
