"""Prompts in training: qac finetune, qac pretrain and qac mine put the
query prompt before queries and the passage prompt before passages, keep
them in the run's state and in the checkpoints they write.

The reference for "applied as sentence-transformers applies them" is the
same run without prompts on data whose texts start with the prompts
already: a prompt is the string put before the text, so both runs must give
the same weights bit for bit (fine-tuning: queries "query: " + q, passages
"passage: " + "title [SEP] text"; pre-training with query-as-context pairs
short enough that nothing is cut, where the prompt's own tokens after
[CLS] equal the tokens of the prefixed text because "query: " ends in a
space). Also:
  - the checkpoints' config_sentence_transformers.json holds the prompts
    (--query-prompt replacing the model's), and sentence-transformers
    loading a fine-tuned checkpoint embeds with prompt_name="query" what
    `qac encode --kind query` gives (max |diff| <= 1e-4 max |x|, the
    pre-training export test's fp32 bound for this tiny CLS model);
  - --dump-batches writes the texts with their prompts;
  - a resume with other prompts is refused (exit 2), with the same ones it
    ends where the uninterrupted run ended, bit for bit;
  - qac mine --model --index (queries encoded by mine) equals qac mine --run
    of `qac search`'s run (queries encoded by search, with the prompt)."""
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pretrain"))
from ptlib import check, debian_pairs, file_bytes, finish, read_jsonl, run, tiny_model  # noqa: E402
from ftlib import CRAN  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
import scratch  # noqa: E402
import testdata  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-prompts-train-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
PROMPTS = {"query": "query: ", "passage": "passage: "}


