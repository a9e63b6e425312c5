"""The search page in headless Chromium: load /?q=..., let the script run,
check that the DOM holds ranked results with passage text, and that a
screenshot is a plausible PNG. Then, driving Chromium over the DevTools
protocol: long passages show a snippet of at most 30 words with the query
terms in <mark>, the full text (equal to /search's) stays hidden until a real
mouse click on "Show the full passage" opens it, and a second click closes
it. At 375 px (a phone, mobile viewport) and 1280 px wide the form fits (the
Search button on screen), k reaches the server's max_k, and an unknown mode
in the address falls back to one the server has. Skips (77) when no
Chromium is installed."""
import base64
import json
import os
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import Server, build_indexes, check, finish, http, wait_until, workdir  # noqa: E402

# the page's state is polled for, never assumed after a fixed sleep: on a
# loaded machine the browser may not run for seconds
DEADLINE = 60


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


class DevTools:
    """Chromium's DevTools protocol over --remote-debugging-pipe (fd 3 in,
    fd 4 out, messages ending in NUL): no extra Python package needed."""

    def __init__(self, exe, d):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def fds():
            os.dup2(to_r, 3)
            os.dup2(from_w, 4)

        self.p = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                   "--no-first-run", f"--user-data-dir={os.path.join(d, 'profile-cdp')}",
                                   "--remote-debugging-pipe", "--window-size=1200,900"],
                                  preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.buf, self.next_id, self.session = b"", 0, None

    def call(self, method, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_r, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, url):
        target = self.call("Target.createTarget", url=url)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def click(self, x, y):
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def close(self):
        self.p.kill()
        self.p.wait()


HITS_JS = """[...document.querySelectorAll('li.hit')].map(li => {
  // closed <details> hide their content with content-visibility, which checkVisibility sees
  const vis = e => !!e && e.checkVisibility({visibilityProperty: true, opacityProperty: true});
  const snip = li.querySelector('.snippet'), full = li.querySelector('.full'), more = li.querySelector('details');
  const text = li.querySelector('.text');
  return {docid: li.dataset.docid, snippet: snip ? snip.textContent : null, snippetVisible: vis(snip),
          full: full ? full.textContent : text.textContent, fullVisible: full ? vis(full) : vis(text),
          open: more ? more.open : null, summary: more ? more.querySelector('summary').textContent : null,
          marks: [...li.querySelectorAll('.snippet mark, .text > mark')].map(m => m.textContent),
          fullMarks: [...li.querySelectorAll('.full mark')].map(m => m.textContent),
          markup: li.querySelectorAll('.text *:not(mark):not(.snippet):not(details):not(summary):not(.full)').length};
})"""


def words_of(s):
    return re.findall(r"\S+", s.replace("\u2026", " "))


