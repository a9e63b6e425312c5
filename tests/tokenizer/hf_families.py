"""Tokenizer directories of each encoder family, made here and saved as the
real models ship them, and the reference ids Hugging Face gives for them.

No weights or tokenizers of these families can be downloaded, so each
directory is built from tokenizers trained on the test collections
(Cranfield, Debian package descriptions, the multilingual texts beside this
file) in seconds, then laid out like its model on the Hub:

  xlmr_e5      multilingual-e5-small: sentencepiece.bpe.model, a tokenizer.json
               in the older converter's layout (Precompiled + Replace, a
               legacy Metaspace), tokenizer_config.json of that era
  xlmr_json    the same without sentencepiece.bpe.model
  bge_m3       bge-m3: tokenizer_config.json with added_tokens_decoder, 8192
  minilm_ml    paraphrase-multilingual-MiniLM-L12-v2: a BERT config with the
               XLM-R tokenizer
  xlmr_saved   xlmr_e5 after AutoTokenizer(...).save_pretrained (today's files)
  roberta      roberta-base: vocab.json, merges.txt, tokenizer.json, no config
  roberta_vm   vocab.json + merges.txt only
  modernbert   ModernBERT-base / gte-modernbert-base: tokenizer.json (NFC,
               byte-level BPE, OLMo's space-run added tokens, [MASK] lstrip),
               PreTrainedTokenizerFast, 8192
  bert_json    the default model's WordPiece as tokenizer.json only
  t5_unigram   a plain Unigram tokenizer.json with SentencePiece's Precompiled
               charsmap, read as written (TEI's path)
  sink_*       tokenizer.json files that use the other normalizers,
               pre-tokenizers, post-processors and models

The reference is transformers' AutoTokenizer for the directory (fast; the
only kind transformers 5 has for these families); the byte offsets come
from its backend, as TEI's /tokenize reports them.

As a module: make(name, out_dir) builds one family's tokenizer files (other
tests use it for their checkpoints). As a script:

  hf_families.py WORK [CHECK_BIN]

builds every family under WORK, writes WORK/texts.hex and WORK/expected.txt,
and runs CHECK_BIN WORK (test_tokenizer_families.c) when given.

expected.txt records (a hash is nhash() over the numbers; ids are written
out when a list is short):
  D name dir                   load this directory
  F t n hash [ids]             tokenize text t, no special tokens
  O t n hash                   the byte offsets of those tokens (a b a b ...)
  E t L n hash [ids]           encode with specials, truncated to L
  P a b L n hash thash [ids]   pair (a, b) truncated to L; thash: type ids
  Q a b L s d n hash thash [ids]  the same with truncation strategy s
                               (0 longest_first, 1 only_second, 2 only_first)
                               from side d (0 right, 1 left); n -1: HF refuses
  X t skip hex                 decode of F's ids (skip_special 0/1)
"""
import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import testdata  # noqa: E402

IDS_MAX = 64
SPM_VOCAB = 3000
BPE_VOCAB = 2500
_corpus = None


def multilingual_texts():
    out = []
    for line in open(os.path.join(HERE, "multilingual.jsonl"), encoding="utf-8"):
        line = line.rstrip("\n")
        if line and not line.startswith("#"):
            out.append(json.loads(line))
    return out


def cranfield_texts():
    """Documents (title, text) and queries, as the tokenizer fixtures parse them."""
    cran = testdata.path("cranfield")
    docs = []
    raw = open(os.path.join(cran, "cran.all.1400"), encoding="utf-8").read()
    for rec in raw.split(".I ")[1:]:
        fields, cur = {}, None
        for line in rec.split("\n")[1:]:
            if line[:2] in (".T", ".A", ".B", ".W"):
                cur = line[:2]
                fields[cur] = []
            elif cur:
                fields[cur].append(line)
        docs.append((" ".join(fields.get(".T", [])).strip() + "\n" + " ".join(fields.get(".W", [])).strip()).strip())
    queries = [q.split("\n", 1)[1].replace("\n", " ").strip() if "\n" in q else q
               for q in open(os.path.join(cran, "cran.qry"), encoding="utf-8").read().split(".W")[1:]]
    queries = [q.split(".I")[0].strip() for q in queries]
    return docs, queries


