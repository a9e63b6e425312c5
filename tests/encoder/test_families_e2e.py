"""Every path that takes a model, on the families beyond BERT (the
checkpoints of tests/reference/gen_family_fixtures.py, saved by
sentence-transformers; the reference: its embeddings of the same texts,
from the texts, so qac's tokenizer is part of what is compared):

  qac info        names the family, the tokenizer and the pooling
  qac encode      every text: cosine >= 0.99999 against sentence-transformers
                  (fp32, CPU)
  index + search  a Flat index of the texts, the first texts as queries:
                  qac's top 5 are numpy's over sentence-transformers'
                  vectors, scores within 1e-4
  qac serve       /v1/embeddings (OpenAI) and TEI's /embed give the same
                  vectors; /tokenize gives the Hugging Face tokenizer's ids,
                  and its byte offsets where qac reports them
  Python          qac.Encoder(model).encode, the same vectors
  qac finetune    two CPU steps; the output loads in transformers
                  (AutoModel, as the family's class) and sentence-transformers,
                  whose embeddings qac encode of it matches

argv: FIXTURE_DIR NAME..."""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
import scratch  # noqa: E402
from testlib import check, finish, run  # noqa: E402

COS_MIN = 0.99999  # the bar, and test_families.c's on the same checkpoints
CLASSES = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel",
           "modernbert": "ModernBertModel"}


def cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-300)


def st_embed(d, texts):
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(d, device="cpu").encode(texts, convert_to_numpy=True, batch_size=16)


def write_tsv(path, texts, prefix="t"):
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(f"{prefix}{i}\t{t}\n")
    return path


