#!/usr/bin/env python3
"""The house's layout rules, checked on this build's own object files and
the sources, so that they cannot rot:

  circle   No file of the project takes names from a file that takes names
           from it. The file-level graph comes from `nm`: file A takes names
           from file B when A's object leaves a symbol undefined that B's
           object defines (strongly: weak definitions are a header's inline
           code). Objects: libqac, the qac command and the Python extension.
  api      The public headers (api/) include only api/ headers and standard
           C headers, and each compiles alone, as C and as C++, with only
           api/ on the include path.
  model    Nothing in model/ calls a name that only kernels/ defines (the
           encoder's backend choice sits above both, kernels/encoder_dispatch.c).
  size     No source file is over 1,200 lines, except the generated tables
           named in GENERATED.
  kernels  kernels/ takes nothing from trainer/: no name, no header.

KNOWN lists the violations that are being fixed elsewhere, each with the
issue and item that removes it. The test fails on a violation not in KNOWN,
and on an entry of KNOWN that no longer holds, so the list only shrinks:
whoever fixes one deletes its entry.

Before the real tree, the checker runs on a planted tree (a circle, a
public header that includes util/, a model/ call into kernels/, a
kernels/ call into trainer/, an oversize file and a stale KNOWN entry) and
must report every one of them: a checker that stops seeing a rule fails.

Usage: test_layout.py --source-dir DIR --objects FILE --nm NM --cc CC --cxx CXX
(FILE: a line per object file, the source directory of its target and the
object, tab-separated; tests/layout/CMakeLists.txt writes it.)"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

MAX_LINES = 1200

# Generated tables, exempt from the size rule: file -> the script that writes
# it (the file's first line must name that script).
GENERATED = {
    "model/wordpiece_unicode.h": "model/wordpiece_unicode_gen.py",
}

# (rule, subject) -> the issue and item whose fix removes the violation.
KNOWN = {
    ("size", "python/src/qac_python.c"): "issue 38 item 8, with the Python thread-safety work: "
                                         "python/src/qac_python.c split under 1,200 lines",
}

SOURCE_EXT = (".c", ".h", ".cpp", ".hpp", ".cu", ".cuh", ".py", ".pyi", ".sh", ".js", ".lua", ".cmake")
SOURCE_NAMES = ("CMakeLists.txt", "Dockerfile")

# The C standard library's headers (C11): what a public header may take
# from outside api/.
STD_C = {
    "assert.h", "complex.h", "ctype.h", "errno.h", "fenv.h", "float.h", "inttypes.h", "iso646.h", "limits.h",
    "locale.h", "math.h", "setjmp.h", "signal.h", "stdalign.h", "stdarg.h", "stdatomic.h", "stdbool.h",
    "stddef.h", "stdint.h", "stdio.h", "stdlib.h", "stdnoreturn.h", "string.h", "tgmath.h", "threads.h",
    "time.h", "uchar.h", "wchar.h", "wctype.h",
}

# nm's letters for a strong definition: text, data, bss, read-only, small
# data, common, GNU indirect function, GNU unique. W and V (weak) are
# inline code from headers, defined in every object that uses it.
DEFINED = set("TDBRGSCiu")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def source_of(target_dir, obj, root):
    """The source an object was compiled from, relative to root: CMake puts
    <target_dir>/x/y.c's object at .../<target>.dir/x/y.c.o."""
    m = re.search(r"\.dir/(.+)\.o(bj)?$", obj.replace(os.sep, "/"))
    return os.path.relpath(os.path.join(target_dir, m.group(1)), root).replace(os.sep, "/") if m else None


def read_symbols(nm, objects, root):
    """{source: (defined names, undefined names)} from nm -P; objects are
    (target source directory, object file) pairs."""
    syms = {}
    for target_dir, obj in objects:
        src = source_of(target_dir, obj, root)
        if not src or not os.path.isfile(os.path.join(root, src)):
            raise SystemExit(f"FAIL {obj}: no source file of the tree matches this object (expected {src})")
        out = subprocess.run([nm, "-P", obj], check=True, capture_output=True, text=True).stdout
        d, u = set(), set()
        for line in out.splitlines():
            f = line.split()
            if len(f) < 2:
                continue
            if f[1] == "U":
                u.add(f[0])
            elif f[1] in DEFINED:
                d.add(f[0])
        defs, undefs = syms.setdefault(src, (set(), set()))
        defs |= d
        undefs |= u
    return syms


def file_graph(syms):
    """{(a, b): names a takes from b}, and {name: files defining it}."""
    definers = defaultdict(set)
    for src, (d, _) in syms.items():
        for s in d:
            definers[s].add(src)
    edges = defaultdict(set)
    for a, (_, u) in syms.items():
        for s in u:
            for b in definers.get(s, ()):
                if b != a:
                    edges[(a, b)].add(s)
    return edges, definers


