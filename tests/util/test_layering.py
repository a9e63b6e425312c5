#!/usr/bin/env python3
"""Data flows one way: the network code (model/) and the CUDA kernels
(kernels/) take no header from the layers above them (trainer/, index/,
server/, cli/). Every #include "..." of their sources is looked up in the
source tree; one found in a forbidden folder fails the test.

Usage: test_layering.py SOURCE_DIR"""
import os
import re
import sys

root = sys.argv[1]
below = ("model", "kernels")
above = ("trainer", "index", "server", "cli")
owner = {}
for d in above:
    for f in os.listdir(os.path.join(root, d)):
        if f.endswith((".h", ".cuh")):
            owner[f] = d
bad = []
checked = 0
for d in below:
    for f in sorted(os.listdir(os.path.join(root, d))):
        if not f.endswith((".c", ".cpp", ".h", ".cu", ".cuh")):
            continue
        for n, line in enumerate(open(os.path.join(root, d, f), encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            checked += 1
            h = os.path.basename(m.group(1))
            if h in owner:
                bad.append(f"{d}/{f}:{n} includes {owner[h]}/{h}")
print(f"{checked} includes of {', '.join(below)} checked")
for b in bad:
    print("FAIL " + b)
sys.exit(1 if bad else 0)