def debian_texts(n):
    out = []
    with gzip.open(testdata.path("debian-packages", "packages.jsonl.gz"), "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            d = json.loads(line)
            out.append(d["title"] + "\n" + d["text"])
    return out


def corpus():
    """Training lines (about 0.6 MB, so that training takes seconds): half the
    Cranfield documents, the queries, 800 Debian descriptions, and the
    multilingual texts thrice, so that their scripts and emoji get pieces of
    their own (a few characters stay unknown: coverage is below 1)."""
    global _corpus
    if _corpus is None:
        docs, queries = cranfield_texts()
        lines = [t.replace("\n", " ") for t in docs[::2] + queries + debian_texts(800)]
        lines += [t.replace("\n", " ") for t in multilingual_texts()] * 3
        _corpus = lines
    return _corpus


# ---------- SentencePiece (XLM-R) ----------

_spm_model = None


def spm_model():
    """A unigram SentencePiece model trained here (nmt_nfkc, as XLM-R's)."""
    global _spm_model
    if _spm_model is None:
        import sentencepiece as spm
        import tempfile
        d = tempfile.mkdtemp(prefix="qac-spm-")
        spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus()), model_prefix=os.path.join(d, "m"),
                                       vocab_size=SPM_VOCAB, model_type="unigram", character_coverage=0.9995,
                                       num_threads=2, minloglevel=2)
        _spm_model = open(os.path.join(d, "m.model"), "rb").read()
        shutil.rmtree(d)
    return _spm_model


def _spm_proto():
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    m.ParseFromString(spm_model())
    return m


