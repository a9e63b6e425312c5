#!/usr/bin/env python3
"""qac plot's tick labels stand where their values are. The PNG is decoded
here (zlib, filter 0) and every label under the step axis and beside each
value axis is read back by matching its pixels against the plot's own 5x7
font (trainer/plot.c, scale 2). A step label's centre must lie where its
value falls between the frame's edges (the first and last logged steps),
within a pixel; a value label must sit on a grid line, and the labels'
values must be linear in their rows. Logs with round (1..10) and odd
(37..523) step ranges."""
import json
import os
import re
import struct
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clilib import check, finish, run, scratch  # noqa: E402

SRC = os.environ.get("QAC_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
font_src = open(os.path.join(SRC, "trainer", "plot.c")).read()
FONT = {}
for ch, rows in re.findall(r"\{'(.)', \{([^}]*)\}\}", font_src):
    bits = tuple(int(v, 0) for v in rows.split(","))
    FONT[bits] = ch


def read_png(path):
    b = open(path, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(b):
        n, kind = struct.unpack(">I4s", b[pos:pos + 8])
        data = b[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and color == 2, "8-bit RGB"
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + 3 * w)
    assert (raw[:, 0] == 0).all(), "filter type 0 on every row"
    return raw[:, 1:].reshape(h, w, 3)


def read_label(black, top, left, right):
    """The text whose glyphs' black pixels lie in columns [left, right] with
    the top row `top`: (string, first column, characters)."""
    for start in range(left - 10, left + 1):
        chars, ok = [], True
        for c0 in range(start, right + 1, 12):
            bits = []
            for r in range(7):
                v = 0
                for k in range(5):
                    block = black[top + 2 * r:top + 2 * r + 2, c0 + 2 * k:c0 + 2 * k + 2]
                    if block.size != 4 or (block.any() and not block.all()):
                        ok = False
                    v = v << 1 | int(block.all())
                bits.append(v)
            ch = FONT.get(tuple(bits))
            if ch is None:
                ok = False
                break
            chars.append(ch)
        if ok and chars:
            return "".join(chars), start, len(chars)
    return None, None, 0


def groups(mask_1d, gap):
    idx = np.flatnonzero(mask_1d)
    out, cur = [], [idx[0]] if len(idx) else []
    for i in idx[1:]:
        if i - cur[-1] > gap:
            out.append((cur[0], cur[-1]))
            cur = [i]
        else:
            cur.append(i)
    if cur:
        out.append((cur[0], cur[-1]))
    return out


tmp = scratch.mkdtemp(prefix="qac-cli-plot-")
for name, steps in (("round", list(range(1, 11))), ("odd", list(range(37, 524, 2)))):
    log, png = os.path.join(tmp, name + ".jsonl"), os.path.join(tmp, name + ".png")
    with open(log, "w") as f:
        for s in steps:
            f.write(json.dumps({"step": s, "loss": 3.0 / (1 + 0.01 * s), "lr": 2e-5 * min(1.0, s / 100)}) + "\n")
    r = run(["plot", log, "--out", png])
    check(r.returncode == 0, f"{name}: qac plot writes {png}: {r.stderr.strip()}")
    img = read_png(png).astype(int)
    black = (img == 0).all(axis=2)
    grey = (img == 225).all(axis=2)
    H, W = black.shape
    cols = np.flatnonzero(black.sum(axis=0) > 0.25 * H)
    x0, x1 = int(cols.min()), int(cols.max())
    full = black[:, x0 + 1:x1].sum(axis=1) > 0.9 * (x1 - x0 - 1)
    frame_rows = [int(a) for a, _ in groups(full, 1)]  # top/bottom of the two panels
    check(len(frame_rows) == 4, f"{name}: two framed panels (rows {frame_rows})")
    lo, hi = steps[0], steps[-1]
    labels = []
    for y1 in (frame_rows[1], frame_rows[3]):  # each panel's step axis, below its frame
        band = black[y1 + 2:y1 + 22, :]  # 14-row labels under the frame, above anything the next panel draws
        band[:, :x0 - 30] = False  # the value labels' column
        for a, b in groups(band.any(axis=0), 10):
            top = y1 + 2 + int(np.flatnonzero(band[:, a:b + 1].any(axis=1)).min())
            text, start, n = read_label(black, top, a, b)
            if text is None:
                check(False, f"{name}: the step label at columns {a}..{b} reads as the font's glyphs")
                continue
            centre = start + (12 * n - 3) / 2  # its glyph cells, less the last cell's 2-pixel gap
            want = x0 + (float(text) - lo) / (hi - lo) * (x1 - x0)
            labels.append((text, centre, want))
    bad = [(t, c, round(w, 1)) for t, c, w in labels if abs(c - w) > 1.0]
    check(len(labels) >= 6 and not bad,
          f"{name}: {len(labels)} step labels, each centred on its value's position within 1 px "
          f"(off: {bad}; all: {[(t, c) for t, c, _ in labels]})")
    for top_row, bottom_row in ((frame_rows[0], frame_rows[1]), (frame_rows[2], frame_rows[3])):
        band = black[top_row - 8:bottom_row + 8, :x0 - 2]
        found = []
        for a, b in groups(band.any(axis=1), 3):
            ys = top_row - 8 + a
            xs = np.flatnonzero(band[a:b + 1].any(axis=0))
            text, start, n = read_label(black, ys, int(xs.min()), int(xs.max()))
            if text is None:
                check(False, f"{name}: the value label at rows {ys}..{top_row - 8 + b} reads as the font's glyphs")
                continue
            mid = ys + 6  # rows ys..ys+13: the grid line is drawn at ys + 7, the label centred on it
            # a grid line (partly under a series drawn along it), or the frame
            on_grid = grey[mid:mid + 2, x0 + 1:x1].sum(axis=1).max() > 0.1 * (x1 - x0) or mid + 1 in frame_rows \
                or mid in frame_rows
            found.append((float(text), mid + 0.5, on_grid))
        vals = np.array([v for v, _, _ in found])
        ys = np.array([y for _, y, _ in found])
        fit = np.polyfit(ys, vals, 1) if len(found) >= 3 else None
        resid = np.abs(np.polyval(fit, ys) - vals).max() / abs(fit[0]) if fit is not None else 99
        check(len(found) >= 3 and all(g for _, _, g in found) and resid <= 1.0,
              f"{name}: value labels {[v for v, _, _ in found]} sit on grid lines, linear in their rows "
              f"(worst {resid:.2f} px)")
finish()
