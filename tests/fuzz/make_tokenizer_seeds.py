"""Write the tokenizer.json seeds of fuzz_tokenizer_json (corpus_tokenizer/):
tiny tokenizers trained on a few sentences with the `tokenizers` library,
covering each model kind and the normalizers, pre-tokenizers and
post-processors qac reads, one with a small SentencePiece charsmap (from a
custom normalization rule table). Run once; the seeds are committed.

    python3 tests/fuzz/make_tokenizer_seeds.py
"""
import json
import os
import tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, \
    trainers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_tokenizer")
TEXT = ["The quick brown fox jumps over the lazy dog.", "Überschall-Strömung: 2,5 Mach!", "naïve café, ﬁne Ⅻ",
        "Съешь ещё этих булок", "超音速流 衝撃波", "e\u0301 a\u0308 ''quoted'' 1234", "emoji 👍🏽 👨‍👩‍👧"] * 4


def save(name, tok):
    j = json.loads(tok.to_str())
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))


def tiny_charsmap():
    d = tempfile.mkdtemp()
    rules = os.path.join(d, "rules.tsv")
    with open(rules, "w") as f:  # source code points -> target, in hex
        for src, dst in (("41", "61"), ("FF21", "61"), ("2122", "54 4D"), ("65 301", "E9"), ("9", "20"), ("1E", "")):
            f.write(src + "\t" + dst + "\n")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT), model_prefix=os.path.join(d, "m"), vocab_size=120,
                                   model_type="unigram", normalization_rule_tsv=rules, minloglevel=2,
                                   hard_vocab_limit=False)
    m = pb.ModelProto()
    m.ParseFromString(open(os.path.join(d, "m.model"), "rb").read())
    return m


def main():
    os.makedirs(OUT, exist_ok=True)
    # byte-level BPE, RoBERTa post-processor, an lstrip added token
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                    show_progress=False))
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    t.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    save("bpe_bytelevel.json", t)
    # Unigram with a Precompiled charsmap, Replace, Metaspace
    m = tiny_charsmap()
    t = Tokenizer(models.Unigram([(p.piece, p.score) for p in m.pieces], unk_id=0))
    t.normalizer = normalizers.Sequence([normalizers.Precompiled(m.normalizer_spec.precompiled_charsmap),
                                         normalizers.Replace(Regex(" {2,}"), " ")])
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    save("unigram_precompiled.json", t)
    # WordPiece, BertNormalizer, BertPreTokenizer, template
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer()
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece()
    t.train_from_iterator(TEXT, trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                                          show_progress=False))
    t.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                     special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    save("wordpiece_bert.json", t)
    # WordLevel with the other normalizers and pre-tokenizers
    t = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(),
                                         normalizers.StripAccents(), normalizers.Prepend("_"), normalizers.Nmt()])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t)|\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"), "isolated"),
        pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.Punctuation("merged_with_next"),
        pre_tokenizers.WhitespaceSplit()])
    t.train_from_iterator(TEXT, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[A]"], show_progress=False))
    t.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=True),
                                            processors.TemplateProcessing(single="[A] $A", pair="[A] $A $B:1",
                                                                          special_tokens=[("[A]", 1)])])
    t.add_tokens([AddedToken("brown", single_word=True), AddedToken("fox", rstrip=True)])
    save("wordlevel_mixed.json", t)
    print("seeds written to", OUT)


if __name__ == "__main__":
    main()
