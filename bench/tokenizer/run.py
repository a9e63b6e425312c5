"""Tokenizer throughput: qac's tokenizers against Hugging Face's fast
tokenizer (the Rust `tokenizers` behind transformers' AutoTokenizer), one
thread each, on the same texts in the same run, rounds alternating, the
best round of each kept (CPU seconds of tokenization; loading excluded).

Tokenizers: the default model's WordPiece (vocab.txt), and the families of
tests/tokenizer/hf_families.py built here (XLM-R from sentencepiece.bpe.model
and from tokenizer.json, RoBERTa and ModernBERT byte-level BPE, BERT's
tokenizer.json WordPiece, a T5-style Unigram). Texts: Cranfield documents,
Debian descriptions and the multilingual lines.

  .venv/bin/python3 bench/tokenizer/run.py [BUILD_DIR]
Environment: ROUNDS (3), QAC_SHARED_DATA, QAC_MODEL (the default model).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # tokenizers' batch encode on one thread, as qac here
os.environ["TOKENIZERS_PARALLELISM"] = "false"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))
import hf_families  # noqa: E402


def hf_round(tok, texts):
    back = tok.backend_tokenizer
    back.no_truncation()
    back.no_padding()
    c0 = time.process_time()
    enc = back.encode_batch(texts, add_special_tokens=False)
    c = time.process_time() - c0
    return sum(len(e.ids) for e in enc), c


def main():
    work = tempfile.mkdtemp(prefix="qac-bench-tok-")
    try:
        run(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work):
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    bench = os.path.join(build, "bench", "tokenizer", "qac_bench_tokenize")
    if not os.access(bench, os.X_OK):
        sys.exit("build first: ninja -C %s qac_bench_tokenize" % build)
    rounds = int(os.environ.get("ROUNDS", "3"))
    model = os.environ.get("QAC_MODEL") or os.path.expanduser("~/.local/share/qac/models/all-MiniLM-L6-v2")
    from transformers import AutoTokenizer
    docs, queries = hf_families.cranfield_texts()
    texts = docs + hf_families.debian_texts(3000) + hf_families.multilingual_texts() * 4
    path = os.path.join(work, "texts.hex")
    with open(path, "w") as f:
        for t in texts:
            f.write(t.encode().hex() + "\n")
    dirs = [("minilm (vocab.txt)", model)]
    for name in ("bert_json", "xlmr_e5", "xlmr_json", "roberta", "modernbert", "t5_unigram"):
        dirs.append((name, hf_families.make(name, os.path.join(work, name), model)))
    cpu = subprocess.run(["grep", "-m1", "model name", "/proc/cpuinfo"], capture_output=True, text=True).stdout
    print("machine: %s, %d cores; %d texts (%.1f MB), one thread each, best of %d rounds"
          % (cpu.split(":")[1].strip(), os.cpu_count(), len(texts), sum(map(len, texts)) / 1e6, rounds))
    print("%-20s %-55s %10s %12s %12s %7s" % ("tokenizer", "qac reads", "tokens", "qac_tok/s", "hf_tok/s", "ratio"))
    for name, d in dirs:
        tok = AutoTokenizer.from_pretrained(d)
        best_q = best_h = None
        for _ in range(rounds):
            out = subprocess.run([bench, d, path, "1"], capture_output=True, text=True, check=True).stdout
            f = dict(kv.split("=", 1) for kv in out.split(" describe=")[0].split())
            desc = out.split("describe=")[1].strip().strip('"')
            q = (int(f["tokens"]), float(f["cpu_s"]))
            h = hf_round(tok, texts)
            best_q = q if best_q is None or q[1] < best_q[1] else best_q
            best_h = h if best_h is None or h[1] < best_h[1] else best_h
        if best_q[0] != best_h[0]:
            print("  %s: token counts differ (qac %d, hf %d)" % (name, best_q[0], best_h[0]))
        qs, hs = best_q[0] / best_q[1], best_h[0] / best_h[1]
        print("%-20s %-55s %10d %12.0f %12.0f %7.2f" % (name, desc[:55], best_q[0], qs, hs, qs / hs), flush=True)


if __name__ == "__main__":
    main()