def with_prompts(src, out, prompts):
    shutil.copytree(src, out)
    with open(os.path.join(out, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": prompts, "default_prompt_name": None}, f)
    return out


def st_config(d):
    return json.load(open(os.path.join(d, "config_sentence_transformers.json")))


tiny = tiny_model(p("tiny"))
tinyp = with_prompts(tiny, p("tiny-prompts"), PROMPTS)

# ---- fine-tuning ----
examples = []
for i in range(8):
    examples.append({"query_id": str(i), "query": f"how does wing flutter number {i} start",
                     "positive_passages": [{"docid": f"p{i}", "title": f"flutter {i}" if i % 2 else "",
                                            "text": f"the wing flutters at speed {i} because of the shock"}],
                     "negative_passages": [{"docid": f"n{i}{j}", "title": "", "text": f"heat transfer case {i} {j}"}
                                           for j in range(3)]})


def prefixed(ex):
    """The same example with the prompts written into its texts."""
    def psg(x):
        if x["title"]:  # "title [SEP] text": the prompt goes before the title
            return dict(x, title="passage: " + x["title"])
        return dict(x, text="passage: " + x["text"])
    return dict(ex, query="query: " + ex["query"], positive_passages=[psg(x) for x in ex["positive_passages"]],
                negative_passages=[psg(x) for x in ex["negative_passages"]])


with open(p("train.jsonl"), "w") as f:
    f.writelines(json.dumps(e) + "\n" for e in examples)
with open(p("train-prefixed.jsonl"), "w") as f:
    f.writelines(json.dumps(prefixed(e)) + "\n" for e in examples)
FT = ["--steps", "3", "--save-every", "1", "--keep", "3", "--batch", "2", "--n-passages", "3", "--q-max-len", "24",
      "--p-max-len", "40", "--lr", "1e-3", "--seed", "7", "--threads", "2"]

r = run(["finetune", "--model", tinyp, "--train", p("train.jsonl"), *FT, "--out", p("ft")])
check(r.returncode == 0, "finetune with the model's prompts: " + r.stderr[-300:])
r = run(["finetune", "--model", tiny, "--train", p("train-prefixed.jsonl"), *FT, "--out", p("ft-ref")])
check(r.returncode == 0, "finetune without prompts on prefixed texts: " + r.stderr[-300:])
a, b = (file_bytes(os.path.join(d, "checkpoint-3", "model.safetensors")) for d in (p("ft"), p("ft-ref")))
check(a == b, "finetune: prompts give the weights of the texts written with the prompts, bit for bit")
la = [(l["loss"], l["grad_norm"]) for l in read_jsonl(p("ft/log.jsonl"))]
lb = [(l["loss"], l["grad_norm"]) for l in read_jsonl(p("ft-ref/log.jsonl"))]
check(la == lb and len(la) == 3, f"finetune: the same losses and gradient norms ({la})")
r = run(["finetune", "--model", tiny, "--train", p("train.jsonl"), *FT, "--out", p("ft-none")])
c = file_bytes(os.path.join(p("ft-none"), "checkpoint-3", "model.safetensors"))
check(r.returncode == 0 and c != a, "finetune: without the prompts the weights differ (the check can fail)")
ck = os.path.join(p("ft"), "checkpoint-3")
check(st_config(ck)["prompts"] == PROMPTS, f"finetune: the checkpoint keeps the prompts: {st_config(ck)}")

# sentence-transformers embeds the fine-tuned checkpoint with its prompts as qac does
from sentence_transformers import SentenceTransformer  # noqa: E402
texts = ["how does wing flutter start", "shock waves around blunt bodies"]
with open(p("q.tsv"), "w") as f:
    f.writelines(f"{i}\t{t}\n" for i, t in enumerate(texts))
r = run(["encode", "--model", ck, "--input", p("q.tsv"), "--output", p("q.npy"), "--kind", "query", "--device", "cpu"])
if check(r.returncode == 0, "qac encode --kind query of the checkpoint: " + r.stderr[-200:]):
    st = SentenceTransformer(ck, device="cpu")
    want, got = st.encode(texts, prompt_name="query"), np.load(p("q.npy"))
    diff, scale = float(np.abs(want - got).max()), float(np.abs(want).max())
    print(f"fine-tuned checkpoint: max |diff| vs sentence-transformers {diff:.3g} (max |x| {scale:.3g})")
    check(diff <= 1e-4 * scale, f"sentence-transformers with prompt_name=query embeds the checkpoint as qac ({diff:.3g})")

r = run(["finetune", "--model", tinyp, "--train", p("train.jsonl"), *FT, "--query-prompt", "q: ", "--out", p("ft-q")])
cfg = st_config(os.path.join(p("ft-q"), "checkpoint-3"))
check(r.returncode == 0 and cfg["prompts"] == {"query": "q: ", "passage": "passage: "},
      f"finetune --query-prompt: the checkpoint keeps the prompt trained with: {cfg}")
r = run(["finetune", "--model", tinyp, "--train", p("train.jsonl"), *FT, "--dry-run", "--dump-batches", p("dump.jsonl"),
         "--out", p("ft-dry")])
dump = read_jsonl(p("dump.jsonl")) if r.returncode == 0 else []
check(dump and all(q.startswith("query: ") for b in dump for q in b["queries"])
      and all(x.startswith("passage: ") for b in dump for g in b["passages"] for x in g),
      "--dump-batches writes the texts with their prompts")

# resume: other prompts are refused, the same ones continue bit for bit
shutil.copytree(p("ft"), p("ft-resume"))
with open(os.path.join(p("ft-resume"), "latest"), "w") as f:
    f.write("checkpoint-2\n")
shutil.rmtree(os.path.join(p("ft-resume"), "checkpoint-3"))
r = run(["finetune", "--model", tinyp, "--train", p("train.jsonl"), *FT, "--resume", "--passage-prompt", "",
         "--out", p("ft-resume")])
check(r.returncode == 2 and "prompt" in r.stderr and not os.path.exists(os.path.join(p("ft-resume"), "checkpoint-3")),
      "finetune --resume with other prompts is refused: " + r.stderr.strip()[-200:])
r = run(["finetune", "--model", tinyp, "--train", p("train.jsonl"), *FT, "--resume", "--out", p("ft-resume")])
check(r.returncode == 0 and file_bytes(os.path.join(p("ft-resume"), "checkpoint-3", "model.safetensors")) == a,
      "finetune --resume with the same prompts ends where the uninterrupted run did: " + r.stderr[-200:])

# ---- pre-training: query-as-context pairs ----
data = debian_pairs(p("pairs.jsonl"), n=24)
recs = read_jsonl(data)
for r_ in recs:  # short texts and queries: nothing is cut on either side
    r_["text"] = " ".join(r_["text"].split()[:20])
    r_["queries"] = [" ".join(q.split()[:8]) for q in r_["queries"]]
with open(p("pt.jsonl"), "w") as f:
    f.writelines(json.dumps(r_) + "\n" for r_ in recs)
with open(p("pt-prefixed.jsonl"), "w") as f:
    f.writelines(json.dumps(dict(r_, text="passage: " + r_["text"], queries=["query: " + q for q in r_["queries"]]))
                 + "\n" for r_ in recs)
PT = ["--objective", "cocondenser", "--context", "query", "--steps", "3", "--batch", "4", "--lr", "1e-3",
      "--max-len", "64", "--query-max-len", "32", "--threads", "2"]
r = run(["pretrain", "--model", tinyp, "--data", p("pt.jsonl"), *PT, "--out", p("pt")])
check(r.returncode == 0, "pretrain with the model's prompts: " + r.stderr[-300:])
r = run(["pretrain", "--model", tiny, "--data", p("pt-prefixed.jsonl"), *PT, "--out", p("pt-ref")])
check(r.returncode == 0, "pretrain without prompts on prefixed texts: " + r.stderr[-300:])
a, b = (file_bytes(os.path.join(d, "model.safetensors")) for d in (p("pt"), p("pt-ref")))
check(a == b, "pretrain: prompts give the weights of the texts written with the prompts, bit for bit")
r = run(["pretrain", "--model", tiny, "--data", p("pt.jsonl"), *PT, "--out", p("pt-none")])
check(r.returncode == 0 and file_bytes(os.path.join(p("pt-none"), "model.safetensors")) != a,
      "pretrain: without the prompts the weights differ (the check can fail)")
check(st_config(p("pt"))["prompts"] == PROMPTS, f"pretrain: the exported encoder keeps the prompts: {st_config(p('pt'))}")
r = run(["pretrain", "--model", tinyp, "--data", p("pt.jsonl"), *PT, "--resume", "--query-prompt", "",
         "--out", p("pt")])
check(r.returncode == 2 and "prompt" in r.stderr, "pretrain --resume with other prompts is refused: " + r.stderr[-200:])

# ---- mining with a prompted query encoder ----
testdata.cranfield_subset(p("corpus.all"), 200)
queries, qrels = os.path.join(CRAN, "cran.qry"), p("qrels")
with open(qrels, "w") as f:  # the judgements of the 200 documents kept
    f.writelines(l for l in open(os.path.join(CRAN, "cranqrel")) if int(l.split()[1]) <= 200)
r = run(["index", "build", "--model", tinyp, "--corpus", p("corpus.all"), "--format", "cranfield", "--out", p("ix"),
         "--max-len", "64", "--device", "cpu"])
check(r.returncode == 0, "index build with the tiny prompted model: " + r.stderr[-200:])
r = run(["search", "--model", tinyp, "--index", p("ix"), "--queries", queries, "--run", p("ix.run"), "--k", "50",
         "--device", "cpu"])
check(r.returncode == 0, "search: " + r.stderr[-200:])
MINE = ["--queries", queries, "--qrels", qrels, "--corpus", p("corpus.all"), "--n", "5", "--depth", "50"]
r1 = run(["mine", "--run", p("ix.run"), *MINE, "--out", p("mined-run.jsonl")])
r2 = run(["mine", "--model", tinyp, "--index", p("ix"), *MINE, "--out", p("mined-model.jsonl"), "--device", "cpu"])
check(r1.returncode == 0 and r2.returncode == 0 and read_jsonl(p("mined-run.jsonl"))
      and file_bytes(p("mined-run.jsonl")) == file_bytes(p("mined-model.jsonl")),
      "mine --model --index equals mine --run of the prompted search: " + (r1.stderr + r2.stderr)[-300:])
r = run(["mine", "--model", tinyp, "--index", p("ix"), *MINE, "--out", p("mined-x.jsonl"), "--query-prompt", ""])
check(r.returncode != 0 and "query prompt" in r.stderr, "mine refuses another query prompt than the index's")
finish()
