#!/usr/bin/env python3
"""Pre-training data (api/qac_pretrain.h) against independent references:
the HF tokenizer for every token, a Python re-implementation of the
sentence rule and the span packing, and the promised properties of the
draws (determinism per (seed, step, slot), resume, epoch order, span
lengths and boundaries, uniform query sampling by a chi-square bound, the
curriculum's step function computed here from the paper's rule).
Data: a deterministic sample of ../shared/data/debian-packages and a
synthetic file of edge cases. Usage: test_ptdata.py PT_TOOL"""
import gzip
import json
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402
import testdata  # noqa: E402
from testlib import QAC, check, default_model_dir, finish  # noqa: E402

TOOL = sys.argv[1]
DEB = testdata.path("debian-packages", "packages.jsonl.gz")
MAXLEN, QMAX = 144, 32


def tool(*args, ok=True):
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise RuntimeError(f"pt_tool {args}: {r.stderr}")
    return r


def lines(*args):
    out = [json.loads(l) for l in tool(*args).stdout.splitlines()]
    return out[:-1], out[-1]["stats"]


from transformers import AutoTokenizer  # noqa: E402

MODEL = default_model_dir()
HF = AutoTokenizer.from_pretrained(MODEL)
CLS, SEP = HF.cls_token_id, HF.sep_token_id
WORD_START = [not t.startswith("##") for t in HF.convert_ids_to_tokens(list(range(HF.vocab_size)))]


def hf(text):
    return HF(text, add_special_tokens=False)["input_ids"]


# ---- the rules, written again from the header ----
def sentence_pieces(text):
    """Cut after a run ending in . ! ? followed by whitespace, and at each \\n\\n."""
    cuts, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "\n" and i + 1 < n and text[i + 1] == "\n":
            cuts.append(i)
            while i + 1 < n and text[i + 1] == "\n":
                i += 1
        elif text[i] in ".!?" and i + 1 < n and text[i + 1] in " \t\n\r":
            cuts.append(i + 1)
        i += 1
    cuts.append(n)
    pieces, frm = [], 0
    for c in cuts:
        pieces.append(text[frm:c])
        frm = c
    return pieces


def sentence_starts(text):
    starts, ntok = [], 0
    for p in sentence_pieces(text):
        k = len(hf(p))
        if k:
            starts.append(ntok)
            ntok += k
    return starts + [ntok]


def pack(tok, sent, L):
    spans, s, forced = [], 0, 0
    while s < len(tok):
        spans.append(s)
        if len(tok) - s <= L:
            break
        inside = [b for b in sent if s < b <= s + L]
        if inside:
            s = max(inside)
        else:
            ws = [t for t in range(s + 1, s + L + 1) if WORD_START[tok[t]]]
            s = max(ws) if ws else s + L
            forced += 1
    return spans + [len(tok)], forced


def rule(tok, sent, span):
    if len(span) - 1 >= 2:
        return "multi"
    if len(sent) - 1 >= 2:
        return "sentence"
    if any(WORD_START[t] for t in tok[1:]):
        return "word"
    return "self"


# ---- data ----
tmp = scratch.mkdtemp(prefix="qac-ptdata-")
recs = []
with gzip.open(DEB, "rt", encoding="utf-8") as f:
    for i, l in enumerate(f):
        if i < 150 or i % 97 == 0:  # the head plus a spread over the file
            recs.append(json.loads(l))
sample = os.path.join(tmp, "sample.jsonl.gz")
with gzip.open(sample, "wt", encoding="utf-8") as f:
    for r in recs:
        f.write(json.dumps(r) + "\n")

long_sentence = " ".join(f"word{i} and more" for i in range(120))  # no boundary, > 142 tokens
edge = [
    {"id": "empty", "text": "", "queries": ["q"]},
    {"id": "notext", "queries": ["q"]},
    {"id": "nulltext", "text": None},
    {"id": "blank", "text": "   \n\n  ", "queries": ["q"]},
    {"id": "noq", "text": "First sentence here. Second one follows! Third? Yes.", "title": "t", "links": ["x"]},
    {"id": 17, "text": "Just one sentence without an end", "queries": []},
    {"id": "oneword", "text": "Word", "queries": ["the only query"]},
    {"id": "onewordpieces", "text": "antidisestablishmentarianism", "queries": ["a", "b"]},
    {"id": "long", "text": long_sentence, "queries": ["long query " * 40]},
    {"id": "paras", "text": "Para one line\n\nPara two. With two sentences\n\n\nPara three", "queries": ["p"]},
    {"id": "five", "text": "Five queries here. And a second sentence.", "queries": [f"query number {i}" for i in range(5)]},
]
edge_path = os.path.join(tmp, "edge.jsonl")
with open(edge_path, "w") as f:
    for r in edge:
        f.write(json.dumps(r) + "\n\n")  # blank lines are skipped


