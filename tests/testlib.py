"""Shared by the Python tests that run every check and report each one
(pytest's tests use assert instead):

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from testlib import check, finish, run
    r = run(["index", "build", ...])         # the qac binary under test (QAC_BIN)
    check(r.returncode == 0, "what it shows")  # prints ok/FAIL, returns the condition
    finish()                                   # the failed checks again; exit 1 if any

and the default model's directory, a tiny random BERT and a toy training
file, to train fast.
"""
import json
import os
import shutil
import subprocess
import sys

QAC = os.environ.get("QAC_BIN", "qac")
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
    """qac ARGS; env adds to the environment; quiet=False drops QAC_QUIET so
    progress and summaries show."""
    e = dict(os.environ)
    if not quiet:
        e.pop("QAC_QUIET", None)
    e.update(env or {})
    return subprocess.run([QAC, *args], capture_output=True, text=True, env=e, **kw)


def default_model_dir():
    r = run(["info", "--json"])
    if r.returncode != 0:
        raise RuntimeError("no default model: " + r.stderr)
    return json.loads(r.stdout)["dir"]


def tiny_model(out, hidden=32, layers=2, heads=2, seed=0, normalize=False, max_position=128, init_range=0.02):
    """A random BERT with the default model's vocabulary (and its pooler); with
    normalize, the sentence-transformers files of a mean-pooled, normalising model.
    init_range: the weights' standard deviation (BertConfig.initializer_range)."""
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=2 * hidden, max_position_embeddings=max_position, initializer_range=init_range)
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


def toy_train(path, n=6):
    """n Tevatron examples, one positive and one negative passage each."""
    def passage(d, t):
        return {"docid": d, "title": "", "text": t}
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"query_id": str(i), "query": f"wing flow question {i}",
                                "positive_passages": [passage(f"p{i}", f"the wing in a slipstream {i}")],
                                "negative_passages": [passage(f"n{i}", f"heat transfer in slabs {i}")]}) + "\n")
    return path
