#!/usr/bin/env python3
"""Build the debian-packages corpus from a Debian release's package index.

    debian_packages.py PACKAGES TRANSLATION_EN OUT.jsonl.gz

PACKAGES is the release's `main` Packages index for one architecture and
TRANSLATION_EN its English Translation-en (both plain text: scripts/data.sh
decompresses apt's copies). One JSON object a line, sorted by package name:

    id       the package name
    title    the one-line short description
    text     the long description, paragraphs separated by a blank line
    queries  [title]
    links    names from Depends, Pre-Depends, Recommends and Suggests
             (alternatives included, versions, :arch and the package
             itself dropped), sorted

Descriptions shorter than 15 words and exact duplicates of an earlier long
description are dropped. Only the standard library: it runs before any
virtual environment exists.
"""
import gzip
import json
import os
import re
import sys

MIN_WORDS = 15
LINK_FIELDS = ("Depends", "Pre-Depends", "Recommends", "Suggests")


def paragraphs(path):
    """deb822 paragraphs as dicts; a continuation line stays in its field."""
    rec, key = {}, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if rec:
                    yield rec
                rec, key = {}, None
            elif line[0] in " \t" and key:
                rec[key] += "\n" + line
            else:
                key, _, value = line.partition(":")
                rec[key] = value.strip()
    if rec:
        yield rec


def long_text(desc):
    """Description-en minus its first line: lines joined by a space, ' .'
    lines as paragraph breaks."""
    paras, cur = [], []
    for line in desc.split("\n")[1:]:
        line = line[1:] if line.startswith(" ") else line
        if line.strip() == ".":
            if cur:
                paras.append(" ".join(cur))
            cur = []
        elif line.strip():
            cur.append(line.strip())
    if cur:
        paras.append(" ".join(cur))
    return "\n\n".join(paras)


def links(rec):
    out = set()
    me = rec.get("Package")
    for field in LINK_FIELDS:
        for alt in re.split(r"[,|]", rec.get(field, "")):
            name = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", alt).strip().split(":")[0].strip()
            if name and name != me:
                out.add(name)
    return sorted(out)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    packages, translation, out = sys.argv[1:]
    texts = {}
    for rec in paragraphs(translation):
        if "Package" in rec and "Description-en" in rec:
            texts[(rec["Package"], rec.get("Description-md5", ""))] = rec["Description-en"]
    recs = {}
    for rec in paragraphs(packages):
        name = rec.get("Package")
        desc = texts.get((name, rec.get("Description-md5", "")))
        if not name or desc is None or name in recs:
            continue
        recs[name] = {"id": name, "title": desc.split("\n")[0].strip(), "text": long_text(desc), "links": links(rec)}
    seen = set()
    tmp = out + ".tmp"
    n = 0
    with gzip.open(tmp, "wt", encoding="utf-8") as g:
        for name in sorted(recs):
            r = recs[name]
            if len(r["text"].split()) < MIN_WORDS or r["text"] in seen:
                continue
            seen.add(r["text"])
            g.write(json.dumps({"id": r["id"], "title": r["title"], "text": r["text"], "queries": [r["title"]],
                                "links": r["links"]}, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, out)
    print(f"debian-packages: {n} descriptions", file=sys.stderr)


if __name__ == "__main__":
    main()