def names(s, n=4):
    s = sorted(s)
    return ", ".join(s[:n]) + (f" and {len(s) - n} more" if len(s) > n else "")


def check_circles(edges):
    found = {}
    for (a, b), s in edges.items():
        if a < b and (b, a) in edges:
            found[("circle", f"{a} <-> {b}")] = (
                f"{a} takes {names(s)} from {b}, which takes {names(edges[(b, a)])} from it")
    return found


def check_model(syms, definers):
    found = {}
    for src, (_, u) in syms.items():
        if not src.startswith("model/"):
            continue
        for s in sorted(u):
            where = definers.get(s)
            if where and all(w.startswith("kernels/") for w in where):
                found[("model", f"{src} -> {s}")] = f"{src} calls {s}, defined only in {', '.join(sorted(where))}"
    return found


def check_kernels(edges, root):
    found = {}
    for (a, b), s in edges.items():
        if a.startswith("kernels/") and b.startswith("trainer/"):
            found[("kernels", f"{a} -> {b}")] = f"{a} takes {names(s)} from {b}"
    trainer_headers = {f for f in os.listdir(os.path.join(root, "trainer")) if f.endswith((".h", ".cuh"))}
    for f in sorted(os.listdir(os.path.join(root, "kernels"))):
        path = os.path.join(root, "kernels", f)
        if not f.endswith((".c", ".cpp", ".cu", ".h", ".cuh")):
            continue
        for m in INCLUDE.finditer(open(path, encoding="utf-8").read()):
            h = os.path.basename(m.group(2))
            if m.group(1) == '"' and h in trainer_headers:
                found[("kernels", f"kernels/{f} -> trainer/{h}")] = f"kernels/{f} includes trainer/{h}"
    return found


def check_api(root, cc, cxx):
    found = {}
    api = os.path.join(root, "api")
    headers = sorted(f for f in os.listdir(api) if f.endswith(".h"))
    with tempfile.TemporaryDirectory(prefix="qac-layout-") as tmp:
        for h in headers:
            text = open(os.path.join(api, h), encoding="utf-8").read()
            for m in INCLUDE.finditer(text):
                kind, name = m.groups()
                if kind == '"' and not ("/" not in name and os.path.isfile(os.path.join(api, name))):
                    found[("api", f"api/{h} includes \"{name}\"")] = f"api/{h} includes \"{name}\", not an api/ header"
                if kind == "<" and name not in STD_C:
                    found[("api", f"api/{h} includes <{name}>")] = (
                        f"api/{h} includes <{name}>, not a standard C header")
            # alone: a translation unit of just this header, api/ the only -I
            for lang, compiler, std in (("c", cc, "-std=c11"), ("c++", cxx, "-std=c++17")):
                tu = os.path.join(tmp, "alone." + ("c" if lang == "c" else "cpp"))
                with open(tu, "w") as f:
                    f.write(f'#include "{h}"\n')
                r = subprocess.run([compiler, std, "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-pedantic",
                                    "-I", api, tu], capture_output=True, text=True)
                if r.returncode:
                    lines = r.stderr.strip().splitlines()
                    first = next((x for x in lines if "error" in x), lines[0] if lines else "?")
                    first = first.replace(tu, "(the header alone)")
                    found[("api", f"api/{h} alone as {lang}")] = f"api/{h} does not compile alone as {lang}: {first}"
    return found, len(headers)