def _xlmr_tokenizer_json(new_metaspace):
    """XLM-R's tokenizer.json as the older converter wrote it: fairseq ids,
    Precompiled + Replace(" {2,}"), Metaspace, <s> A </s> templates."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    m = _spm_proto()
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(p.piece, p.score) for p in m.pieces[3:]] + [("<mask>", 0.0)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(m.normalizer_spec.precompiled_charsmap),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<s>", "<pad>", "</s>", "<unk>")])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    j = json.loads(tok.to_str())
    if not new_metaspace:  # the layout of files converted before prepend_scheme existed
        for part in ("pre_tokenizer", "decoder"):
            j[part] = {"type": "Metaspace", "replacement": "▁", "str_rep": "▁", "add_prefix_space": True}
    return j


XLMR_SPECIALS = {"bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
                 "sep_token": "</s>", "unk_token": "<unk>"}


def _mask_legacy():
    return {"__type": "AddedToken", "content": "<mask>", "lstrip": True, "normalized": True, "rstrip": False,
            "single_word": False}


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)


def _config(out, model_type, vocab_size, **extra):
    arch = {"xlm-roberta": "XLMRobertaModel", "roberta": "RobertaModel", "bert": "BertModel",
            "modernbert": "ModernBertModel"}[model_type]
    cfg = {"architectures": [arch], "model_type": model_type, "vocab_size": vocab_size}
    cfg.update(extra)
    _write_json(os.path.join(out, "config.json"), cfg)


def make_xlmr(out, layout="e5"):
    """layout: e5 (multilingual-e5), json (no .model), bge_m3, minilm_ml."""
    os.makedirs(out, exist_ok=True)
    j = _xlmr_tokenizer_json(new_metaspace=layout == "bge_m3")
    _write_json(os.path.join(out, "tokenizer.json"), j)
    if layout != "json":
        with open(os.path.join(out, "sentencepiece.bpe.model"), "wb") as f:
            f.write(spm_model())
    n = len(j["model"]["vocab"])
    smap = dict(XLMR_SPECIALS, mask_token={k: v for k, v in _mask_legacy().items() if k != "__type"})
    _write_json(os.path.join(out, "special_tokens_map.json"), smap)
    if layout == "bge_m3":
        dec = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"])}
        dec[str(n - 1)] = {"content": "<mask>", "lstrip": True, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True}
        tc = dict(XLMR_SPECIALS, added_tokens_decoder=dec, mask_token="<mask>", model_max_length=8192,
                  clean_up_tokenization_spaces=True, sp_model_kwargs={}, tokenizer_class="XLMRobertaTokenizer")
        _config(out, "xlm-roberta", n, max_position_embeddings=8194, pad_token_id=1)
    else:
        tc = dict(XLMR_SPECIALS, mask_token=_mask_legacy(), model_max_length=512, sp_model_kwargs={},
                  tokenizer_class="XLMRobertaTokenizer")
        if layout == "minilm_ml":
            tc["do_lower_case"] = False
            _config(out, "bert", n, max_position_embeddings=512, pad_token_id=0)
        else:
            _config(out, "xlm-roberta", n, max_position_embeddings=514, pad_token_id=1)
    _write_json(os.path.join(out, "tokenizer_config.json"), tc)
    return out


def make_xlmr_saved(out):
    """An XLM-R tokenizer after transformers' save_pretrained (today's layout)."""
    from transformers import AutoTokenizer
    src = out + ".src"
    make_xlmr(src, "e5")
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    shutil.copy(os.path.join(src, "config.json"), out)
    shutil.rmtree(src)
    return out


# ---------- byte-level BPE (RoBERTa, ModernBERT) ----------

_bpe_cache = {}


def _train_bpe(normalizer, specials):
    """Byte-level BPE trained here (one training per configuration, reused)."""
    from tokenizers import Tokenizer
    key = (repr(normalizer), tuple(specials))
    if key not in _bpe_cache:
        _bpe_cache[key] = _train_bpe_new(normalizer, specials).to_str()
    return Tokenizer.from_str(_bpe_cache[key])


def _train_bpe_new(normalizer, specials):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=BPE_VOCAB, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), tr)
    return tok


def make_roberta(out, with_json=True):
    from tokenizers import AddedToken, processors
    os.makedirs(out, exist_ok=True)
    tok = _train_bpe(None, ["<s>", "<pad>", "</s>", "<unk>"])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    tok.model.save(out)
    if with_json:
        j = json.loads(tok.to_str())
        for a in j["added_tokens"]:  # roberta-base's file: the four first specials are normalized
            if a["content"] != "<mask>":
                a["normalized"] = True
        _write_json(os.path.join(out, "tokenizer.json"), j)
    _config(out, "roberta", tok.get_vocab_size(), max_position_embeddings=514, pad_token_id=1)
    return out


def make_modernbert(out):
    from tokenizers import AddedToken, normalizers, processors
    os.makedirs(out, exist_ok=True)
    tok = _train_bpe(normalizers.NFC(), ["|||IP_ADDRESS|||", "<|padding|>"])
    tok.add_tokens([AddedToken(" " * k, normalized=True, special=False) for k in range(24, 1, -1)])
    tok.add_tokens([AddedToken(t, normalized=True, special=False) for t in ("|||EMAIL_ADDRESS|||", "|||PHONE_NUMBER|||")])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t in ("<|endoftext|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]")])
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    tok.add_tokens([AddedToken("[unused%d]" % i, normalized=True, special=False) for i in range(8)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.save(os.path.join(out, "tokenizer.json"))
    j = json.loads(tok.to_str())
    dec = {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
           for a in j["added_tokens"]}
    specials = {"cls_token": "[CLS]", "mask_token": "[MASK]", "pad_token": "[PAD]", "sep_token": "[SEP]",
                "unk_token": "[UNK]"}
    _write_json(os.path.join(out, "tokenizer_config.json"),
                dict(specials, added_tokens_decoder=dec, clean_up_tokenization_spaces=True,
                     model_input_names=["input_ids", "attention_mask"], model_max_length=8192,
                     tokenizer_class="PreTrainedTokenizerFast"))
    _write_json(os.path.join(out, "special_tokens_map.json"),
                {k: {"content": v, "lstrip": v == "[MASK]", "normalized": False, "rstrip": False,
                     "single_word": False} for k, v in specials.items()})
    _config(out, "modernbert", tok.get_vocab_size(), max_position_embeddings=8192, pad_token_id=cls + 2,
            cls_token_id=cls, sep_token_id=sep, bos_token_id=cls, eos_token_id=sep)
    return out


def make_bert_json(out, model_dir):
    """The default model's WordPiece saved by transformers, tokenizer.json only."""
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    for f in ("vocab.txt",):
        if os.path.exists(os.path.join(out, f)):
            os.remove(os.path.join(out, f))
    shutil.copy(os.path.join(model_dir, "config.json"), out)
    return out


# ---------- tokenizer.json files read as written ----------

def _save_fast(out, tok, model_max_length=512, **specials):
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    _write_json(os.path.join(out, "tokenizer_config.json"),
                dict(specials, tokenizer_class="PreTrainedTokenizerFast", model_max_length=model_max_length))
    return out