def family(name, d, texts, ref, work):
    cfg = json.load(open(os.path.join(d, "config.json")))
    mt = cfg["model_type"]
    r = run(["info", "--model", d, "--json"])
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    pool = json.load(open(os.path.join(d, "1_Pooling", "config.json")))
    want_pool = pool.get("pooling_mode") or ("cls" if pool.get("pooling_mode_cls_token") else "mean")
    check(r.returncode == 0 and info["config"]["model_type"] == mt and info["pooling"] == want_pool and
          info["tokenizer"]["kind"] != "none" and ("rotary" in info["family"]) == (mt == "modernbert"),
          f"{name}: qac info names {mt}, {want_pool} pooling and its tokenizer ({info.get('tokenizer')}) "
          + r.stderr.strip()[-200:])
    r = run(["info", "--model", d])
    check(r.returncode == 0 and f"architecture    {mt}:" in r.stdout and "family " in r.stdout,
          f"{name}: qac info's text names the family")
    # the same directory as the Hugging Face cache holds it, by the repository's name
    hub = os.path.join(work, "hub")
    snap = os.path.join(hub, f"models--qac-test--{name}", "snapshots", "0123abcd")
    os.makedirs(os.path.dirname(snap), exist_ok=True)
    os.makedirs(os.path.join(hub, f"models--qac-test--{name}", "refs"), exist_ok=True)
    if not os.path.exists(snap):
        os.symlink(os.path.abspath(d), snap)
    with open(os.path.join(hub, f"models--qac-test--{name}", "refs", "main"), "w") as f:
        f.write("0123abcd")
    r = run(["info", "--model", f"qac-test/{name}", "--json"], env={"HF_HUB_CACHE": hub})
    cached = json.loads(r.stdout) if r.returncode == 0 else {}
    check(r.returncode == 0 and cached.get("fingerprint") == info.get("fingerprint"),
          f"{name}: --model qac-test/{name} finds it in the hub cache (HF_HUB_CACHE) " + r.stderr.strip()[-200:])

    tsv = write_tsv(os.path.join(work, name + ".tsv"), texts)
    npy = os.path.join(work, name + ".npy")
    r = run(["encode", "--model", d, "--input", tsv, "--output", npy, "--device", "cpu", "--threads", "2"])
    got = np.load(npy) if r.returncode == 0 else np.zeros_like(ref)
    c = cosines(got, ref)
    print(f"{name}: qac encode, {len(texts)} texts: min cosine {c.min():.9f}")
    check(r.returncode == 0 and c.min() >= COS_MIN, f"{name}: qac encode against sentence-transformers "
          f"(min cosine {c.min():.9f}) " + r.stderr.strip()[-200:])

    # index and search: the top 5 of numpy over the reference vectors
    ix = os.path.join(work, name + ".ix")
    r = run(["index", "build", "--model", d, "--corpus", tsv, "--out", ix, "--device", "cpu"])
    check(r.returncode == 0, f"{name}: qac index build " + r.stderr.strip()[-200:])
    nq = 4
    qtsv = write_tsv(os.path.join(work, name + ".q.tsv"), texts[:nq], prefix="q")
    trec = os.path.join(work, name + ".trec")
    r = run(["search", "--index", ix, "--model", d, "--queries", qtsv, "--run", trec, "-k", "5", "--device", "cpu"])
    rows = {}
    for line in open(trec) if r.returncode == 0 else []:
        q, _, doc, rank, score, _ = line.split()
        rows.setdefault(q, []).append((doc, float(score)))
    ok = r.returncode == 0 and len(rows) == nq
    for i in range(nq):
        s = ref @ ref[i]
        top = np.argsort(-s, kind="stable")[:5]
        hits = rows.get(f"q{i}", [])
        ok &= [h[0] for h in hits] == [f"t{j}" for j in top]
        ok &= all(abs(h[1] - s[j]) <= 1e-4 * max(1.0, abs(s[j])) for h, j in zip(hits, top))
    check(ok, f"{name}: qac search's top 5 are sentence-transformers' " + r.stderr.strip()[-200:])

    # serving: OpenAI and TEI embeddings, /tokenize against the HF tokenizer
    from srvlib import Server, http
    srv = Server("--model", d, "--index", ix, "--device", "cpu")
    try:
        s, _, body = http(srv.base, "POST", "/v1/embeddings", {"input": texts[:6], "model": "x"})
        emb = np.array([x["embedding"] for x in body["data"]]) if s == 200 else np.zeros((6, ref.shape[1]))
        check(s == 200 and cosines(emb, ref[:6]).min() >= COS_MIN, f"{name}: /v1/embeddings ({s})")
        s, _, body = http(srv.base, "POST", "/embed", {"inputs": texts[:3]})
        check(s == 200 and cosines(np.array(body), ref[:3]).min() >= COS_MIN, f"{name}: TEI /embed ({s})")
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(d)
        sample = texts[6:9]
        s, _, body = http(srv.base, "POST", "/tokenize", {"inputs": sample, "add_special_tokens": True})
        ok = s == 200 and len(body) == len(sample)
        for t, toks in zip(sample, body if ok else []):
            enc = tok(t, truncation=True, max_length=512, return_offsets_mapping=True)
            ok &= [x["id"] for x in toks] == enc["input_ids"]
            for x, (a, b) in zip(toks, enc["offset_mapping"]):  # characters -> bytes, where qac gives them
                if x["start"] is not None and not x["special"]:
                    ok &= (x["start"], x["stop"]) == (len(t[:a].encode()), len(t[:b].encode()))
        check(ok, f"{name}: /tokenize gives the Hugging Face tokenizer's ids and offsets ({s})")
    finally:
        rc = srv.stop()
    check(rc == 0, f"{name}: the server stops cleanly")

    # the Python package
    try:
        import qac
        e = qac.Encoder(d, device="cpu")
        v = e.encode(texts[:5])
        check(cosines(v, ref[:5]).min() >= COS_MIN, f"{name}: qac.Encoder(...).encode in Python")
    except Exception as ex:  # noqa: BLE001 - reported as a failed check
        check(False, f"{name}: Python: {ex!r}")

    # fine-tuning: two steps, then transformers and sentence-transformers load the output
    train = os.path.join(work, name + ".train.jsonl")
    with open(train, "w", encoding="utf-8") as f:
        for i in range(4):
            f.write(json.dumps({"query_id": f"q{i}", "query": texts[i],
                                "positive_passages": [{"docid": f"p{i}", "title": "a title", "text": texts[i + 4]}],
                                "negative_passages": [{"docid": f"n{i}", "title": "", "text": texts[i + 9]}]}) + "\n")
    out = os.path.join(work, name + ".ft")
    r = run(["finetune", "--model", d, "--train", train, "--out", out, "--steps", "2", "--batch", "2",
             "--n-passages", "2", "--device", "cpu", "--threads", "2", "--lr", "1e-4"])
    check(r.returncode == 0, f"{name}: qac finetune, 2 steps " + r.stderr.strip()[-300:])
    if r.returncode == 0:
        from transformers import AutoModel
        m = AutoModel.from_pretrained(out)
        check(type(m).__name__ == CLASSES[mt], f"{name}: the fine-tuned checkpoint loads in transformers as "
              f"{type(m).__name__}")
        after = st_embed(out, texts[:8])
        npy2 = os.path.join(work, name + ".ft.npy")
        r = run(["encode", "--model", out, "--input", write_tsv(os.path.join(work, name + ".8.tsv"), texts[:8]),
                 "--output", npy2, "--device", "cpu"])
        c2 = cosines(np.load(npy2), after) if r.returncode == 0 else np.zeros(1)
        moved = cosines(after, ref[:8]).min() < 1.0 - 1e-9
        check(r.returncode == 0 and c2.min() >= COS_MIN and moved,
              f"{name}: qac encode of the fine-tuned model matches sentence-transformers' (min cosine "
              f"{c2.min():.9f}; the weights moved: {moved})")


def main():
    fix, names = sys.argv[1], sys.argv[2:]
    from safetensors.numpy import load_file
    texts = [t for t in open(os.path.join(fix, "texts.txt"), encoding="utf-8").read().split("\n") if t]
    work = scratch.mkdtemp(prefix="qac-fam-")
    for name in names:
        ref = load_file(os.path.join(fix, name + ".ref.safetensors"))["emb32"]
        family(name, os.path.join(fix, name), texts, ref, work)
    finish()


if __name__ == "__main__":
    main()
