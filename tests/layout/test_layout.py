#!/usr/bin/env python3
"""The house's layout rules, checked on this build's own object files and
the sources, so that they cannot rot:

  circle   No file of the project takes names from a file that takes names
           from it, directly (A <-> B) or through others (A -> B -> C -> A).
           The file-level graph comes from `nm`: file A takes names from
           file B when A's object leaves a symbol undefined that B's object
           defines (strongly: weak definitions are a header's inline code).
           Objects: libqac, the qac command and the Python extension.
  api      The public headers (api/) include only api/ headers and standard
           C headers, and each compiles alone, as C and as C++, with only
           api/ on the include path.
  model    Nothing in model/ calls a name that only kernels/ defines (the
           encoder's backend choice sits above both, kernels/encoder_dispatch.c).
  size     No source file is over 1,200 lines, except the generated tables
           named in GENERATED.
  below    model/ and kernels/ take nothing from the folders above them
           (trainer/, index/, server/, cli/): no name, no header.

Each failure names its rule, the files and the names, and how to fix it
(FIX below). KNOWN lists the violations that are being fixed elsewhere, each
with the issue and item that removes it; it is empty, and should stay so. The
test fails on a violation not in KNOWN, and on an entry of KNOWN that no
longer holds, so the list only shrinks: whoever fixes one deletes its entry.

Before the real tree, the checker runs on a planted tree (a circle of two
files and one of three, a public header that includes util/, a model/ call
into kernels/, a kernels/ call and include into trainer/, a model/ include
from index/, an oversize file and a stale KNOWN entry) and must report
every one of them: a checker that stops seeing a rule fails.

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
# Empty: every rule holds on the whole tree.
KNOWN = {}

# Each rule in one line, and how to fix a violation of it, printed with
# every failure.
RULES = {
    "circle": ("no file takes names from a file that takes names from it, directly or through others",
               "make the arrows run one way: move the names one file takes from the other into a file "
               "below both (server/srv_request_id.c holds qac_request_id, which srv_rerank.c took from "
               "srv_router.c while the router took the rerank handler from srv_rerank.c), or move the "
               "caller up, into a file above both"),
    "api": ("api/ headers include only api/ headers and standard C headers, and each compiles alone as C "
            "and as C++",
            "a user compiles against api/ alone: move the type or constant the header needs into an api/ "
            "header (api/qac_progress.h holds the progress callback once taken from util/qac_util.h), or "
            "use a standard C type; keep util/ and model/ headers for the .c files"),
    "model": ("nothing in model/ calls a name that only kernels/ defines",
              "model/ sits below kernels/: move the caller above both (index/reranker.c makes its encoder "
              "with qac_encoder_create, defined in kernels/encoder_dispatch.c, from index/), or move the "
              "name down into model/ when the CPU path needs it too"),
    "below": ("model/ and kernels/ take nothing from trainer/, index/, server/ or cli/: no name, no header",
              "model/ and kernels/ sit below those folders: move what both sides need below both (model/ or "
              "util/; model/head_nets.c holds the heads' networks both kernels/ and trainer/ use), or have the "
              "caller above pass it in as an argument"),
    "size": (f"no source file is over {MAX_LINES:,} lines, except the generated tables in GENERATED",
             "split the file by job, a file per job named after it (index/index_build.c became "
             "index_builder.c, index_encode.c, index_vectors.c and index_parts.c; python/src/qac_python.c "
             "became py_model.c, py_index.c, py_bm25.c, py_train.c and others), the shared declarations in "
             "a header of the folder; a generated table goes in GENERATED with its generator named on its "
             "first line"),
    "known": ("KNOWN lists only violations that still hold",
              "delete the entry from KNOWN in tests/layout/test_layout.py"),
    "generated": ("GENERATED names generated tables that exist and name their generator on their first line",
                  "fix or delete the entry in GENERATED in tests/layout/test_layout.py"),
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


def demangled(s):
    """C++ names as the source spells them (c++filt), for the messages; a
    name c++filt cannot read, or no c++filt, stays as it is."""
    mangled = sorted(n for n in s if n.startswith("_Z"))
    if not mangled:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(mangled) + "\n", capture_output=True, text=True,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return {}
    return dict(zip(mangled, out)) if len(out) == len(mangled) else {}


def names(s):
    """Every name, sorted: the failure says exactly what crosses."""
    d = demangled(s)
    return ", ".join(sorted(d.get(n, n) for n in s))


def loops(edges):
    """The strongly connected groups of files of more than one file (Tarjan,
    iterative): each holds at least one circle."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def shortest_loop(edges, group):
    """The shortest circle through the group's first file (breadth first)."""
    start, inside = group[0], set(group)
    prev, queue = {start: None}, [start]
    for v in queue:
        for a, b in sorted(edges):
            if a != v or b not in inside:
                continue
            if b == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return [start] + path[::-1][1:] + [start]
            if b not in prev:
                prev[b] = v
                queue.append(b)
    return None


