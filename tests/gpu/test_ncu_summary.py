#!/usr/bin/env python3
"""bench/profile_gpu/ncu_summary.py on CSV written as Nsight Compute writes
it (--csv, one row per kernel launch and metric: the columns of its details
page, ==PROF== lines before the table, quoted fields, thousands separators,
units chosen per row): every kernel's calls and total must be the sums over
its launches, computed here from the launches the file was written from,
shares the totals over the grand total, rows ordered by total, the rows past
the limit summed into one, other metrics ignored; and a file without the
metric is an error. Runs without a GPU."""
import csv
import io
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY = os.path.join(HERE, "..", "..", "bench", "profile_gpu", "ncu_summary.py")
COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
           "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
UNITS = [("nsecond", 1e-3), ("usecond", 1.0), ("msecond", 1e3)]


def write_csv(path, launches, rng):
    """launches: (full kernel name, microseconds); each written in a random unit."""
    buf = io.StringIO()
    buf.write("==PROF== Connected to process 4242 (/x/bench_encode_gpu)\n")
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(COLUMNS)
    for i, (name, us) in enumerate(launches):
        unit, scale = rng.choice(UNITS)
        v = us / scale
        text = f"{v:,.3f}" if unit == "nsecond" else f"{v:.6f}"  # ncu groups thousands
        base = [str(i), "4242", "bench", "host", name, "1", "13", "(256, 1, 1)", "(40, 1, 1)", "0", "9.0",
                "Command line profiler metrics"]
        w.writerow(base + ["gpu__time_duration.sum", unit, text])
        if i % 7 == 0:  # another metric on the same launch: ignored
            w.writerow(base + ["dram__bytes.sum", "byte", "1,048,576"])
    with open(path, "w") as f:
        f.write(buf.getvalue())


def run(path, *args):
    return subprocess.run([sys.executable, SUMMARY, path, *args], capture_output=True, text=True)


def main():
    rng = random.Random(int(os.environ.get("QAC_TEST_SEED", "20261126")))
    tmp = scratch.mkdtemp(prefix="qac-ncu-")
    kernels = [f"void (anonymous namespace)::k{i}<__nv_bfloat16, {i % 4}, true>(qac_enc::args{i})" for i in range(40)]
    kernels.append("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1_execute_"
                   "segment_k_off_kernel__5x_cublas")
    launches = []
    for _ in range(3000):
        k = rng.randrange(len(kernels))
        launches.append((kernels[k], rng.uniform(0.5, 50.0) * (k + 1)))
    path = os.path.join(tmp, "run.csv")
    write_csv(path, launches, rng)

    # what the table must say, from the launches themselves
    def short(n):  # these names' parameter lists hold no parentheses
        s = re.sub(r"\([^()]*\)$", "", n)
        s = re.sub(r"^void ", "", s).replace("(anonymous namespace)::", "")
        return s if len(s) <= 72 else s[:69] + "..."
    per = {}
    for n, us in launches:
        c, t = per.get(short(n), (0, 0.0))
        per[short(n)] = (c + 1, t + us)
    total = sum(t for _, t in per.values())
    order = sorted(per.items(), key=lambda kv: -kv[1][1])

    rows = 12
    r = run(path, "--name", "encode", "--rows", str(rows))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    head = re.match(r"PROFILE encode: (\d+) launches of (\d+) kernels, ([\d.]+) us on the GPU", lines[0])
    assert head, lines[0]
    assert int(head.group(1)) == len(launches) and int(head.group(2)) == len(per), lines[0]
    # each printed total is rounded to 0.1 us; the units' conversion is exact to ~1e-9 relative
    assert abs(float(head.group(3)) - total) <= 0.05 + 1e-9 * total, (head.group(3), total)
    body = [ln for ln in lines[3:] if ln.startswith("| ")]
    assert len(body) == rows + 1, len(body)
    prev = float("inf")
    for ln, (name, (calls, us)) in zip(body[:rows], order):
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert cells[0] == name, (cells[0], name)
        assert int(cells[1]) == calls, (name, cells[1], calls)
        assert abs(float(cells[2]) - us) <= 0.05 + 1e-9 * us, (name, cells[2], us)
        assert abs(float(cells[3].rstrip("%")) - 100 * us / total) <= 0.05, (name, cells[3])
        assert abs(float(cells[4]) - us / calls) <= 0.005 + 1e-9 * us, (name, cells[4])
        assert float(cells[2]) <= prev
        prev = float(cells[2])
    rest = order[rows:]
    cells = [c.strip() for c in body[-1].strip("|").split("|")]
    assert cells[0] == f"({len(rest)} other kernels)", cells[0]
    assert int(cells[1]) == sum(c for _, (c, _) in rest)
    assert abs(float(cells[2]) - sum(u for _, (_, u) in rest)) <= 0.05 + 1e-9 * total
    # the cuBLAS name has no parameter list and is cut to 72 characters
    assert any(c.startswith("| sm90_xmma_gemm_bf16bf16") and "..." in c for c in body), body

    # no gpu__time_duration.sum rows: an error, not an empty table
    bad = os.path.join(tmp, "empty.csv")
    with open(bad, "w") as f:
        f.write("==PROF== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                "Performance Counters\n")
    r = run(bad)
    assert r.returncode == 1 and "no gpu__time_duration.sum rows" in r.stderr, (r.returncode, r.stderr)
    print(f"PASS ncu_summary: {len(launches)} launches of {len(per)} kernels summarised")
    sys.exit(0)


if __name__ == "__main__":
    main()
