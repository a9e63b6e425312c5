#!/usr/bin/env python3
"""Per-kernel table of an Nsight Compute CSV: where a run's GPU time goes.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file run.csv CMD...
    bench/profile_gpu/ncu_summary.py run.csv [--name NAME] [--rows 25]

Reads the rows of metric gpu__time_duration.sum (one per kernel launch),
groups them by kernel (its demangled name without the return type and the
parameter list, cut to 72 characters), and prints, longest total first:

    PROFILE NAME: N launches of K kernels, T us on the GPU
    | kernel | calls | total us | share | avg us |
    ...
    | (M other kernels) | ... |

at most --rows kernel rows (the rest summed in one row). Columns are found
by their header names, units (ns, us, ms, s, or nsecond, usecond, ...)
converted, and thousands separators dropped. Exit status 1 when the file
holds no such rows (ncu failed, or the program launched no kernel).
"""
import argparse
import csv
import sys

UNIT_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
METRIC = "gpu__time_duration.sum"


def short_name(name, width=72):
    """'void ns::k<float, 2>(ns::args)' -> 'ns::k<float, 2>', cut to width."""
    n = name.strip()
    if n.endswith(")"):  # drop the parameter list: the last top-level (...)
        depth = 0
        for i in range(len(n) - 1, -1, -1):
            depth += n[i] == ")"
            depth -= n[i] == "("
            if depth == 0:
                n = n[:i]
                break
    if n.startswith("void "):
        n = n[5:]
    n = n.replace("(anonymous namespace)::", "")
    return n if len(n) <= width else n[: width - 3] + "..."


def read_launches(lines):
    """(kernel, microseconds) for every launch in ncu's CSV lines."""
    header = None
    out = []
    for row in csv.reader(lines):
        if header is None:
            # ncu may print its own lines before the table: the header names these columns
            if "Metric Name" in row and "Metric Value" in row:
                header = {h: i for i, h in enumerate(row)}
                kcol = next((header[k] for k in ("Kernel Name", "Function Name", "Name") if k in header), None)
                if kcol is None:
                    header = None
            continue
        if len(row) < len(header) or row[header["Metric Name"]] != METRIC:
            continue
        unit = row[header["Metric Unit"]].strip() if "Metric Unit" in header else "ns"
        value = float(row[header["Metric Value"]].replace(",", ""))
        out.append((short_name(row[kcol]), value * UNIT_US.get(unit, 1e-3)))
    return out


def table(launches, name, rows):
    total = sum(t for _, t in launches)
    per = {}
    for k, t in launches:
        calls, us = per.get(k, (0, 0.0))
        per[k] = (calls + 1, us + t)
    order = sorted(per.items(), key=lambda kv: (-kv[1][1], kv[0]))
    lines = [f"PROFILE {name}: {len(launches)} launches of {len(per)} kernels, {total:.1f} us on the GPU",
             "| kernel | calls | total us | share | avg us |", "| --- | ---: | ---: | ---: | ---: |"]
    share = lambda us: 100.0 * us / total if total > 0 else 0.0  # noqa: E731
    for k, (calls, us) in order[:rows]:
        lines.append(f"| {k} | {calls} | {us:.1f} | {share(us):.1f}% | {us / calls:.2f} |")
    rest = order[rows:]
    if rest:
        calls = sum(c for _, (c, _) in rest)
        us = sum(u for _, (_, u) in rest)
        lines.append(f"| ({len(rest)} other kernels) | {calls} | {us:.1f} | {share(us):.1f}% | {us / calls:.2f} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--name", default="run")
    ap.add_argument("--rows", type=int, default=25)
    a = ap.parse_args()
    with open(a.csv, newline="", errors="replace") as f:
        launches = read_launches(f)
    if not launches:
        print(f"PROFILE {a.name}: no {METRIC} rows in {a.csv}", file=sys.stderr)
        return 1
    print("\n".join(table(launches, a.name, a.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