def check_dump(path, records, docs_path=None, docs=None, label=""):
    rows, st = lines("dump", "-", path, docs_path or "-", MAXLEN, QMAX)
    kept = [r for r in records if r.get("text") and hf(r["text"])]
    recs_rows = [r for r in rows if r["file"] == "records"]
    check(len(recs_rows) == len(kept) and st["skipped_no_text"] == len(records) - len(kept),
          f"{label}: {len(kept)} records kept, {st['skipped_no_text']} without text skipped")
    bad_tok = bad_sent = bad_q = bad_span = 0
    for row, r in zip(recs_rows, kept):
        toks = hf(r["text"])
        bad_tok += row["tok"] != toks or row["id"] != str(r["id"])
        bad_sent += row["sent"] != sentence_starts(r["text"])
        bad_q += row["q"] != [hf(q)[:QMAX - 2] for q in r.get("queries") or []]
        bad_span += row["span"] != pack(toks, row["sent"], MAXLEN - 2)[0]
    check(bad_tok == 0, f"{label}: text tokens = HF tokenizer ({bad_tok} differ)")
    check(bad_sent == 0, f"{label}: sentence starts = the rule re-implemented with HF ({bad_sent} differ)")
    check(bad_q == 0, f"{label}: query tokens = HF tokenizer, cut to {QMAX - 2} ({bad_q} differ)")
    check(bad_span == 0, f"{label}: span packing = the greedy rule re-implemented ({bad_span} differ)")
    span_rows = [r for r in rows if r["file"] == "docs"] if docs_path else recs_rows
    counts = {"multi": 0, "sentence": 0, "word": 0, "self": 0}
    forced = 0
    for row in span_rows:
        counts[rule(row["tok"], row["sent"], row["span"])] += 1
        forced += pack(row["tok"], row["sent"], MAXLEN - 2)[1]
        sp = row["span"]
        for a, b in zip(sp, sp[1:]):
            if not (0 < b - a <= MAXLEN - 2):
                bad_span += 1
    check(bad_span == 0, f"{label}: every span holds 1..{MAXLEN - 2} tokens")
    got = {k: st[f"span_{n}"] for k, n in (("multi", "multi"), ("sentence", "split_sentence"),
                                          ("word", "split_word"), ("self", "self"))}
    check(got == counts and st["forced_cuts"] == forced and st["span_docs"] == len(span_rows),
          f"{label}: span-rule counts {got}, forced cuts {st['forced_cuts']} = recomputed {counts}, {forced}")
    check(st["no_queries"] == sum(1 for r in kept if not r.get("queries")) and
          st["queries"] == sum(len(r.get("queries") or []) for r in kept), f"{label}: query counts")
    return rows, st


deb_rows, deb_st = check_dump(sample, recs, label="debian sample")
edge_rows, edge_st = check_dump(edge_path, edge, label="edge cases")
byid = {r["id"]: r for r in edge_rows}
check(rule(byid["long"]["tok"], byid["long"]["sent"], byid["long"]["span"]) == "multi" and edge_st["forced_cuts"] >= 1
      and all(WORD_START[byid["long"]["tok"][s]] for s in byid["long"]["span"][1:-1]),
      "a sentence without boundaries is cut at word starts within the cap")
check(rule(byid["17"]["tok"], byid["17"]["sent"], byid["17"]["span"]) == "word", "one sentence: split at a word")
check(rule(byid["oneword"]["tok"], byid["oneword"]["sent"], byid["oneword"]["span"]) == "self",
      "one word: paired with itself")
check(len(byid["paras"]["sent"]) - 1 == 4, "paragraph breaks and '. ' cut sentences")

# a separate documents file for spans
docs_path = os.path.join(tmp, "docs.jsonl")
docs = [{"id": f"d{i}", "text": r["text"]} for i, r in enumerate(recs[:40])] + [{"_id": "beir", "text": "A. B. C."}]
with open(docs_path, "w") as f:
    for r in docs:
        f.write(json.dumps(r) + "\n")
check_dump(edge_path, edge, docs_path, docs, label="edge + documents file")


