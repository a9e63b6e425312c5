"""TEI's /decode and /tokenize on a SentencePiece model: a small BERT
(random weights, saved by transformers) with a unigram SentencePiece model
trained on Cranfield by the `sentencepiece` package, served by `qac serve`.
/decode must equal sentencepiece's decode of the same ids (specials
skipped or kept), /tokenize must give sentencepiece's ids, the pieces as
text and null offsets (qac has no SentencePiece offsets), and /embed must
answer."""
import os
import sys

import sentencepiece as spm
import torch
from transformers import BertConfig, BertModel

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import CRAN_DOCS, CRAN_QUERIES, Server, check, finish, http, workdir  # noqa: E402


def main():
    d = workdir("tei-sp")
    raw = open(CRAN_DOCS, encoding="utf-8").read()
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(raw)
    mdir = os.path.join(d, "model")
    os.makedirs(mdir)
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, "m"), vocab_size=2000,
                                   model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2)
    os.rename(os.path.join(d, "m.model"), os.path.join(mdir, "spiece.model"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(mdir, "spiece.model"))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=sp.get_piece_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=128, pad_token_id=sp.pad_id() if sp.pad_id() >= 0 else 0)
    BertModel(cfg).save_pretrained(mdir, safe_serialization=True)

    with open(CRAN_QUERIES, encoding="utf-8") as f:
        texts = [q.strip() for q in f.read().split(".W")[1:]][:100]
    srv = Server("--model", mdir, "--passage-max-len", "128")
    try:
        ids = [sp.encode(t) for t in texts]
        specials = [sp.bos_id()] + ids[0] + [sp.eos_id()]
        for skip in (True, False):
            s, _, body = http(srv.base, "POST", "/decode", {"ids": ids + [specials], "skip_special_tokens": skip})
            want = [sp.decode(x) for x in ids] + [sp.decode(ids[0] if skip else specials)]
            diff = [(g, w) for g, w in zip(body, want) if g != w] if s == 200 else [s]
            print(f"/decode skip_special_tokens={skip}: {len(want) - len(diff)} of {len(want)} equal sentencepiece's")
            check(s == 200 and len(body) == len(want) and not diff, f"/decode (skip {skip}): {diff[:3]}")

        s, _, body = http(srv.base, "POST", "/tokenize", {"inputs": texts, "add_special_tokens": True})
        ok = s == 200 and len(body) == len(texts)
        for t, got in zip(texts, body if ok else []):
            want = [sp.bos_id()] + sp.encode(t) + [sp.eos_id()]
            ok &= [x["id"] for x in got] == want
            ok &= [x["text"] for x in got[1:-1]] == [sp.id_to_piece(i) for i in want[1:-1]]
            ok &= all(x["start"] is None and x["stop"] is None for x in got)
            ok &= [x["special"] for x in got] == [True] + [False] * (len(want) - 2) + [True]
        check(ok, f"/tokenize on SentencePiece: sentencepiece's ids, the pieces, null offsets ({s})")
        s, _, body = http(srv.base, "POST", "/embed", {"inputs": texts[:3]})
        check(s == 200 and len(body) == 3 and len(body[0]) == 64, f"/embed on the SentencePiece model: {s}")
    finally:
        rc = srv.stop()
    check(rc == 0, f"exit code {rc}")
    finish()


if __name__ == "__main__":
    main()
