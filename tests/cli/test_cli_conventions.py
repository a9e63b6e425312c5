#!/usr/bin/env python3
"""The CLI's conventions (docs/cli.md), command by command:

- a directory given as an input file is named as one (never "read DIR:
  Success"); an empty corpus or queries file is an error naming the file,
  the same in every command, and leaves no output;
- outputs are checked before the work: an existing directory as an output
  file, a file as an output directory, a missing parent: refused at once;
- errors name things once (no "eval: eval:", no "index X: X:") and a server
  URL with a path is named whole ("GET http://host:port/prefix/info");
- queries are not cut at 32 tokens: the default is the model's limit, and
  the summary counts the texts cut; a server's query and passage lengths
  default to the model's max_seq_length, and one given is honoured up to
  the position table;
- progress and summaries: no rate of 0.0, no line twice, one summary line
  last;
- -k and --k, -b and --b alike; booleans turn off with --no-NAME or
  --NAME=false; --model by installed name and by Hugging Face repository
  name (an offline hub cache, resolved as huggingface_hub resolves it);
  --help within 100 columns; `qac tokenize` and /tokenize agree on the
  special tokens by default."""
import json
import os
import re
import shutil
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clilib import QAC, check, cranfield_tsv, default_model_dir, finish, run, scratch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
import srvlib  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-cli-conv-")
p = lambda *n: os.path.join(tmp, *n)  # noqa: E731
docs = cranfield_tsv(p("docs.tsv"), 20)
LONG = ("experimental investigation of the aerodynamics of a wing in a slipstream at transonic speeds with "
        "boundary layer suction, heat transfer to the surface, and the effect of the propeller on the lift and "
        "drag of the wing and flap combination")
with open(p("q.tsv"), "w") as f:
    f.write(f"q1\twing in a slipstream\nq2\t{LONG}\n")
os.makedirs(p("adir"))
open(p("empty.tsv"), "w").close()
FAST = ["--device", "cpu", "--threads", "2"]
assert run(["index", "build", "--corpus", docs, "--out", p("ix"), "--max-len", "64", *FAST]).returncode == 0
assert run(["bm25", "build", "--corpus", docs, "--out", p("bm")]).returncode == 0
run(["bm25", "search", "--index", p("bm"), "--queries", p("q.tsv"), "--run", p("bm.run")])
open(p("qrels"), "w").write("q1 0 1 1\nq2 0 2 1\n")
with open(p("log.jsonl"), "w") as f:
    f.writelines(json.dumps({"step": s, "loss": 1.0 / s, "lr": 1e-4}) + "\n" for s in range(1, 6))

# ---- inputs: a directory, an empty file ----
ADIR, EMPTY = p("adir"), p("empty.tsv")
for what, args in (("encode --input", ["encode", "--input", ADIR, "--output", p("o.npy")]),
                   ("search --queries", ["search", "--index", p("ix"), "--queries", ADIR, "--run", p("o.run")]),
                   ("bm25 build --corpus", ["bm25", "build", "--corpus", ADIR, "--out", p("obm")]),
                   ("bm25 search --queries", ["bm25", "search", "--index", p("bm"), "--queries", ADIR, "--run", "-"]),
                   ("index build --corpus", ["index", "build", "--corpus", ADIR, "--out", p("oix")]),
                   ("eval QRELS", ["eval", ADIR, p("bm.run")]),
                   ("eval RUN", ["eval", p("qrels"), ADIR]),
                   ("tokenize --input", ["tokenize", "--input", ADIR]),
                   ("plot LOG", ["plot", ADIR, "--out", p("o.png")])):
    r = run(args)
    check(r.returncode == 1 and f"{ADIR} is a directory" in r.stderr and "Success" not in r.stderr,
          f"{what} DIR: named as a directory: {r.stderr.strip()[-120:]!r}")
