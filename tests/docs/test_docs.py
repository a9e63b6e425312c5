"""The README and docs/ as a user reads them.

- Every relative link in README.md and docs/*.md points at a file of the
  repository, and every #anchor at a heading of its target (GitHub's slugs).
- Every document in docs/ is reachable from the README's links.
- The README has a table of contents linking each of its second-level
  sections, names the two commands exactly as `scripts/demo.sh` and
  `scripts/test.sh` (both exist and are executable), and keeps the marked
  sections (<!-- python section -->, <!-- beyond one machine section -->).
- Neither speaks of what a user of the repository does not have: the
  planning documents (DESIGN.md, TRAINING.md), "the planning repository",
  "the issue", "the study".
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import check, finish  # noqa: E402

ROOT = os.environ.get("QAC_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def strip_code(text):
    """The text without fenced code blocks (links and headings there are not markdown)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def headings(path):
    out, seen = set(), {}
    for m in re.finditer(r"^#{1,6} +(.+?) *$", strip_code(open(path, encoding="utf-8").read()), re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def links(path):
    text = strip_code(open(path, encoding="utf-8").read())
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code
    return re.findall(r"\]\(([^)\s]+)\)", text)


readme = os.path.join(ROOT, "README.md")
docs = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
check(len(docs) > 0, f"docs/ holds documents ({len(docs)})")

reached = set()
for path in [readme] + docs:
    rel = os.path.relpath(path, ROOT)
    for target in links(path):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not check(os.path.exists(dest), f"{rel}: link {target} -> {os.path.relpath(dest, ROOT)} exists"):
            continue
        if path == readme:
            reached.add(dest)
        if anchor:
            check(dest.endswith(".md") and anchor in headings(dest), f"{rel}: anchor #{anchor} is a heading of "
                  f"{os.path.relpath(dest, ROOT)}")
for d in docs:
    check(d in reached, f"README links {os.path.relpath(d, ROOT)}")

text = open(readme, encoding="utf-8").read()
body = strip_code(text)
sections = re.findall(r"^## +(.+?) *$", body, re.M)
toc = body[body.find("## Contents"):]
toc = toc[:toc.find("\n## ", 1)] if "\n## " in toc[1:] else toc
check("## Contents" in body, "README has a table of contents")
for s in sections:
    if s != "Contents":
        check(f"(#{slug(s)})" in toc, f"the table of contents links '{s}'")
check(re.search(r"^scripts/demo\.sh +#", text, re.M) is not None and
      re.search(r"^scripts/test\.sh +#", text, re.M) is not None, "README gives the two commands exactly")
for cmd in ("scripts/demo.sh", "scripts/test.sh"):
    p = os.path.join(ROOT, cmd)
    check(os.path.isfile(p) and os.access(p, os.X_OK), f"{cmd} exists and is executable")
for marker, heading in (("<!-- python section -->", "Python"), ("<!-- beyond one machine section -->",
                                                                 "Beyond one machine")):
    i = text.find(marker)
    check(i >= 0 and text.rfind("## ", 0, i) == text.find(f"## {heading}\n"), f"{marker} under '## {heading}'")

banned = re.compile(r"(?<![/\w])(?:DESIGN|TRAINING)\.md|(?i:planning repository|\bthe issue\b|\bthe study\b)")
for path in [readme] + docs:
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = banned.search(line)
        check(not m, f"{os.path.relpath(path, ROOT)}:{n} speaks of no planning document"
              + (f" ({m.group(0)!r})" if m else "")) if m else None
finish()