def check_circles(edges):
    """Every pair of files that take names from each other; and, for a group
    of files in a circle with no such pair, its shortest circle."""
    found = {}
    for (a, b), s in edges.items():
        if a < b and (b, a) in edges:
            found[("circle", f"{a} <-> {b}")] = (
                f"{a} takes {names(s)} from {b}, which takes {names(edges[(b, a)])} from it")
    for group in loops(edges):
        if any((a, b) in edges and (b, a) in edges for a in group for b in group if a < b):
            continue
        path = shortest_loop(edges, group)
        steps = "; ".join(f"{a} takes {names(edges[(a, b)])} from {b}" for a, b in zip(path, path[1:]))
        found[("circle", " -> ".join(path))] = f"{' -> '.join(path)}: {steps}"
    return found


def check_model(syms, definers):
    found = {}
    for src, (_, u) in syms.items():
        if not src.startswith("model/"):
            continue
        for s in sorted(u):
            where = definers.get(s)
            if where and all(w.startswith("kernels/") for w in where):
                found[("model", f"{src} -> {s}")] = (f"{src} calls {names([s])}, defined only in "
                                                     f"{', '.join(sorted(where))}")
    return found


# The folders model/ and kernels/ take nothing from: the layers above them.
BELOW = ("model", "kernels")
ABOVE = ("trainer", "index", "server", "cli")
# Where a header model/ or kernels/ includes may come from.
HEADER_HOMES = ("model", "kernels", "util", "api")


def check_below(edges, root):
    """model/ and kernels/ take no name (the nm graph) and include no header
    from the folders above them."""
    found = {}
    for (a, b), s in edges.items():
        if a.split("/")[0] in BELOW and b.split("/")[0] in ABOVE:
            found[("below", f"{a} -> {b}")] = f"{a} takes {names(s)} from {b}"

    def headers(d):
        path = os.path.join(root, d)
        return {f for f in os.listdir(path) if f.endswith((".h", ".cuh"))} if os.path.isdir(path) else set()

    home = set().union(*(headers(d) for d in HEADER_HOMES))
    owner = {h: d for d in ABOVE for h in headers(d) if h not in home}
    for d in BELOW:
        for f in sorted(os.listdir(os.path.join(root, d))):
            if not f.endswith((".c", ".cpp", ".cu", ".h", ".cuh")):
                continue
            text = open(os.path.join(root, d, f), encoding="utf-8").read()
            for m in INCLUDE.finditer(text):
                h = os.path.basename(m.group(2))
                if m.group(1) == '"' and h in owner:
                    line = text.count("\n", 0, m.start()) + 1
                    found[("below", f"{d}/{f} -> {owner[h]}/{h}")] = f"{d}/{f}:{line} includes {owner[h]}/{h}"
    return found