for what, args, out in (
        ("encode", ["encode", "--input", EMPTY, "--output", p("e.npy")], p("e.npy")),
        ("search", ["search", "--index", p("ix"), "--queries", EMPTY, "--run", p("e.run")], p("e.run")),
        ("bm25 build", ["bm25", "build", "--corpus", EMPTY, "--out", p("ebm")], p("ebm")),
        ("bm25 search", ["bm25", "search", "--index", p("bm"), "--queries", EMPTY, "--run", p("e2.run")], p("e2.run")),
        ("index build", ["index", "build", "--corpus", EMPTY, "--out", p("eix")], p("eix"))):
    r = run(args, quiet=False)
    check(r.returncode == 1 and f"{EMPTY} is empty" in r.stderr and not os.path.exists(out),
          f"{what} of an empty file: one error naming it, no output: {r.stderr.strip()[-100:]!r}")

# ---- outputs, before the work ----
for what, args, needle in (
        ("encode --output DIR", ["encode", "--input", docs, "--output", ADIR], "is a directory"),
        ("encode --ids DIR", ["encode", "--input", docs, "--output", p("x.npy"), "--ids", ADIR], "is a directory"),
        ("encode --output in a missing directory", ["encode", "--input", docs, "--output", p("no", "x.npy")],
         "does not exist"),
        ("search --run DIR", ["search", "--index", p("ix"), "--queries", p("q.tsv"), "--run", ADIR], "is a directory"),
        ("bm25 search --run DIR", ["bm25", "search", "--index", p("bm"), "--queries", p("q.tsv"), "--run", ADIR],
         "is a directory"),
        ("bm25 build --out FILE", ["bm25", "build", "--corpus", docs, "--out", docs], "is not a directory"),
        ("mine --out DIR", ["mine", "--run", p("bm.run"), "--queries", p("q.tsv"), "--qrels", p("qrels"),
                            "--corpus", docs, "--out", ADIR], "is a directory"),
        ("plot --out DIR", ["plot", p("log.jsonl"), "--out", ADIR], "is a directory"),
        ("finetune --out FILE", ["finetune", "--train", p("log.jsonl"), "--out", docs], "is not a directory")):
    r = run(args, quiet=False)
    check(r.returncode in (1, 2) and needle in r.stderr and not re.search(r"^\[", r.stderr, re.M),
          f"{what}: refused before any work: {r.stderr.strip()[-120:]!r}")

# ---- errors name things once ----
open(p("other.qrels"), "w").write("q9 0 1 1\n")
r = run(["eval", p("other.qrels"), p("bm.run")])
check(r.returncode == 1 and "eval: eval:" not in r.stderr and r.stderr.count("qac eval:") == 1,
      "eval: the command named once: " + r.stderr.strip())
r = run(["eval", p("bm.run"), p("bm.run")])
check(r.returncode == 1 and "more than 4 columns" in r.stderr and "swapped" in r.stderr,
      "eval with a run as qrels: the columns counted honestly, the swap named: " + r.stderr.strip())
nowhere = p("nowhere")
r = run(["serve", "--port", "0", "--index", nowhere])
check(r.returncode == 1 and r.stderr.count(nowhere) == 1, "serve --index: the path named once: " + r.stderr.strip())

# ---- queries: the model's limit, cuts counted ----
runs = {}
for ml in (None, "256", "32"):
    r = run(["search", "--index", p("ix"), "--queries", p("q.tsv"), "--run", p("m.run"), "-k", "5",
             *(["--max-len", ml] if ml else [])], quiet=False)
    runs[ml] = (r.returncode, open(p("m.run")).read() if r.returncode == 0 else "", r.stderr.strip().splitlines())
check(runs[None][1] == runs["256"][1] and runs[None][1] != runs["32"][1],
      "queries default to the model's limit (256), not 32")
check(runs[None][2][-1].endswith(f"0 cut at 256 tokens -> {p('m.run')}") and "1 cut at 32 tokens" in runs["32"][2][-1],
      "the summary counts the cut queries: " + runs["32"][2][-1])

