"""Generate the WordPiece parity fixtures under tests/reference/tokenizer/.

Reference: Hugging Face BertTokenizerFast (Rust `tokenizers`). Texts are
every Cranfield document (title "\n" text) and query, plus generated Unicode
edge cases (edge_texts.hex, one hex-encoded byte string per line; invalid
UTF-8 included). HF sees bytes.decode("utf-8", errors="replace").

Writes:
  cased/vocab.txt, cased/tokenizer_config.json   a cased vocab trained here
  edge_texts.hex
  cranfield_texts.txt   "<index> <byte length> <fnv64>" so the C test can
                        check that it parsed the same Cranfield texts
  expected_<uncased|cased>.txt   records, "#" lines are comments:
     F i n hash [ids]          tokenize, no specials, no truncation
     E i L n hash [ids]        encode with [CLS]/[SEP], max_length L
     P a b L n first1 hash [ids]   pair, longest_first; first1 = index of
                               the first token type 1
  hash = FNV-1a 64 over the ids; ids are written when short.

Usage: gen_tokenizer_fixtures.py CRANFIELD_DIR MODEL_DIR
"""
import json
import os
import random
import sys

from transformers import BertTokenizerFast

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer")
IDS_MAX = 80  # write the ids themselves up to this many


def fnv64(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv64_bytes(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def smart_fields(path):
    """Records of a SMART file as dicts field -> lines joined with \\n."""
    recs, cur, field = [], None, None
    with open(path, "rb") as f:
        for raw in f.read().split(b"\n"):
            line = raw.decode("utf-8", errors="replace")
            if line.startswith(".I"):
                cur = {}
                recs.append(cur)
                field = None
            elif len(line) >= 2 and line[0] == "." and line[1] in "TABW" and line[2:].strip() == "":
                field = line[1]
                cur[field] = []
            elif cur is not None and field:
                cur[field].append(line)
    return [{k: "\n".join(v) for k, v in r.items()} for r in recs]


def edge_texts():
    t = [
        "", " ", "\t\n  \r\n", "Hello, World!", "Café naïve résumé Ångström façade", "İstanbul ıi İI",
        "Straße ß ẞ", "ΟΔΟΣ Σίσυφος ς", "中文字符测试，标点。", "日本語のテキスト、カタカナ", "한국어 텍스트",
        "👍🏽 😀 👨‍👩‍👧 🇫🇷 ❤️", "e\u0301 a\u0323\u0301 o\u0308\u0304 n\u0303", "zero\u200bwidth\u200cnon\u200djoiner",
        "\ufeffbom at start", "ctrl\x00nul\x01\x07bell\x1b[0m\x7fdel\x85nel", "tab\tnew\nline\rcr\x0bvt\x0cff",
        "a" * 100, "a" * 101, "b" * 150, "supercalifragilistic" * 6, "é" * 120, "x" + "\u0301" * 120,
        "!!!???...---___***", "((([[[{{{}}}]]])))", "[CLS] special [SEP] tokens [MASK] [UNK] [PAD]",
        "[cls] lower [sep]", "a[SEP]b[CLS]c[MASK]", "[[SEP]]", "Привет мир Γειά σου مرحبا שלום नमस्ते",
        "3.14159 1,000,000 2e-5 -42", "https://example.com/path?q=1&x=y#frag", "well-known state-of-the-art",
        "\ufffd literal replacement \ufffd", "\u3000ideographic\u3000space", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
        "∑∫√∞ ≠ ≤ ≥ ± × ÷", "\u0130\u0131", "Tiếng Việt có dấu", "ภาษาไทย", "العَرَبِيَّة", "Ⅻ ⅻ ① ㈱",
        "\u00a0nbsp\u2009thin\u202fnarrow\u2028line\u2029para", "soft\u00adhyphen", "«guillemets» „quotes“ ‘single’",
        "MiXeD CaSe WORDS", "ÀÉÎÕÜ àéîõü", "ǅ ǈ ǋ titlecase", "Ǆ", "ﬁ ﬂ ligatures", "\U0001d400\U0001d41a math bold",
        "\U00020000\U0002a700 ext-b", "\ue000\uf8ff private use", "\U000e0001 tag \U000e0041", "\u0378\u0379 unassigned",
        "\u061d\u07fd\u0890 newer", "ﷺ ﷽", "a\u0345b", "\U0001e900 adlam \U0001e922",
    ]
    out = [s.encode("utf-8") for s in t]
    out += [b"abc\xff def", b"\xc3(", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong",
            b"\xf4\x90\x80\x80 too big", b"\x80\x80 stray", b"end \xe2\x82", b"\xf8\x88\x80\x80\x80", b"\xfe\xff",
            b"ok \xc3\xa9 \xc3 bad", b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"mid\xa0dle", b"\xef\xbf\xbd real"]
    rnd = random.Random(1234)
    pools = [(0x20, 0x7F), (0xA0, 0x250), (0x300, 0x370), (0x370, 0x530), (0x590, 0x700), (0x900, 0xE00),
             (0x1100, 0x1200), (0x1E00, 0x2000), (0x2000, 0x2070), (0x2E00, 0x2E80), (0x3000, 0x3100),
             (0x4E00, 0x4F00), (0xAC00, 0xAD00), (0xFE00, 0xFF00), (0x1F300, 0x1FA00), (0x0, 0x20),
             (0x10000, 0x10FFFF)]
    for k in range(500):
        parts = []
        for _ in range(rnd.randint(0, 40)):
            r = rnd.random()
            if r < 0.15:
                parts.append(rnd.choice([" ", "  ", "\n", "\t", ".", ",", "-", "!"]))
            elif r < 0.25:
                parts.append(rnd.choice(["the", "Flow", "MACH", "wing", "naïve", "über", "ok"]))
            else:
                lo, hi = rnd.choice(pools)
                c = rnd.randrange(lo, hi)
                if not 0xD800 <= c <= 0xDFFF:
                    parts.append(chr(c))
        b = "".join(parts).encode("utf-8")
        if k % 5 == 0 and b:  # corrupt some bytes
            b = bytearray(b)
            for _ in range(rnd.randint(1, 3)):
                b[rnd.randrange(len(b))] = rnd.randrange(0x80, 0x100)
            b = bytes(b)
        out.append(b)
    return out


def train_cased(texts):
    from tokenizers import BertWordPieceTokenizer
    d = os.path.join(OUT, "cased")
    os.makedirs(d, exist_ok=True)
    tk = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    tk.train_from_iterator(texts, vocab_size=4000, min_frequency=2, limit_alphabet=3000,
                           special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tk.save_model(d)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": False, "strip_accents": False, "tokenize_chinese_chars": True,
                   "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]", "sep_token": "[SEP]",
                   "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}, f, indent=1)
        f.write("\n")
    return d


def rec(f, head, ids):
    f.write("%s %d %d%s\n" % (head, len(ids), fnv64(ids),
                             (" " + " ".join(map(str, ids))) if len(ids) <= IDS_MAX else ""))


def write_expected(name, model_dir, texts, n_cran, pairs):
    tok = BertTokenizerFast.from_pretrained(model_dir)
    assert tok.is_fast
    with open(os.path.join(OUT, "expected_%s.txt" % name), "w") as f:
        f.write("# BertTokenizerFast %s, %d texts\n" % (name, len(texts)))
        full = tok(texts, add_special_tokens=False, truncation=False)["input_ids"]
        for i, ids in enumerate(full):
            rec(f, "F %d" % i, ids)
        for L in (32, 512):
            for i, ids in enumerate(tok(texts, truncation=True, max_length=L)["input_ids"]):
                rec(f, "E %d %d" % (i, L), ids)
        for a, b, L in pairs:
            e = tok(texts[a], texts[b], truncation="longest_first", max_length=L)
            types = e["token_type_ids"]
            first1 = types.index(1) if 1 in types else len(types)
            rec(f, "P %d %d %d %d" % (a, b, L, first1), e["input_ids"])


def main():
    cran, model = sys.argv[1], sys.argv[2]
    docs = smart_fields(os.path.join(cran, "cran.all.1400"))
    qrys = smart_fields(os.path.join(cran, "cran.qry"))
    raw = [(d.get("T", "") + "\n" + d.get("W", "")).encode("utf-8") for d in docs]
    raw += [q.get("W", "").encode("utf-8") for q in qrys]
    n_cran = len(raw)
    edges = edge_texts()
    with open(os.path.join(OUT, "edge_texts.hex"), "w") as f:
        for b in edges:
            f.write(b.hex() + "\n")
    with open(os.path.join(OUT, "cranfield_texts.txt"), "w") as f:
        f.write("# %d documents then %d queries\n" % (len(docs), len(qrys)))
        for i, b in enumerate(raw):
            f.write("%d %d %d\n" % (i, len(b), fnv64_bytes(b)))
    texts = [b.decode("utf-8", errors="replace") for b in raw + edges]
    n_docs = len(docs)
    pairs = []
    for i in range(len(qrys)):  # query with a document, as in fine-tuning
        pairs.append((n_docs + i, (i * 7) % n_docs, (64, 65, 512)[i % 3]))
    for i in range(0, n_docs, 10):  # equal lengths: the tie rule of longest_first
        pairs.append((i, i, (64, 65, 33)[i % 3]))
    ne = len(edges)
    for j in range(ne):
        pairs.append((n_cran + j, n_cran + (j * 7 + 3) % ne, (16, 17, 64)[j % 3]))
    cased_train = [t for t in texts[:n_cran]] + [t.title() for t in texts[:n_docs]] + texts[n_cran:]
    write_expected("uncased", model, texts, n_cran, pairs)
    write_expected("cased", train_cased(cased_train), texts, n_cran, pairs)
    print("texts: %d cranfield + %d edge; pairs: %d" % (n_cran, ne, len(pairs)))


if __name__ == "__main__":
    main()