def source_files(root):
    """The tree's source files (git's list when the tree is a clone)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                             check=True, capture_output=True, text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        out = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".") and
                       not os.path.exists(os.path.join(d, x, "CMakeCache.txt"))]
            out += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(f for f in out if (f.endswith(SOURCE_EXT) or os.path.basename(f) in SOURCE_NAMES) and
                  os.path.isfile(os.path.join(root, f)))


def check_size(root, generated):
    found, problems = {}, []
    for g, script in generated.items():
        path = os.path.join(root, g)
        if not os.path.isfile(path) or not os.path.isfile(os.path.join(root, script)):
            problems.append(f"GENERATED names {g} (written by {script}), which does not exist")
        elif os.path.basename(script) not in open(path, encoding="utf-8").readline():
            problems.append(f"GENERATED names {g}, whose first line does not name its generator {script}")
    files = source_files(root)
    for f in files:
        if f in generated:
            continue
        with open(os.path.join(root, f), "rb") as fh:
            n = sum(1 for _ in fh)
        if n > MAX_LINES:
            found[("size", f)] = f"{f} has {n} lines (at most {MAX_LINES})"
    return found, problems, len(files)


def run(root, objects, nm, cc, cxx, known, generated, out=print):
    """Check the tree; returns the failures (empty when it passes)."""
    syms = read_symbols(nm, objects, root)
    edges, definers = file_graph(syms)
    found = {}
    found.update(check_circles(edges))
    found.update(check_model(syms, definers))
    found.update(check_kernels(edges, root))
    api_found, n_headers = check_api(root, cc, cxx)
    found.update(api_found)
    size_found, failures, n_files = check_size(root, generated)
    found.update(size_found)
    out(f"{len(syms)} object files, {len(edges)} file-to-file edges, {n_headers} api/ headers, "
        f"{n_files} source files")
    for key in sorted(found):
        if key in known:
            out(f"known  {key[0]:8} {found[key]}  [{known[key]}]")
        else:
            failures.append(f"{key[0]:8} {found[key]}")
    for key in sorted(known):
        if key not in found:
            failures.append(f"KNOWN lists {key[0]} '{key[1]}' ({known[key]}), which no longer holds: "
                            f"delete its entry from KNOWN in tests/layout/test_layout.py")
    return failures


PLANTED = {
    # a circle: a.c and b.c take names from each other
    "model/a.c": "int b(void);\nint a(void) { return b(); }\n",
    "model/b.c": "int a(void);\nint b(void) { return 1; }\nint c(void) { return a(); }\n",
    # model/ calls a name that only kernels/ defines
    "model/m.c": "int k(void);\nint m(void) { return k(); }\n",
    # kernels/ takes a name and a header from trainer/
    "kernels/k.c": '#include "t.h"\nint k(void) { return t(); }\n',
    "trainer/t.h": "int t(void);\n",
    "trainer/t.c": "int t(void) { return 2; }\n",
    # a public header that reaches into util/, and one that stands alone
    "api/qac_bad.h": '#include "qac_util.h"\nqac_thing qac_bad(void);\n',
    "api/qac_good.h": "#include <stdint.h>\nint64_t qac_good(void);\n",
    "util/qac_util.h": "typedef int qac_thing;\n",
    # an oversize file, and an oversize generated table that is allowed
    "index/long.c": "/* long */\n" * (MAX_LINES + 1),
    "model/table.h": "/* Generated by table_gen.py: do not edit. */\n" + "/* row */\n" * MAX_LINES,
    "model/table_gen.py": "\n",
}
PLANTED_EXPECT = [
    "circle   model/a.c takes b from model/b.c",
    "model    model/m.c calls k, defined only in kernels/k.c",
    "kernels  kernels/k.c takes t from trainer/t.c",
    "kernels  kernels/k.c includes trainer/t.h",
    'api      api/qac_bad.h includes "qac_util.h", not an api/ header',
    "api      api/qac_bad.h does not compile alone as c:",
    "api      api/qac_bad.h does not compile alone as c++:",
    "size     index/long.c has 1201 lines",
    "KNOWN lists size 'index/gone.c'",
]


def self_test(nm, cc, cxx):
    """The checker on a planted tree must report every planted violation,
    and nothing about what is allowed."""
    with tempfile.TemporaryDirectory(prefix="qac-layout-planted-") as root:
        objects = []
        for rel, text in PLANTED.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        for rel in PLANTED:
            if rel.endswith(".c") and not rel.startswith("index/"):
                obj = os.path.join(root, "build", "planted.dir", rel + ".o")
                os.makedirs(os.path.dirname(obj), exist_ok=True)
                subprocess.run([cc, "-c", "-I", os.path.join(root, "trainer"), os.path.join(root, rel), "-o", obj],
                               check=True)
                objects.append((root, obj))
        known = {("size", "index/gone.c"): "planted: a fix that landed"}
        failures = run(root, objects, nm, cc, cxx, known, {"model/table.h": "model/table_gen.py"},
                       out=lambda s: None)
    missing = [e for e in PLANTED_EXPECT if not any(f.startswith(e) for f in failures)]
    extra = [f for f in failures if not any(f.startswith(e) for e in PLANTED_EXPECT)]
    for e in missing:
        print(f"FAIL self-test: the planted violation '{e}' was not reported")
    for f in extra:
        print(f"FAIL self-test: reported what was not planted: {f}")
    print(f"self-test: {len(PLANTED_EXPECT) - len(missing)} of {len(PLANTED_EXPECT)} planted violations reported")
    return not missing and not extra


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--objects", required=True, help="the object files: target source directory TAB object, a line each")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--cxx", default="c++")
    a = ap.parse_args()
    ok = self_test(a.nm, a.cc, a.cxx)
    objects = [tuple(line.rstrip("\n").split("\t", 1)) for line in open(a.objects) if line.strip()]
    if len(objects) < 50:
        print(f"FAIL only {len(objects)} object files listed in {a.objects}: the graph would be partial")
        return 1
    failures = run(os.path.abspath(a.source_dir), objects, a.nm, a.cc, a.cxx, KNOWN, GENERATED)
    for f in failures:
        print("FAIL " + f)
    return 0 if ok and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