# ---- progress and summaries ----
for cmd, args in (("index build", ["index", "build", "--corpus", docs, "--out", p("ix2"), "--max-len", "64", *FAST]),
                  ("search", ["search", "--index", p("ix"), "--queries", p("q.tsv"), "--run", p("s.run")]),
                  ("encode", ["encode", "--input", docs, "--output", p("s.npy"), "--max-len", "64", *FAST]),
                  ("bm25 build", ["bm25", "build", "--corpus", docs, "--out", p("bm2")]),
                  ("bm25 search", ["bm25", "search", "--index", p("bm"), "--queries", p("q.tsv"), "--run", p("b.run")]),
                  ("mine", ["mine", "--run", p("bm.run"), "--queries", p("q.tsv"), "--qrels", p("qrels"),
                            "--corpus", docs, "--out", p("m.jsonl")]),
                  ("plot", ["plot", p("log.jsonl"), "--out", p("l.png")])):
    r = run(args, quiet=False)
    lines = r.stderr.strip().splitlines()
    finals = [re.sub(r" elapsed .*", "", l) for l in lines if "(100.0%)" in l]
    check(r.returncode == 0 and lines and lines[-1].startswith(f"qac {cmd}: ") and
          sum(l.startswith(f"qac {cmd}: ") for l in lines) == 1, f"{cmd}: one summary line, last: {lines[-1:]}")
    check(not re.search(r" 0\.0 \S+/s", r.stderr) and len(finals) == len(set(finals)) and len(lines) == len(set(lines)),
          f"{cmd}: no 0.0/s rate, no line twice: {lines}")

# ---- -k / --k, -b / --b; booleans off ----
outs = {}
for name, args in (("-k", ["-k", "3"]), ("--k", ["--k", "3"]), ("--k=", ["--k=3"])):
    run(["search", "--index", p("ix"), "--queries", p("q.tsv"), "--run", p("k.run"), *args])
    outs[name] = open(p("k.run")).read()
check(outs["-k"] == outs["--k"] == outs["--k="] and outs["-k"].count("\n") == 6, "search: -k 3, --k 3, --k=3 alike")
bm = lambda *a: run(["bm25", "search", "--index", p("bm"), "--queries", p("q.tsv"), "--run", "-", *a]).stdout  # noqa
check(bm("-b", "0.7", "-k", "4") == bm("--b", "0.7", "--k", "4") != bm("--k", "4"), "bm25 search: -b and --b alike")
check(bm("--exact-lengths") != bm() == bm("--no-exact-lengths") == bm("--exact-lengths=false") ==
      bm("--exact-lengths", "false"), "a boolean turns off with --no-NAME, --NAME=false or --NAME false")
h = run(["bm25", "search", "--help"]).stdout
check("--no-NAME" in h and "-k, --k INT" in h and "-b, --b NUM" in h, "--help shows -k, --k and how to turn a boolean off")

# ---- --help within 100 columns ----
wide = []
for cmd in ([], ["bm25"], ["index"], ["info"], ["tokenize"], ["encode"], ["index", "build"], ["search"], ["bm25", "build"],
            ["bm25", "search"], ["bm25", "analyze"], ["eval"], ["serve"], ["pretrain"], ["finetune"], ["mine"],
            ["hlp"], ["plot"]):
    r = run([*cmd, "--help"])
    wide += [f"{' '.join(cmd)}: {len(l)}" for l in r.stdout.splitlines() if len(l) > 100]
    if r.returncode != 0 or "usage: qac" not in r.stdout.replace("usage: qac <command>", "usage: qac"):
        wide.append(f"{' '.join(cmd)}: no help")
check(not wide, f"every --help line fits in 100 columns: {wide[:5]}")

# ---- --model by name: the installed default, a Hugging Face hub cache ----
model = default_model_dir()
r = run(["info", "--json", "--model", "all-MiniLM-L6-v2"])
check(r.returncode == 0 and json.loads(r.stdout)["dir"] == model, "--model all-MiniLM-L6-v2: the installed model")
# a hub cache laid out as huggingface_hub writes it: blobs, a snapshot of links, refs/main
hub, repo, rev = p("hub"), "sentence-transformers/all-MiniLM-L6-v2", "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
base = os.path.join(hub, "models--sentence-transformers--all-MiniLM-L6-v2")
snap = os.path.join(base, "snapshots", rev)
for root, _, files in os.walk(model):
    for f in files:
        rel = os.path.relpath(os.path.join(root, f), model)
        blob = os.path.join(base, "blobs", rel.replace("/", "_"))
        os.makedirs(os.path.dirname(blob), exist_ok=True)
        os.symlink(os.path.join(root, f), blob)
        os.makedirs(os.path.dirname(os.path.join(snap, rel)), exist_ok=True)
        os.symlink(os.path.relpath(blob, os.path.dirname(os.path.join(snap, rel))), os.path.join(snap, rel))