def check_snippets(exe, d, srv, query, k):
    terms = [t for t in re.findall(r"\w+", query.lower()) if t not in ("of", "the", "and", "in", "on")]
    _, _, api = http(srv.base, "POST", "/search", {"query": query, "k": k, "return_text": True})
    texts = {h["docid"]: h["text"] for h in api["results"][0]}
    cdp = DevTools(exe, d)
    try:
        from urllib.parse import quote_plus
        cdp.open(srv.base + "/?q=" + quote_plus(query) + "&k=%d" % k)
        hits = []

        def rendered():
            hits[:] = cdp.js(HITS_JS) or []
            return len(hits) >= k

        wait_until(rendered, DEADLINE, 0.2)
        check(len(hits) == k, f"DevTools: {len(hits)} hits rendered")
        long_hits = [h for h in hits if len(words_of(texts[h["docid"]])) > 30]
        check(len(long_hits) >= 2, f"{len(long_hits)} hits longer than 30 words (the snippet is exercised)")
        n_marks = 0
        for h in hits:
            tid, text = h["docid"], texts[h["docid"]]
            check(h["full"] == text, f"{tid}: the full passage equals /search's text")
            check(h["markup"] == 0, f"{tid}: passage text became text nodes and <mark> only")
            check(all(any(m.lower() == t or m.lower().startswith(t) for t in terms) for m in h["marks"] + h["fullMarks"]),
                  f"{tid}: every highlight is a query term: {sorted(set(h['marks'] + h['fullMarks']))}")
            # every whole-word occurrence of a query term in what is shown is highlighted
            shown = h["snippet"] if h["snippet"] is not None else text
            want = sum(1 for w in re.findall(r"\w+", shown.lower()) if w in terms)
            got = sum(1 for m in h["marks"] if m.lower() in terms)
            check(got == want, f"{tid}: {got} of {want} query-term occurrences in the shown text highlighted")
            n_marks += len(h["marks"])
            if h in long_hits:
                sw = words_of(h["snippet"] or "")
                check(h["snippet"] is not None and 0 < len(sw) <= 30 and h["snippetVisible"] and not h["fullVisible"]
                      and h["open"] is False, f"{tid}: snippet of {len(sw)} words shown ({h['snippetVisible']}), "
                      f"full text hidden ({not h['fullVisible']}), closed ({h['open'] is False})")
                check(" ".join(sw) in " ".join(words_of(text)), f"{tid}: the snippet is a piece of the passage")
                # the snippet is the best window: no 30 words of the passage hold more exact term matches
                exact = [any(t in terms for t in re.findall(r"\w+", w.lower())) for w in words_of(text)]
                best = max(sum(exact[i:i + 30]) for i in range(len(exact) - 29))
                check(len(h["marks"]) >= best, f"{tid}: {len(h['marks'])} highlights in the snippet, "
                      f"a 30-word window holds {best} term matches")
            else:
                check(h["snippet"] is None and h["fullVisible"], f"{tid}: a short passage is shown whole")
        check(n_marks > 0, f"{n_marks} highlighted terms in the shown snippets")
        print(f"snippets: {len(long_hits)} of {len(hits)} hits longer than 30 words, {n_marks} highlights shown")
        if long_hits:
            i = hits.index(long_hits[0])
            where = (f"(() => {{ const s = document.querySelectorAll('li.hit')[{i}].querySelector('summary');"
                     f" s.scrollIntoView(); const r = s.getBoundingClientRect();"
                     f" return [r.x + r.width / 4, r.y + r.height / 2]; }})()")
            seen = {}

            def shown(opened):
                """the clicked hit as it is now, and whether it is (still) in the state wanted"""
                h = seen["h"] = cdp.js(HITS_JS)[i]
                if opened:
                    return (h["open"] is True and h["fullVisible"] and not h["snippetVisible"]
                            and h["summary"] == "Show less")
                return h["open"] is False and not h["fullVisible"] and h["snippetVisible"]

            cdp.click(*cdp.js(where))
            wait_until(lambda: shown(True), DEADLINE, 0.1)
            h = seen["h"]
            check(h["open"] is True and h["fullVisible"] and not h["snippetVisible"] and h["summary"] == "Show less",
                  f"a mouse click expands: open={h['open']} full shown={h['fullVisible']} "
                  f"snippet shown={h['snippetVisible']} label={h['summary']!r}")
            cdp.click(*cdp.js(where))  # the summary moved up: the snippet above it is hidden
            wait_until(lambda: shown(False), DEADLINE, 0.1)
            h = seen["h"]
            check(h["open"] is False and not h["fullVisible"] and h["snippetVisible"],
                  "a second click collapses back to the snippet")
    finally:
        cdp.close()


LAYOUT_JS = """(() => {
  // not loaded yet: the form is parsed before the page's script (which defines $) has run
  if (!document.querySelector('#f button') || typeof $ !== 'function') return {hits: 0, status: ''};
  const rect = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const b = document.querySelector('#f button'), r = b.getBoundingClientRect();
  const top = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
  return {inner: innerWidth, innerH: innerHeight, scroll: document.documentElement.scrollWidth,
          controls: [...document.querySelectorAll('#f > *')].map(e => [e.id || e.tagName, ...rect(e)]),
          button: rect(b), buttonOnTop: top === b || b.contains(top),
          mode: $('mode').value, modes: [...$('mode').options].map(o => o.value), kmax: $('k').max, k: $('k').value,
          hits: document.querySelectorAll('li.hit').length, status: $('status').textContent,
          url: location.search};
})()"""


