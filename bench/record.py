#!/usr/bin/env python3
"""Run a benchmark and put its output into bench/RESULTS.md.

    bench/record.py --section NAME [--markdown] -- COMMAND ARGS...

runs COMMAND, echoes its output, and when it exits 0 writes that output
into RESULTS.md between the lines `<!-- NAME -->` and `<!-- /NAME -->`
(replacing what was there; appended at the end of the file when the
markers are absent), headed by the date, the machine (lscpu's model name,
core count) and the load average before and after the run, so that a figure
taken on a busy machine says so. Output that is not markdown (--markdown
not given) goes in a fenced block. The earlier hand-written sections of the
file are left alone."""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def load():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--section", required=True, help="marker name, e.g. encode_int8")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    ap.add_argument("--markdown", action="store_true", help="the command prints markdown: no fence")
    ap.add_argument("--stdout-only", action="store_true", help="record stdout alone (stderr echoed, not kept)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        sys.exit("record.py: no command given (after --)")
    load0, t0 = load(), time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None if a.stdout_only else subprocess.STDOUT,
                         text=True)
    lines = []
    for line in p.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    rc = p.wait()
    if rc != 0:
        sys.exit(f"record.py: the command exited {rc}; {a.results} left as it was")
    shown = " ".join(cmd).replace(ROOT + os.sep, "").replace(os.path.expanduser("~"), "~")
    head = (f"Recorded {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench/record.py --section "
            f"{a.section}`: {cpu_name()}, {os.cpu_count()} cores; load average {load0} before, {load()} after "
            f"({time.time() - t0:.0f} s). Command: `{shown}`\n\n")
    body = "".join(lines).rstrip("\n") + "\n"
    block = head + (body if a.markdown else "```text\n" + body + "```\n")
    begin, end = f"<!-- {a.section} -->", f"<!-- /{a.section} -->"
    text = open(a.results, encoding="utf-8").read()
    if begin in text and end in text and text.index(begin) < text.index(end):
        i, j = text.index(begin) + len(begin), text.index(end)
        text = text[:i] + "\n" + block + text[j:]
    else:
        text = text.rstrip("\n") + f"\n\n{begin}\n{block}{end}\n"
    tmp = a.results + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, a.results)
    print(f"record.py: section {a.section} of {a.results} updated", file=sys.stderr)


if __name__ == "__main__":
    main()
