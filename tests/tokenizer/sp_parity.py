"""SentencePiece parity: train small unigram and BPE models on Cranfield with
the Python `sentencepiece` package, then compare its ids with `qac tokenize`
on every Cranfield document and query plus the generated edge cases
(invalid UTF-8 included; Python sees errors="replace").

Debian's libsentencepiece (0.1.x) and the PyPI package (0.2.x) break exact
Viterbi ties of the unigram model differently. A difference is accepted only
when it is such a tie: the same pieces' text and the same total score; it is
printed and counted, and every other difference fails the test."""
import os
import subprocess
import sys
import tempfile

import sentencepiece as spm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testdata  # noqa: E402

qac = os.environ["QAC_BIN"]
cran = testdata.path("cranfield")
fixtures = os.path.join(os.environ["QAC_SOURCE_DIR"], "tests", "reference", "tokenizer")

raw = open(os.path.join(cran, "cran.all.1400"), "rb").read() + open(os.path.join(cran, "cran.qry"), "rb").read()
texts = [b for b in raw.split(b"\n.I ") if b]  # one text per SMART record, fields included
texts += [bytes.fromhex(h) for h in open(os.path.join(fixtures, "edge_texts.hex")).read().split("\n") if h]
# `qac tokenize --input` reads one text per line
texts = [b.replace(b"\n", b" ") for b in texts]

failures = 0
with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "wb") as f:
        f.write(raw)
    inp = os.path.join(tmp, "texts.txt")
    with open(inp, "wb") as f:
        f.write(b"\n".join(texts) + b"\n")
    for model_type, fname in (("unigram", "spiece.model"), ("bpe", "sentencepiece.bpe.model")):
        d = os.path.join(tmp, model_type)
        os.makedirs(d)
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, "m"), vocab_size=2000,
                                       model_type=model_type, character_coverage=1.0, num_threads=1,
                                       minloglevel=2)
        os.rename(os.path.join(d, "m.model"), os.path.join(d, fname))
        sp = spm.SentencePieceProcessor(model_file=os.path.join(d, fname))
        want = [sp.encode(b.decode("utf-8", errors="replace")) for b in texts]
        out = subprocess.run([qac, "tokenize", "--model", d, "--no-special-tokens", "--input", inp], capture_output=True,
                             check=True)
        got = [[int(x) for x in line.split()] for line in out.stdout.decode().split("\n")[:-1]]
        diff = [i for i in range(len(texts)) if i >= len(got) or got[i] != want[i]]

        def tie(i):
            a, b = want[i], got[i]
            return (model_type == "unigram" and sp.decode(a) == sp.decode(b)
                    and abs(sum(map(sp.get_score, a)) - sum(map(sp.get_score, b))) < 1e-4)

        ties = [i for i in diff if i < len(got) and tie(i)]
        bad = [i for i in diff if i not in ties]
        for i in ties:
            k = next(k for k in range(len(want[i])) if want[i][k] != got[i][k])
            print("  text %d: equal-score unigram tie: sentencepiece %s, qac %s"
                  % (i, sp.id_to_piece(want[i][k:k + 3]), sp.id_to_piece(got[i][k:k + 3])))
        print("%s (%s): %d texts compared with the sentencepiece package, %d identical, %d ties, %d mismatches"
              % (model_type, fname, len(texts), len(texts) - len(diff), len(ties),
                 len(bad) + abs(len(got) - len(want))))
        for i in bad[:5]:
            print("  text %d %r\n    sentencepiece %s\n    qac           %s"
                  % (i, texts[i][:100], want[i][:30], got[i][:30] if i < len(got) else None))
        failures += len(bad) + abs(len(got) - len(want))
        # specials: <s> text </s> truncated to 16
        out = subprocess.run([qac, "tokenize", "--model", d, "--max-len", "16", texts[0].decode()],
                             capture_output=True, check=True)
        exp = [sp.bos_id()] + want[0][:14] + [sp.eos_id()]
        got16 = [int(x) for x in out.stdout.split()]
        print("%s: encode max_len 16: qac %s, expected %s" % (model_type, got16, exp))
        failures += got16 != exp
print("FAILED" if failures else "passed")
sys.exit(1 if failures else 0)
