"""TEI's /tokenize and /decode through `qac serve` with a tokenizer of the
new kinds: a small BERT (random weights, saved by transformers) with the
XLM-R tokenizer as paraphrase-multilingual-MiniLM ships it (BERT config,
sentencepiece.bpe.model + tokenizer.json, XLMRobertaTokenizer), built by
hf_families.py. /tokenize must give the ids, specials and byte offsets of
the `tokenizers` backend AutoTokenizer builds (TEI's form: the text of each
token is its bytes in the input; specials have null offsets), /decode its
decode, on multilingual and Cranfield texts. argv: [FIXTURE_DIR]: with it,
/tokenize on the family checkpoints there too (XLM-R, RoBERTa, ModernBERT:
each tokenizer's own template and offsets, and a ModernBERT tokenizer.json
without a post-processor, which adds no specials)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
sys.path.insert(0, HERE)
from srvlib import CRAN_QUERIES, Server, check, finish, http, workdir  # noqa: E402

import hf_families  # noqa: E402


def compare_tokenize(srv, back, inputs, tag):
    """/tokenize with and without the specials against tokenizers' encode
    (the tokenizer's own post-processor: its template and its offsets)."""
    for add in (True, False):
        s, _, body = http(srv.base, "POST", "/tokenize", {"inputs": inputs, "add_special_tokens": add})
        ok = s == 200 and isinstance(body, list) and len(body) == len(inputs)
        bad = 0
        for text, got in zip(inputs, body if ok else []):
            e = back.encode(text, add_special_tokens=add)
            b = text.encode()
            want = []
            for i, (tid, (a, z), sp) in enumerate(zip(e.ids, e.offsets, e.special_tokens_mask)):
                if sp and (a, z) == (0, 0):
                    want.append({"id": tid, "text": e.tokens[i], "special": True, "start": None, "stop": None})
                else:  # tokenizers' Python offsets are characters: TEI's are bytes
                    ba, bz = len(text[:a].encode()), len(text[:z].encode())
                    want.append({"id": tid, "text": b[ba:bz].decode("utf-8", "replace"), "special": False,
                                 "start": ba, "stop": bz})
            if got != want:
                bad += 1
                if bad <= 3:
                    print(f"{tag} /tokenize {text[:50]!r}:\n  got  {str(got)[:300]}\n  want {str(want)[:300]}")
        print(f"{tag} /tokenize (add_special_tokens={add}): {len(inputs) - bad} of {len(inputs)} texts equal "
              "tokenizers'")
        check(ok and bad == 0, f"{tag} /tokenize (add_special_tokens={add}): {bad} texts differ ({s})")


def families(fixture_dir, inputs):
    """The family checkpoints of tests/reference/gen_family_fixtures.py
    (XLM-R's <s> ... </s> with SentencePiece, RoBERTa's with byte-level BPE
    and its trimmed offsets, ModernBERT's [CLS] ... [SEP]): /tokenize against
    the tokenizer AutoTokenizer builds from each directory, as TEI's router
    tokenizes with it."""
    import json
    import shutil
    from transformers import AutoTokenizer
    # and ModernBERT's with its tokenizer.json's post-processor removed: the
    # tokenizer then adds nothing, though its vocabulary still names [CLS]
    # and [SEP] (the server once put those around every text regardless)
    bare = os.path.join(workdir("tei-families"), "modernbert_no_post")
    shutil.rmtree(bare, ignore_errors=True)
    shutil.copytree(os.path.join(fixture_dir, "modernbert"), bare)
    with open(os.path.join(bare, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tj["post_processor"] = None
    with open(os.path.join(bare, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    for name in ("xlmr", "roberta", "modernbert", bare):
        mdir = name if os.path.isabs(name) else os.path.join(fixture_dir, name)
        name = os.path.basename(name)
        back = AutoTokenizer.from_pretrained(mdir).backend_tokenizer
        back.no_truncation()
        srv = Server("--model", mdir, "--passage-max-len", "128")
        try:
            compare_tokenize(srv, back, inputs, name)
        finally:
            rc = srv.stop()
        check(rc == 0, f"{name}: exit code {rc}")


def main():
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel
    d = workdir("tei-xlmr")
    mdir = hf_families.make("minilm_ml", os.path.join(d, "model"))
    tok = AutoTokenizer.from_pretrained(mdir)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, pad_token_id=tok.pad_token_id)
    BertModel(cfg).save_pretrained(mdir, safe_serialization=True)
    back = tok.backend_tokenizer
    back.no_truncation()
    with open(CRAN_QUERIES, encoding="utf-8") as f:
        queries = [q.split(".I")[0].strip().replace("\n", " ") for q in f.read().split(".W")[1:]][:60]
    inputs = [t for t in hf_families.multilingual_texts() if t.strip()][:120] + queries + ["x <mask> y", "<s>hi</s>"]
    srv = Server("--model", mdir, "--passage-max-len", "128")
    try:
        compare_tokenize(srv, back, inputs, "bert_xlmr")
        ids = [back.encode(t).ids for t in inputs[:60]]
        for skip in (True, False):
            s, _, body = http(srv.base, "POST", "/decode", {"ids": ids, "skip_special_tokens": skip})
            want = [back.decode(x, skip_special_tokens=skip) for x in ids]
            diff = [(g, w) for g, w in zip(body, want) if g != w] if s == 200 else [s]
            print(f"/decode (skip_special_tokens={skip}): {len(want) - len(diff)} of {len(want)} equal tokenizers'")
            check(s == 200 and not diff, f"/decode (skip {skip}): {diff[:2]}")
        s, _, body = http(srv.base, "POST", "/embed", {"inputs": inputs[:3]})
        check(s == 200 and len(body) == 3 and len(body[0]) == 32, f"/embed: {s}")
    finally:
        rc = srv.stop()
    check(rc == 0, f"exit code {rc}")
    if len(sys.argv) > 1:
        families(sys.argv[1], inputs)
    finish()


if __name__ == "__main__":
    main()