os.makedirs(os.path.join(base, "refs"))
open(os.path.join(base, "refs", "main"), "w").write(rev)
import huggingface_hub  # noqa: E402
ref = huggingface_hub.snapshot_download(repo, cache_dir=hub, local_files_only=True)
r = run(["info", "--json", "--model", repo], env={"HF_HUB_CACHE": hub, "HF_HOME": p("nohome")})
info = json.loads(r.stdout) if r.returncode == 0 else {}
check(r.returncode == 0 and os.path.realpath(info["dir"]) == os.path.realpath(ref) and info["name"] == repo,
      f"--model {repo}: huggingface_hub's snapshot {ref}, named by the repository: {info.get('name')} "
      + r.stderr.strip())
r = run(["info", "--json", "--model", "nobody/nothing"], env={"HF_HUB_CACHE": hub})
check(r.returncode == 1 and hub in r.stderr, "an unknown repository says where it looked: " + r.stderr.strip()[-120:])

# ---- what a new user trips over (issue 38) ----
# both indexes and no --mode: hybrid (it was an error asking for --mode)
r = run(["search", "--index", p("ix"), "--bm25", p("bm"), "--queries", p("q.tsv"), "--run", p("h1.run")])
run(["search", "--index", p("ix"), "--bm25", p("bm"), "--queries", p("q.tsv"), "--run", p("h2.run"), "--mode", "hybrid"])
check(r.returncode == 0 and open(p("h1.run")).read() == open(p("h2.run")).read() != "",
      "search --index --bm25 without --mode: the hybrid run: " + r.stderr.strip()[-200:])
# a mistyped command, subcommand or option: said, with the likely one
for args, want in ((["serach"], "unknown command 'serach' (did you mean 'search'?)"),
                   (["index", "biuld", "--corpus", docs], "unknown subcommand 'biuld' (did you mean 'build'?)"),
                   (["bm25", "serch"], "unknown subcommand 'serch' (did you mean 'search'?)"),
                   (["search", "--queris", p("q.tsv")], "unknown option '--queris' (did you mean --queries?)"),
                   (["search", "--index", p("ix"), "--queries", p("q.tsv"), "--run", "-", "--batchsize", "8"],
                    "unknown option '--batchsize' (did you mean --batch?)")):
    r = run(args)
    check(r.returncode == 2 and want in r.stderr, f"qac {' '.join(args[:2])}: {want!r} in {r.stderr.strip()[:200]!r}")
r = run(["search", "--queries", p("q.tsv"), "--run", "-", "--index", p("ix"), "--frobnicate"])
check(r.returncode == 2 and "unknown option '--frobnicate'" in r.stderr and "did you mean" not in r.stderr,
      "an option like none: no guess: " + r.stderr.strip()[:120])
# a directory under the other index's flag: named once, and the flag to use
r = run(["search", "--bm25", p("ix"), "--queries", p("q.tsv"), "--run", "-"])
check(r.returncode == 1 and r.stderr.count("bm25 index") == 1 and "give it as --index" in r.stderr,
      "a dense index given as --bm25: named once, and --index said: " + r.stderr.strip())
r = run(["search", "--index", p("bm"), "--queries", p("q.tsv"), "--run", "-"])
check(r.returncode == 1 and r.stderr.count(p("bm")) == 1 and "give it as --bm25" in r.stderr,
      "a BM25 index given as --index: named once, and --bm25 said: " + r.stderr.strip())
# an index built with another model than the default: searched (and served) with it when no --model is
# given (it was refused as a model mismatch), and said so
import numpy as np  # noqa: E402
import safetensors.numpy  # noqa: E402
other = p("other-model")
shutil.copytree(default_model_dir(), other)
w = safetensors.numpy.load_file(os.path.join(other, "model.safetensors"))
key = next(k for k in w if "word_embeddings" in k)
w[key] = (w[key] * np.float32(1.01)).astype(w[key].dtype)
safetensors.numpy.save_file(w, os.path.join(other, "model.safetensors"))
assert run(["index", "build", "--corpus", docs, "--out", p("ix-other"), "--model", other, "--max-len", "64",
            *FAST]).returncode == 0