# ---- draws ----
def span_ok(pair, row):
    """a and b are [CLS] x [SEP] with x the rule's pieces of the document."""
    tok, sent, span = row["tok"], row["sent"], row["span"]
    a, b = pair["a"], pair["b"]
    if a[0] != CLS or a[-1] != SEP or b[0] != CLS or b[-1] != SEP:
        return False
    a, b = a[1:-1], b[1:-1]
    if len(a) > MAXLEN - 2 or len(b) > MAXLEN - 2:
        return False
    kind = rule(tok, sent, span)
    if kind == "multi":
        pieces = [tok[x:y] for x, y in zip(span, span[1:])]
        return a in pieces and b in pieces and any(
            pieces[i] == a and pieces[j] == b for i in range(len(pieces)) for j in range(len(pieces)) if i != j)
    if kind == "self":
        return a == b == tok
    cuts = sent[1:-1] if kind == "sentence" else [t for t in range(1, len(tok)) if WORD_START[tok[t]]]
    return any((a == tok[:c] and b == tok[c:]) or (b == tok[:c] and a == tok[c:]) for c in cuts)


B = 16
N = len(deb_rows)
steps = -(-2 * N // B) + 1  # a bit over two epochs
pairs, st = lines("draw", "-", sample, "-", MAXLEN, QMAX, 42, B, 0, steps, 0)
check(all(p["kind"] == 0 for p in pairs) and st["drawn_query"] == len(pairs), "span_prob 0: query pairs only")
bad = sum(p["a"] != HF(recs[p["doc"]]["text"], truncation=True, max_length=MAXLEN)["input_ids"]
          or p["b"] not in [HF(q, truncation=True, max_length=QMAX)["input_ids"] for q in recs[p["doc"]]["queries"]]
          for p in pairs)
check(bad == 0, f"query pairs: a = HF(text, max_length {MAXLEN}), b = HF(query, max_length {QMAX}) ({bad} differ)")
stream = [p["doc"] for p in sorted(pairs, key=lambda p: (p["step"], p["slot"]))]
check(sorted(stream[:N]) == list(range(N)) and sorted(stream[N:2 * N]) == list(range(N)) and stream[:N] != stream[N:2 * N],
      "slot i of step s is position s*B+i of a fresh permutation per epoch")
again, _ = lines("draw", "-", sample, "-", MAXLEN, QMAX, 42, B, 0, steps, 0)
check(again == pairs, "the same (seed, steps) draw the same pairs")
other, _ = lines("draw", "-", sample, "-", MAXLEN, QMAX, 43, B, 0, steps, 0)
check([p["doc"] for p in other] != [p["doc"] for p in pairs], "another seed, another order")

sp_pairs, st = lines("draw", "-", sample, "-", MAXLEN, QMAX, 42, B, 0, steps, 1)
bad = sum(p["kind"] != 1 or not span_ok(p, deb_rows[p["doc"]]) for p in sp_pairs)
check(bad == 0 and st["drawn_span"] == len(sp_pairs),
      f"span pairs: two spans on sentence boundaries within {MAXLEN} tokens, by the documented rule ({bad} bad)")
check([p["doc"] for p in sp_pairs] == [p["doc"] for p in pairs], "the kind does not move the document stream")
resumed, _ = lines("draw", "-", sample, "-", MAXLEN, QMAX, 42, B, 7, steps, 1)
check(resumed == [p for p in sp_pairs if p["step"] >= 7], "a run resumed at step 7 draws the same pairs")
by_doc = {}
for p in sp_pairs:
    by_doc.setdefault(p["doc"], set()).add((tuple(p["a"]), tuple(p["b"])))
resampled = sum(1 for d, s in by_doc.items() if len(s) > 1)
check(resampled > len(by_doc) // 3, f"spans are re-sampled per draw ({resampled} of {len(by_doc)} documents varied)")

mixed, st = lines("draw", "-", sample, "-", MAXLEN, QMAX, 5, 64, 0, 60, 0.5)
frac = sum(p["kind"] for p in mixed) / len(mixed)
sd = math.sqrt(0.25 / len(mixed))
check(abs(frac - 0.5) < 4 * sd, f"mixed: span fraction {frac:.4f} within 4 sd of 0.5")
check(all(span_ok(p, deb_rows[p["doc"]]) if p["kind"] else p["b"][0] == CLS for p in mixed), "mixed pairs well formed")

# edge cases: fallback for records without queries, uniform query sampling
ed_pairs, st = lines("draw", "-", edge_path, "-", MAXLEN, QMAX, 9, 8, 0, 40, 0)
noq = {i for i, r in enumerate(edge_rows) if not r["q"]}
check(all((p["kind"] == 1) == (p["doc"] in noq) for p in ed_pairs) and
      st["query_fallback"] == sum(p["doc"] in noq for p in ed_pairs) > 0,
      f"records without queries fall back to span pairs ({st['query_fallback']} counted)")
check(all(span_ok(p, edge_rows[p["doc"]]) for p in ed_pairs if p["kind"] == 1), "edge-case span pairs by the rule")
lq = next(p for p in ed_pairs if edge_rows[p["doc"]]["id"] == "long" and p["kind"] == 0)
check(len(lq["a"]) == MAXLEN and len(lq["b"]) == QMAX, "long passage and query cut to their caps")

five_path = os.path.join(tmp, "five.jsonl")
with open(five_path, "w") as f:
    f.write(json.dumps(edge[-1]) + "\n")
five_pairs, _ = lines("draw", "-", five_path, "-", MAXLEN, QMAX, 3, 50, 0, 100, 0)
qs = [HF(q, truncation=True, max_length=QMAX)["input_ids"] for q in edge[-1]["queries"]]
counts = [sum(p["b"] == q for p in five_pairs) for q in qs]
n = len(five_pairs)
chi2 = sum((c - n / 5) ** 2 / (n / 5) for c in counts)
check(sum(counts) == n and chi2 < 18.47, f"queries drawn uniformly: counts {counts}, chi-square {chi2:.2f} < 18.47 (4 dof, p 0.001)")

word_path = os.path.join(tmp, "word.jsonl")
with open(word_path, "w") as f:
    f.write(json.dumps({"id": "w", "text": "alpha beta gamma delta epsilon", "queries": []}) + "\n")
wp, _ = lines("draw", "-", word_path, "-", MAXLEN, QMAX, 3, 50, 0, 40, 1)
cuts = [len(p["a"]) - 2 if p["a"][1] == hf("alpha")[0] else len(p["b"]) - 2 for p in wp]
cc = [cuts.count(c) for c in range(1, 5)]
chi2 = sum((c - len(wp) / 4) ** 2 / (len(wp) / 4) for c in cc)
check(chi2 < 16.27, f"one-sentence split point uniform over word starts: {cc}, chi-square {chi2:.2f} < 16.27")

# documents file: span slots come from it, query slots from the records
dp, st = lines("draw", "-", edge_path, docs_path, MAXLEN, QMAX, 4, 8, 0, 30, 0.5)
drows = [r for r in lines("dump", "-", edge_path, docs_path, MAXLEN, QMAX)[0] if r["file"] == "docs"]
check(all(span_ok(p, drows[p["doc"]]) for p in dp if p["kind"] == 1) and
      sum(p["kind"] == 1 for p in dp) > 0, "with a documents file, span pairs are cut from its documents")

# bad input
badp = os.path.join(tmp, "bad.jsonl")
with open(badp, "w") as f:
    f.write('{"id":"a","text":"ok"}\n{"id":"b","text": oops}\n')
r = tool("dump", "-", badp, "-", MAXLEN, QMAX, ok=False)
check(r.returncode != 0 and "bad.jsonl:2" in r.stderr, f"malformed JSON names file and line: {r.stderr.strip()}")
with open(badp, "w") as f:
    f.write('{"id":"a","text":"ok","queries":"not a list"}\n')
r = tool("dump", "-", badp, "-", MAXLEN, QMAX, ok=False)
check(r.returncode != 0 and "bad.jsonl:1" in r.stderr and "queries" in r.stderr, "queries not an array: clear error")
with open(badp, "w") as f:
    f.write('{"id":"a","text":"ok"}\n  \t\n[1, 2]\n')
r = tool("dump", "-", badp, "-", MAXLEN, QMAX, ok=False)
check(r.returncode != 0 and "bad.jsonl:3: not a JSON object" in r.stderr,
      f"a JSON array line: not an object, blank lines counted: {r.stderr.strip()}")
with open(badp, "w") as f:
    f.write('{"id":"a","text":"ok"}\n{"id":1.5,"text":"ok"}\n')
r = tool("dump", "-", badp, "-", MAXLEN, QMAX, ok=False)
check(r.returncode != 0 and 'bad.jsonl:2: missing "id" (string or integer)' in r.stderr,
      f"a number id that is not an integer: missing id: {r.stderr.strip()}")
with open(badp, "w") as f:
    f.write('{"id":7,"text":"seven"}\n{"id":null,"_id":"b","text":"bee"}\n{"docid":-3,"text":"c"}\n')
ids = [d["id"] for d in lines("dump", "-", badp, "-", MAXLEN, QMAX)[0]]
check(ids == ["7", "b", "-3"], f"ids: integers as decimal text, then _id and docid: {ids}")
trunc = os.path.join(tmp, "trunc.jsonl.gz")
with open(sample, "rb") as f, open(trunc, "wb") as g:
    g.write(f.read()[:3000])
r = tool("dump", "-", trunc, "-", MAXLEN, QMAX, ok=False)
check(r.returncode != 0 and "trunc.jsonl.gz" in r.stderr, f"truncated gzip: clear error: {r.stderr.strip()}")
r = tool("dump", "-", os.path.join(tmp, "missing.jsonl"), "-", MAXLEN, QMAX, ok=False)
check(r.returncode != 0 and "missing.jsonl" in r.stderr, "missing file named")

# mutated files: an error naming the file, or a clean load; never a crash
import random  # noqa: E402
rnd = random.Random(12)
base = open(edge_path, "rb").read()
crashes, errors_unnamed = [], []
mut = os.path.join(tmp, "mutant.jsonl")
for k in range(120):
    b = bytearray(base)
    for _ in range(rnd.randint(1, 6)):
        pos = rnd.randrange(len(b))
        op = rnd.randrange(4)
        if op == 0:
            b[pos] = rnd.randrange(256)
        elif op == 1:
            b[pos:pos] = rnd.choice([b'"', b"{", b"]", b",", b"\\u00", b"\xff\xfe", b"\n", b". ", b"\n\n", b"null"])
        elif op == 2:
            del b[pos:pos + rnd.randint(1, 20)]
        else:
            b = b[:pos]
    with open(mut, "wb") as f:
        f.write(bytes(b))
    r = tool("dump", "-", mut, "-", 16, 8, ok=False)
    if r.returncode not in (0, 1):
        crashes.append((k, r.returncode, r.stderr[-300:]))
    elif r.returncode == 1 and "mutant.jsonl" not in r.stderr:
        errors_unnamed.append((k, r.stderr.strip()))
check(not crashes, f"120 mutated files: no crash ({crashes[:2]})")
check(not errors_unnamed, f"120 mutated files: every error names the file ({errors_unnamed[:2]})")

# ---- contexts and the curriculum ----
def probs(ctx, cur, total):
    out = tool("prob", ctx, cur, total).stdout.splitlines()
    return out[0], [float(l.split()[1]) for l in out[1:]]


for ctx, want in (("query", 0.0), ("span", 1.0), ("mixed", 0.5)):
    _, p = probs(ctx, "-", 10)
    check(p == [want] * 10, f"--context {ctx}: span probability {want} at every step")
for spec, frac in (("span:0.75,query", 0.75), ("span,query", 0.75), ("span:0.6,query", 0.6), (" span : 0.3 , query", 0.3)):
    for total in (1, 7, 100, 1001):
        _, p = probs("query", spec, total)
        # the paper: the first 75% of the total steps are the span stage
        S = math.floor(frac * total + 0.5)
        check(p == [1.0] * S + [0.0] * (total - S), f"--curriculum '{spec}' over {total} steps: span steps [0, {S})")
out = tool("prob", "query", "span:0.75,query", 100).stdout.splitlines()
lr = [float(l.split()[2]) for l in out[1:]]
# the reference: transformers' own warmup + cosine schedule over the span
# stage (75 steps, warmup round(0.1 * 75) = 8), then the constant stage
import torch  # noqa: E402
from transformers import get_cosine_schedule_with_warmup  # noqa: E402
sched = get_cosine_schedule_with_warmup(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
                                        num_warmup_steps=math.floor(0.1 * 75 + 0.5), num_training_steps=75)
ref = [sched.lr_lambdas[0](s) for s in range(75)] + [1.0] * 25
check(lr[0] == 0.0, "curriculum learning rate: 0 at step 0, as every other schedule")
check(max(abs(a - b) for a, b in zip(lr, ref)) < 1e-12,
      "curriculum learning rate: transformers' warmup + cosine over the span stage, then constant")
for bad_ctx, bad_cur in (("spam", "-"), ("query", "span:1.5,query"), ("query", "query,span"), ("query", "span:0.5"),
                         ("query", "span:x,query")):
    r = tool("prob", bad_ctx, bad_cur, 3, ok=False)
    check(r.returncode != 0 and (bad_ctx in r.stderr or bad_cur in r.stderr), f"bad '{bad_ctx}' / '{bad_cur}' refused: {r.stderr.strip()}")

finish()
