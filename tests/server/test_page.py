"""The search page in headless Chromium: load /?q=..., let the script run,
check that the DOM holds ranked results with passage text, and that a
screenshot is a plausible PNG. Skips (77) when no Chromium is installed."""
import os
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import Server, build_indexes, check, finish, http, workdir  # noqa: E402


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def run_chromium(exe, d, *args):
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            f"--user-data-dir={os.path.join(d, 'profile')}", "--virtual-time-budget=15000", "--window-size=1200,900"]
    return subprocess.run(base + list(args), capture_output=True, timeout=180)


def main():
    exe = chromium()
    if not exe:
        print("SKIP: no chromium")
        sys.exit(77)
    d = workdir("page")
    _, ix, _ = build_indexes(d, n_docs=40, bm25=False)
    srv = Server("--index", ix)
    try:
        url = srv.base + "/?q=aeroelastic+models+of+wings&k=5"
        r = run_chromium(exe, d, "--dump-dom", url)
        dom = r.stdout.decode("utf-8", "replace")
        hits = re.findall(r'<li class="hit" data-rank="(\d+)" data-docid="([^"]+)"', dom)
        check(r.returncode == 0, f"chromium --dump-dom exit {r.returncode}: {r.stderr[-500:]!r}")
        check([int(h[0]) for h in hits] == [1, 2, 3, 4, 5], f"DOM after the search holds ranks 1..5: {hits}")
        check(dom.count('class="text"') == 5 and "results in" in dom, "each hit shows its passage text")
        # the page's answer is the API's answer
        _, _, api = http(srv.base, "POST", "/search", {"query": "aeroelastic models of wings", "k": 5})
        check([h[1] for h in hits] == [h["docid"] for h in api["results"][0]], "page ranking equals /search")

        png = os.path.join(d, "page.png")
        r = run_chromium(exe, d, f"--screenshot={png}", url)
        ok = os.path.exists(png)
        check(ok, f"screenshot written: {r.stderr[-300:]!r}")
        if ok:
            data = open(png, "rb").read()
            w, h = struct.unpack(">II", data[16:24]) if len(data) > 24 else (0, 0)
            check(data[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is a PNG")
            check(len(data) > 20000 and w == 1200 and h == 900, f"plausible screenshot: {len(data)} bytes, {w}x{h}")
            print(f"screenshot: {png} ({len(data)} bytes, {w}x{h}); {len(hits)} hits in the DOM")
    finally:
        rc = srv.stop()
        check(rc == 0, f"exit code {rc}")
    finish()


if __name__ == "__main__":
    main()