def make_t5_unigram(out):
    """A Unigram tokenizer.json with Precompiled (T5-style), as tokenizers runs it."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    m = _spm_proto()
    vocab = [(p.piece, p.score) for p in m.pieces] + [("</s>", 0.0), ("<pad>", 0.0)]
    vocab[1] = ("<s>", 0.0)
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(m.normalizer_spec.precompiled_charsmap),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    eos = len(vocab) - 2
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "</s>", "<pad>")])
    return _save_fast(out, tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>")


def _train(tok, trainer):
    tok.train_from_iterator(corpus(), trainer)
    return tok


def make_sink(out, which):
    """tokenizer.json files for the parts the families do not use."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, \
        trainers
    N, P = normalizers, pre_tokenizers
    if which == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=40))
        tok.normalizer = N.Sequence([N.NFD(), N.StripAccents(), N.Lowercase(), N.Strip(left=True, right=True),
                                     N.Replace("``", '"'), N.Replace(Regex(r"\s+"), " ")])
        tok.pre_tokenizer = P.Sequence([P.WhitespaceSplit(), P.Punctuation("isolated"), P.Digits(individual_digits=True)])
        tok.decoder = decoders.WordPiece()
        _train(tok, trainers.WordPieceTrainer(vocab_size=3000, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]",
                                                                                "[MASK]"], show_progress=False))
        tok.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
        tok.add_tokens([AddedToken("qacword", single_word=True), AddedToken("flowx", rstrip=True)])
        return _save_fast(out, tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                          mask_token="[MASK]")
    if which == "charbpe":
        tok = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True, continuing_subword_prefix="##",
                                   end_of_word_suffix="</w>"))
        tok.normalizer = N.Sequence([N.NFKC(), N.Lowercase(), N.Replace("''", '"'), N.Prepend("_")])
        tok.pre_tokenizer = P.Sequence([P.Whitespace(), P.Digits(individual_digits=False)])
        tok.decoder = decoders.BPEDecoder(suffix="</w>")
        _train(tok, trainers.BpeTrainer(vocab_size=2500, special_tokens=["[UNK]", "<s>", "</s>"],
                                        continuing_subword_prefix="##", end_of_word_suffix="</w>",
                                        show_progress=False, limit_alphabet=300))
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 1), trim_offsets=False)
        return _save_fast(out, tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>")
    if which == "llama3":
        pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.normalizer = N.NFKC()
        tok.pre_tokenizer = P.Sequence([P.Split(Regex(pat), behavior="isolated", invert=False),
                                        P.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        _train(tok, trainers.BpeTrainer(vocab_size=2500, special_tokens=["<|begin|>", "<|end|>"], show_progress=False,
                                        initial_alphabet=P.ByteLevel.alphabet()))
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=True, add_prefix_space=False),
            processors.TemplateProcessing(single="<|begin|> $A", pair="<|begin|> $A <|begin|>:1 $B:1",
                                          special_tokens=[("<|begin|>", 0)])])
        return _save_fast(out, tok, model_max_length=8192, bos_token="<|begin|>", eos_token="<|end|>")
    if which == "wordlevel":
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tok.normalizer = N.Sequence([N.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True,
                                                      lowercase=False), N.NFKD()])
        tok.pre_tokenizer = P.Sequence([P.CharDelimiterSplit(" "), P.Split("-", behavior="merged_with_previous"),
                                        P.Punctuation("merged_with_next"),
                                        P.Metaspace(replacement="_", prepend_scheme="first", split=False)])
        _train(tok, trainers.WordLevelTrainer(vocab_size=4000, special_tokens=["[UNK]", "[A]", "[B]"],
                                              show_progress=False))
        tok.post_processor = processors.TemplateProcessing(
            single="[A] [B] $A [B]", pair="[A] $A [B]:1 $B:1", special_tokens=[("[A]", 1), ("[B]", 2)])
        return _save_fast(out, tok, unk_token="[UNK]")
    if which == "bertish":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = N.Sequence([N.Nmt(), N.NFKC(), N.BertNormalizer(lowercase=True)])
        tok.pre_tokenizer = P.Sequence([P.Whitespace(), P.Split(Regex(r"\d"), behavior="removed", invert=True),
                                        P.BertPreTokenizer()])
        tok.decoder = decoders.WordPiece(cleanup=False)
        _train(tok, trainers.WordPieceTrainer(vocab_size=3000, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                              show_progress=False))
        tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                           special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
        return _save_fast(out, tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")
    raise ValueError(which)


SINKS = ("wordpiece", "charbpe", "llama3", "wordlevel", "bertish")


def make(name, out, model_dir=None):
    """Build family `name` (see the module docstring) into out."""
    if name in ("xlmr_e5", "xlmr_json", "bge_m3", "minilm_ml"):
        return make_xlmr(out, {"xlmr_e5": "e5", "xlmr_json": "json", "bge_m3": "bge_m3",
                               "minilm_ml": "minilm_ml"}[name])
    if name == "xlmr_saved":
        return make_xlmr_saved(out)
    if name == "roberta":
        return make_roberta(out, True)
    if name == "roberta_vm":
        return make_roberta(out, False)
    if name == "modernbert":
        return make_modernbert(out)
    if name == "bert_json":
        return make_bert_json(out, model_dir)
    if name == "t5_unigram":
        return make_t5_unigram(out)
    if name.startswith("sink_"):
        return make_sink(out, name[5:])
    raise ValueError(name)


MAIN = ("xlmr_e5", "bge_m3", "roberta", "modernbert", "t5_unigram")
FAMILIES = ["xlmr_e5", "xlmr_json", "bge_m3", "minilm_ml", "xlmr_saved", "roberta", "roberta_vm", "modernbert",
            "bert_json", "t5_unigram"] + ["sink_" + s for s in SINKS]


# ---------- the reference ----------

_K = None


def nhash(nums):
    """sum over i of (x_i + 1) * K_i mod 2^64, K_i = splitmix64(i): order-
    sensitive, and cheap in numpy (test_tokenizer_families.c computes it too)."""
    import numpy as np
    global _K
    n = len(nums)
    if _K is None or len(_K) < n:
        m = max(n, 1 << 16, 2 * (0 if _K is None else len(_K)))
        z = (np.arange(m, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        _K = z ^ (z >> np.uint64(31))
    if n == 0:
        return 0
    x = np.asarray(nums, dtype=np.int64).astype(np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(x * _K[:n], dtype=np.uint64))


def _ids(ids):
    return " " + " ".join(map(str, ids)) if len(ids) <= IDS_MAX else ""


def all_texts():
    """Raw byte strings: Cranfield documents and queries, Debian descriptions,
    the multilingual lines, the WordPiece fixtures' edge cases (invalid UTF-8
    included), two texts past 8192 tokens, and edge strings made here."""
    docs, queries = cranfield_texts()
    ml = multilingual_texts()
    texts = [t.encode() for t in docs + queries + debian_texts(600) + ml]
    edge = os.path.join(HERE, "..", "reference", "tokenizer", "edge_texts.hex")
    texts += [bytes.fromhex(h) for h in open(edge).read().split("\n") if h]
    texts.append(" ".join(docs[:120]).encode())                      # > 8192 tokens
    texts.append("  ".join(ml * 6).encode())
    made = ["", " ", "a", "<s>", "</s>", "<mask>", "[CLS]", "[MASK]", " [MASK]", "x [MASK] y", "  <mask>  ",
            "qacword", "a qacword b", "aqacword", "flowx   next", "_hello", "it''s", "``quoted''",
            "ﬁ ﬂ Ⅻ ①", "e\u0301 n\u0303 a\u0308", "\u1100\u1161\u11a8", "tab\tend\t", "trailing  ", "  leading",
            "1234567890 12 3", "|||IP_ADDRESS||| and |||EMAIL_ADDRESS|||", "<|endoftext|>", "[unused3] [unused7]"]
    texts += [t.encode() for t in made]
    return texts


def _byte_starts(s):
    """Byte offset of every character boundary of s."""
    at, k = [0], 0
    for ch in s:
        k += len(ch.encode())
        at.append(k)
    return at


def reference(fam_dir, name, texts, strs, starts, out, subset):
    """Records for one directory (its texts: `subset` indices, or all when
    None); AutoTokenizer is the reference."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(fam_dir)
    back = tok.backend_tokenizer
    back.no_truncation()  # a tokenizer.json may carry a truncation: F and O are the whole text
    back.no_padding()
    limit = tok.model_max_length if tok.model_max_length < 100000 else 512
    w = out.write
    w("D %s %s\n" % (name, fam_dir))
    idx = list(range(len(strs))) if subset is None else subset
    mine = [strs[i] for i in idx]
    plain = dict(zip(idx, back.encode_batch(mine, add_special_tokens=False)))
    for i in idx:
        e = plain[i]
        ids = e.ids
        w("F %d %d %d%s\n" % (i, len(ids), nhash(ids), _ids(ids)))
        if i in starts:  # byte offsets (tokenizers gives characters)
            at = starts[i]
            w("O %d %d %d\n" % (i, len(ids), nhash([at[x] for ab in e.offsets for x in ab])))
    for L in (limit, 24):
        enc = tok(mine, truncation=True, max_length=L)["input_ids"]
        for i, ids in zip(idx, enc):
            w("E %d %d %d %d%s\n" % (i, L, len(ids), nhash(ids), _ids(ids)))
    docs = len(cranfield_texts()[0])
    long = [i for i, t in enumerate(texts) if len(t) > 50000]  # the two texts past 8192 tokens
    pairs = [(docs + q, (q * 7) % docs) for q in range(0, 225, 3)]
    pairs += [((q * 11) % docs, docs + q) for q in range(1, 225, 9)]  # the first longer: longest_first swaps
    for L in (limit, 40):
        # a text past the limit pairs at the limit only: tokenizers keeps every overflowing window of a pair
        pl = pairs + [(long[0], 0), (5, long[1])] if L == limit else pairs
        enc = tok([strs[p] for p, _ in pl], [strs[q] for _, q in pl], truncation=True, max_length=L,
                  return_token_type_ids=True)
        for (p, q), ids, ty in zip(pl, enc["input_ids"], enc["token_type_ids"]):
            w("P %d %d %d %d %d %d%s\n" % (p, q, L, len(ids), nhash(ids), nhash(ty), _ids(ids)))
    # the cross-encoder's strategies and sides, one pair a call (a pair the
    # strategy cannot fit fails alone); an empty second text keeps its pair
    empty = strs.index("")
    qpairs = pairs[::4] + [(docs + 1, empty), (empty, 3)]
    strategies = ("longest_first", "only_second", "only_first")
    for s, strategy in enumerate(strategies):
        for d, side in enumerate(("right", "left")):
            tok.truncation_side = side
            for p, q in qpairs:
                try:
                    enc = tok([strs[p]], [strs[q]], truncation=strategy, max_length=40, return_token_type_ids=True)
                except Exception:  # tokenizers: "sequence to truncate too short"
                    w("Q %d %d 40 %d %d -1 0 0\n" % (p, q, s, d))
                    continue
                ids, ty = enc["input_ids"][0], enc["token_type_ids"][0]
                w("Q %d %d 40 %d %d %d %d %d%s\n" % (p, q, s, d, len(ids), nhash(ids), nhash(ty), _ids(ids)))
    tok.truncation_side = "right"
    for i in list(range(docs + 225 + 600, docs + 225 + 600 + 60)) + list(range(0, 40)):
        if i not in plain:
            continue
        for skip in (0, 1):
            d = back.decode(plain[i].ids, skip_special_tokens=bool(skip))
            w("X %d %d %s\n" % (i, skip, d.encode().hex()))


def build_all(work, model_dir):
    t0 = time.time()
    dirs = {}
    for name in FAMILIES:
        dirs[name] = make(name, os.path.join(work, name), model_dir)
    t1 = time.time()
    texts = all_texts()
    with open(os.path.join(work, "texts.hex"), "w") as f:
        for t in texts:
            f.write(t.hex() + "\n")
    strs = [t.decode("utf-8", errors="replace") for t in texts]
    docs = len(cranfield_texts()[0])
    # offsets: every text but most Cranfield documents (valid UTF-8 only)
    starts = {i: _byte_starts(s) for i, s in enumerate(strs)
              if texts[i] == s.encode() and (i < 100 or i >= docs)}
    # the main families see every text; their variants and the other
    # tokenizer.json files the multilingual and edge texts and a sample
    subset = sorted(set(range(0, docs, 10)) | set(range(docs, len(texts))) - set(range(docs + 225, docs + 825)))
    with open(os.path.join(work, "expected.txt"), "w") as out:
        for name in FAMILIES:
            reference(dirs[name], name, texts, strs, starts, out, None if name in MAIN else subset)
    print("built %d tokenizer directories in %.1f s; %d texts, references in %.1f s"
          % (len(FAMILIES), t1 - t0, len(texts), time.time() - t1), flush=True)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    work = sys.argv[1]
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    model_dir = os.environ.get("QAC_TEST_MODEL")
    if not model_dir:
        qac = os.environ.get("QAC_BIN", "qac")
        model_dir = json.loads(subprocess.run([qac, "info", "--json"], capture_output=True, text=True,
                                              check=True).stdout)["dir"]
    build_all(work, model_dir)
    if len(sys.argv) > 2:
        r = subprocess.run([sys.argv[2], work])
        sys.exit(r.returncode)


if __name__ == "__main__":
    main()
