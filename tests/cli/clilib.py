"""Helpers for the CLI tests: run the qac binary (QAC_BIN) with or without
QAC_QUIET, record checks, and small corpora written by the tests."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import scratch  # noqa: E402,F401

QAC = os.environ.get("QAC_BIN", "qac")
SHARED = os.environ.get("QAC_SHARED_DATA", "")
CRAN = os.path.join(SHARED, "cranfield")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def finish():
    if failures:
        print(f"{len(failures)} checks failed:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("all checks passed")


def run(args, quiet=True, env=None, **kw):
    """qac ARGS; quiet=False drops QAC_QUIET so progress and summaries show."""
    e = dict(os.environ)
    if not quiet:
        e.pop("QAC_QUIET", None)
    e.update(env or {})
    return subprocess.run([QAC, *args], capture_output=True, text=True, env=e, **kw)


def default_model_dir():
    r = run(["info", "--json"])
    return json.loads(r.stdout)["dir"]


def cranfield_tsv(path, n, start=0):
    """n Cranfield documents (title and abstract) as id<TAB>text lines."""
    docs, cur = [], None
    with open(os.path.join(CRAN, "cran.all.1400"), encoding="utf-8") as f:
        for line in f:
            if line.startswith(".I "):
                cur = [line.split()[1], [], None]
                docs.append(cur)
            elif line.startswith("."):
                cur[2] = line[1]
            elif cur and cur[2] in ("T", "W"):
                cur[1].append(line.strip())
    with open(path, "w", encoding="utf-8") as f:
        for d, words, _ in docs[start:start + n]:
            f.write(f"{d}\t{' '.join(w for w in words if w)}\n")
    return path


def tiny_model(out, hidden=32, layers=2, heads=2, seed=0, normalize=False):
    """A random BERT with the default model's vocabulary; with normalize, the
    sentence-transformers files of a mean-pooled, normalising model."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=2 * hidden, max_position_embeddings=128)
    BertModel(cfg).save_pretrained(out, safe_serialization=True)
    src = default_model_dir()
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), out)
    if normalize:
        os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
        json.dump({"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True,
                   "pooling_mode_cls_token": False}, open(os.path.join(out, "1_Pooling", "config.json"), "w"))
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
                  open(os.path.join(out, "modules.json"), "w"))
    return out
