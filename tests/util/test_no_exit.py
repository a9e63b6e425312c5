"""Library code never exits or aborts: no object file of libqac (every
directory but cli/ and tests/, which are not in it), nor of the Python
extension module, refers to abort, exit or their relatives (_exit, _Exit,
quick_exit, err/errx, a failed assert, std::terminate). Read from the
objects' undefined symbols (nm), so a new call anywhere in the library
fails this test.

One exception, checked rather than trusted: nvcc compiles every __device__
function of a .cu file a second time for the host, as a stub that calls
exit(1) and is never run. In a CUDA object a reference to exit is allowed
only from such a stub: a function of a few instructions whose name is
declared __device__ in kernels/.

usage: test_no_exit.py LIBQAC_A SOURCE_DIR [OBJECT ...]  (the Python module's objects)"""
import glob
import os
import re
import subprocess
import sys

BANNED = {"abort", "exit", "_exit", "_Exit", "quick_exit", "err", "errx", "verr", "verrx", "__assert_fail",
          "__assert_perror_fail", "__assert", "_ZSt9terminatev", "__cxa_call_terminate"}
STUB_BYTES = 48  # an nvcc host stub: set the argument, call exit (padding aside)


def undefined(lib):
    """{member object: set of undefined symbols}"""
    out = subprocess.run(["nm", "-A", "-u", lib], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        m = re.match(r"^[^:]+:([^:]+):\s+U\s+(\S+)$", line)
        if m:
            syms.setdefault(m.group(1), set()).add(m.group(2).split("@")[0])
    return syms


def undefined_obj(path):
    """undefined symbols of one object file"""
    out = subprocess.run(["nm", "-u", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def stub_callers(lib, member, sym, workdir):
    """The functions of a CUDA object that call sym, with their sizes in bytes."""
    subprocess.run(["ar", "x", os.path.abspath(lib), member], cwd=workdir, check=True)
    path = os.path.join(workdir, member)
    dis = subprocess.run(["objdump", "-dr", "--no-show-raw-insn", path], capture_output=True, text=True,
                         check=True).stdout
    sizes = {}
    for line in subprocess.run(["nm", "-S", "--defined-only", path], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        f = line.split()
        if len(f) == 4:
            sizes[f[3]] = int(f[1], 16)
    callers, fn = set(), None
    for line in dis.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            fn = m.group(1)
        elif re.search(r"R_X86_64_(PLT32|PC32)\s+" + re.escape(sym) + r"\b", line):
            callers.add(fn)
    demangled = subprocess.run(["c++filt"], input="\n".join(sorted(callers)), capture_output=True, text=True,
                               check=True).stdout.splitlines()
    return [(c, d, sizes.get(c, 1 << 30)) for c, d in zip(sorted(callers), demangled)]


def device_functions(src):
    names = set()
    for path in glob.glob(os.path.join(src, "kernels", "*.cu")) + glob.glob(os.path.join(src, "kernels", "*.cuh")):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"__device__[^;{(]*?\b(\w+)\s*\(", text):
            names.add(m.group(1))
    return names


def main():
    lib, src = sys.argv[1], sys.argv[2]
    objs = [o for a in sys.argv[3:] for o in a.split(";") if o]  # CMake passes a list as one argument
    syms = undefined(lib)
    assert syms, f"no objects read from {lib}"
    for o in objs:  # the Python module's own code (it links libqac, read above)
        names = undefined_obj(o)
        assert names, f"no symbols read from {o}"
        syms["python:" + os.path.basename(o)] = names
    device = device_functions(src)
    work = os.path.join(os.path.dirname(os.path.abspath(lib)), "no-exit-check")
    os.makedirs(work, exist_ok=True)
    bad = []
    stubs = 0
    for member, names in sorted(syms.items()):
        for sym in sorted(names & BANNED):
            if member.endswith(".cu.o") and sym == "exit":
                for mangled, name, size in stub_callers(lib, member, sym, work):
                    base = re.sub(r"\(.*$", "", name.replace("(anonymous namespace)::", "")).split("::")[-1]
                    if size <= STUB_BYTES and base in device:
                        stubs += 1
                    else:
                        bad.append(f"{member}: {name} calls exit ({size} bytes; not a __device__ function's stub)")
            else:
                bad.append(f"{member}: refers to {sym}")
    print(f"{len(syms) - len(objs)} objects of {os.path.basename(lib)} and {len(objs)} of the Python module read; {stubs} nvcc host stubs of __device__ functions "
          "call exit (never run)")
    for b in bad:
        print("FAIL:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