def check_layout(exe, d, srv, n_docs):
    """At a phone's 375 px and a desktop's 1280 px: the form fits the width
    (nothing scrolls sideways, the Search button is on screen and clickable),
    k goes up to the server's max_k, an unknown mode falls back to a mode
    the server has, and a search with k past 100 runs from a real click."""
    _, _, info = http(srv.base, "GET", "/info")
    max_k = info["limits"]["max_k"]
    for width, mobile in ((375, True), (1280, False)):
        cdp = DevTools(exe, d)
        try:
            cdp.open("about:blank")
            cdp.call("Emulation.setDeviceMetricsOverride", width=width, height=800, deviceScaleFactor=1, mobile=mobile)
            cdp.call("Page.navigate", url=srv.base + "/?q=aeroelastic+models&mode=no-such-mode&k=500")
            lay = {}

            def loaded():
                lay.update(cdp.js(LAYOUT_JS) or {})
                return lay.get("hits", 0) > 0 or "Error" in lay.get("status", "")

            wait_until(loaded, DEADLINE, 0.2)
            print(f"{width} px: viewport {lay['inner']}, page width {lay['scroll']}, button {lay['button']}, "
                  f"mode {lay['mode']!r} of {lay['modes']}, k max {lay['kmax']}, {lay['hits']} hits")
            check(lay["inner"] == width and lay["scroll"] <= width,
                  f"{width} px: nothing overflows (viewport {lay['inner']}, page {lay['scroll']} px wide)")
            bad = [c for c in lay["controls"] if c[1] < 0 or c[3] > width]
            check(not bad, f"{width} px: every form control within the width: {bad}")
            bx = lay["button"]
            check(0 <= bx[0] and bx[2] <= width and 0 <= bx[1] and bx[3] <= lay["innerH"] and lay["buttonOnTop"],
                  f"{width} px: the Search button is on screen and not covered: {bx}")
            check(lay["kmax"] == str(max_k), f"{width} px: k allowed up to the server's max_k {max_k}: {lay['kmax']}")
            check(lay["mode"] in lay["modes"] and lay["mode"] == "dense",
                  f"{width} px: an unknown mode= falls back to a valid one: {lay['mode']!r} of {lay['modes']}")
            check(lay["hits"] == min(500, n_docs), f"{width} px: k=500 from the address searched: {lay['hits']} hits "
                  f"({lay['status']!r})")
            # a real click on Search with k past the old cap of 100
            cdp.js("$('results').textContent = ''; $('q').value = 'boundary layer flow'; $('k').value = '%d'" % max_k)
            cdp.click(*cdp.js("(() => { const r = document.querySelector('#f button').getBoundingClientRect();"
                              " return [(r.left + r.right) / 2, (r.top + r.bottom) / 2]; })()"))
            lay.clear()
            wait_until(lambda: loaded() and "boundary" in lay.get("url", ""), DEADLINE, 0.2)
            check(lay.get("hits") == n_docs and f"k={max_k}" in lay.get("url", ""),
                  f"{width} px: a click on Search with k={max_k} searches: {lay.get('hits')} hits, {lay.get('url')!r}")
            shot = cdp.call("Page.captureScreenshot", format="png")["data"]
            png = base64.b64decode(shot)
            with open(os.path.join(d, f"page-{width}.png"), "wb") as f:
                f.write(png)
            w = struct.unpack(">I", png[16:20])[0]
            check(w == width, f"{width} px: screenshot {w} px wide")
        finally:
            cdp.close()


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
        check_snippets(exe, d, srv, "aeroelastic models of wings", 5)
        check_layout(exe, d, srv, 40)
        # the API-key box only where the server has a key (issue 38: it showed on every server)
        check('id="key"' not in dom, "a server without --api-key: the page has no API-key box")
    finally:
        rc = srv.stop()
        check(rc == 0, f"exit code {rc}")
    keyed = Server("--index", ix, "--api-key", "s3cret")
    try:
        dom = run_chromium(exe, d, "--dump-dom", keyed.base + "/").stdout.decode("utf-8", "replace")
        box = re.search(r'<input[^>]*id="key"[^>]*>', dom)
        check(box is not None and 'type="password"' in box.group(0),
              f"a server with --api-key: the page has its password box: {box.group(0) if box else None}")
    finally:
        check(keyed.stop() == 0, "the keyed server exits cleanly")
    finish()


if __name__ == "__main__":
    main()