def check_api(root, cc, cxx):
    found, alone = {}, {}
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
                    first = first.replace(tu, "(the header alone)").replace(api + os.sep, "api/")
                    alone[(h, lang)] = first
    # a header that fails only because an api/ header it includes breaks a
    # rule is not reported again: the fix is in the other header
    broken = {k[1].split()[0] for k in found}
    for (h, lang), first in alone.items():
        where = first.split(":")[0]
        if where != f"api/{h}" and where in broken:
            continue
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
            problems.append(("generated", f"GENERATED names {g} (written by {script}), which does not exist"))
        elif os.path.basename(script) not in open(path, encoding="utf-8").readline():
            problems.append(("generated", f"GENERATED names {g}, whose first line does not name its "
                                          f"generator {script}"))
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
    """Check the tree; returns the failures, (rule, what) pairs (none when
    it passes)."""
    syms = read_symbols(nm, objects, root)
    edges, definers = file_graph(syms)
    found = {}
    found.update(check_circles(edges))
    found.update(check_model(syms, definers))
    found.update(check_below(edges, root))
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
            failures.append((key[0], found[key]))
    for key in sorted(known):
        if key not in found:
            failures.append(("known", f"KNOWN lists {key[0]} '{key[1]}' ({known[key]}), which no longer holds"))
    return failures


def report(failures, out=print):
    """Each failure: its rule, what breaks it (files and names), how to fix."""
    for rule in RULES:
        broken = [what for r, what in failures if r == rule]
        for what in broken:
            out(f"FAIL {rule}: {what}")
        if broken:
            text, fix = RULES[rule]
            out(f"     the rule: {text}")
            out(f"     to fix:   {fix}")
    if failures:
        out(f"{len(failures)} layout violation(s); the rules: tests/layout/test_layout.py and docs/development.md "
            f"(Layout). Run `ctest -R test_layout` before landing.")


PLANTED = {
    # a circle: a.c and b.c take names from each other
    "model/a.c": "int b(void);\nint a(void) { return b(); }\n",
    "model/b.c": "int a(void);\nint b(void) { return 1; }\nint c(void) { return a(); }\n",
    # a circle through three files: x.c -> y.c -> z.c -> x.c
    "index/x.c": "int y(void);\nint x(void) { return y(); }\n",
    "index/y.c": "int z(void);\nint y(void) { return z(); }\n",
    "index/z.c": "int x(void);\nint z(void) { return x(); }\n",
    # model/ calls a name that only kernels/ defines
    "model/m.c": "int k(void);\nint m(void) { return k(); }\n",
    # kernels/ takes a name and a header from trainer/
    "kernels/k.c": '#include "t.h"\nint k(void) { return t(); }\n',
    "trainer/t.h": "int t(void);\n",
    "trainer/t.c": "int t(void) { return 2; }\n",
    # model/ includes a header of index/
    "model/h.c": '#include "i.h"\nint h(void) { return 3; }\n',
    "index/i.h": "int i(void);\n",
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
    "circle   model/a.c takes b from model/b.c, which takes a from it",
    "circle   index/x.c -> index/y.c -> index/z.c -> index/x.c: index/x.c takes y from index/y.c; "
    "index/y.c takes z from index/z.c; index/z.c takes x from index/x.c",
    "model    model/m.c calls k, defined only in kernels/k.c",
    "below    kernels/k.c takes t from trainer/t.c",
    "below    kernels/k.c:1 includes trainer/t.h",
    "below    model/h.c:1 includes index/i.h",
    'api      api/qac_bad.h includes "qac_util.h", not an api/ header',
    "api      api/qac_bad.h does not compile alone as c:",
    "api      api/qac_bad.h does not compile alone as c++:",
    "size     index/long.c has 1201 lines",
    "known    KNOWN lists size 'index/gone.c'",
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
            if rel.endswith(".c") and rel != "index/long.c":
                obj = os.path.join(root, "build", "planted.dir", rel + ".o")
                os.makedirs(os.path.dirname(obj), exist_ok=True)
                subprocess.run([cc, "-c", "-I", os.path.join(root, "trainer"), "-I", os.path.join(root, "index"),
                                os.path.join(root, rel), "-o", obj], check=True)
                objects.append((root, obj))
        known = {("size", "index/gone.c"): "planted: a fix that landed"}
        failures = run(root, objects, nm, cc, cxx, known, {"model/table.h": "model/table_gen.py"},
                       out=lambda s: None)
    lines = [f"{rule:8} {what}" for rule, what in failures]
    missing = [e for e in PLANTED_EXPECT if not any(f.startswith(e) for f in lines)]
    extra = [f for f in lines if not any(f.startswith(e) for e in PLANTED_EXPECT)]
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
    report(failures)
    return 0 if ok and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