r = run(["search", "--index", p("ix-other"), "--queries", p("q.tsv"), "--run", p("o1.run")], quiet=False)
r2 = run(["search", "--index", p("ix-other"), "--queries", p("q.tsv"), "--run", p("o2.run"), "--model", other])
check(r.returncode == 0 and r2.returncode == 0 and open(p("o1.run")).read() == open(p("o2.run")).read()
      and f"the model the index was built with: {os.path.realpath(other)}" in r.stderr,
      "search without --model uses the index's model, and says so: " + r.stderr.strip()[-300:])
want_fp = json.loads(run(["info", "--json", "--model", other]).stdout)["fingerprint"]
try:
    srv2 = srvlib.Server("--index", p("ix-other"))
    _, _, info2 = srvlib.http(srv2.base, "GET", "/info")
    check(srv2.stop() == 0 and info2["model"]["fingerprint"] == want_fp,
          f"serve without --model serves the index's model: {info2['model']['fingerprint']} vs {want_fp}")
except RuntimeError as e:
    check(False, f"serve without --model starts on an index built with another model: {str(e)[-300:]}")

# ---- a server's lengths: unset, the model's max_seq_length; given, honoured up to the positions ----
# (a model whose max_seq_length, 128, is under the server's old fixed passage default of 256: that
# default silently encoded passages past the model's own limit once lengths above it were honoured)
short = p("short-model")
shutil.copytree(default_model_dir(), short)
with open(os.path.join(short, "sentence_bert_config.json"), "w") as f:
    json.dump({"max_seq_length": 128, "do_lower_case": False}, f)
positions = json.load(open(os.path.join(short, "config.json")))["max_position_embeddings"]
for args, want in (([], (128, 128)), (["--passage-max-len", "300", "--query-max-len", "200"], (200, 300)),
                   (["--passage-max-len", "4000", "--query-max-len", "4000"], (positions, positions))):
    try:
        s3 = srvlib.Server("--model", short, *args)
        _, _, info3 = srvlib.http(s3.base, "GET", "/info")
        got = (info3["limits"]["query_max_len"], info3["limits"]["passage_max_len"])
        check(s3.stop() == 0 and got == want, f"serve {' '.join(args) or '(no lengths)'}: query and passage "
              f"lengths {got}, want {want} (max_seq_length 128, {positions} positions)")
    except RuntimeError as e:
        check(False, f"serve {' '.join(args)}: {str(e)[-300:]}")

# ---- a server: /tokenize and the CLI agree; a URL with a path is named whole ----
srv = srvlib.Server()
try:
    text = "The wing in a slipstream"
    s, _, res = srvlib.http(srv.base, "POST", "/tokenize", {"text": text})
    cli = [int(x) for x in run(["tokenize", text]).stdout.split()]
    check(s == 200 and res["ids"][0] == cli and cli[0] == 101 and cli[-1] == 102,
          f"qac tokenize and /tokenize agree by default (specials included): {cli} / {res.get('ids')}")
    cli = [int(x) for x in run(["tokenize", "--no-special-tokens", text]).stdout.split()]
    s, _, res = srvlib.http(srv.base, "POST", "/tokenize", {"text": text, "add_special_tokens": False})
    check(res["ids"][0] == cli, "... and without them")
    r = run(["search", "--server", srv.base, "--queries", p("q.tsv"), "--run", p("r.run"), "--max-len", "32"])
    check("--max-len 32 is for offline searches; the server cuts queries at 256 tokens" in r.stderr,
          "search --server --max-len: a note that the server's length applies: " + r.stderr.strip()[-200:])
    url = srv.base + "/prefix"
    r = run(["search", "--server", url, "--queries", p("q.tsv"), "--run", p("r.run")])
    check(r.returncode == 1 and f"GET {url}/info: HTTP 404" in r.stderr and "POST/GET" not in r.stderr,
          "a server URL with a path is named whole: " + r.stderr.strip())
    check(f"root URL, {srv.base}: drop '/prefix'" in r.stderr,
          "... with a hint that --server takes the root URL: " + r.stderr.strip())
finally:
    check(srv.stop() == 0, "the server stops cleanly")
finish()
