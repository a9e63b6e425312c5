#!/usr/bin/env python3
"""Checkpoints of the encoder families beyond BERT, made here, and what
transformers and sentence-transformers compute with them (tests/encoder/
test_families.c, tests/encoder/test_families_e2e.py).

No weights of these families can be downloaded here, so each checkpoint is
a small random instance of its family in the layout its real model ships
in, saved by sentence-transformers (config.json, model.safetensors, the
tokenizer's files, modules.json, 1_Pooling, 2_Normalize):

  xlmr        multilingual-e5-small's layout (xlm-roberta, mean pooling,
              normalised, 514 positions, one token type), scaled down
  roberta     a RoBERTa with byte-level BPE (CLS pooling, not normalised)
  bert_xlmr   paraphrase-multilingual-MiniLM-L12-v2's layout: a BERT config
              with the XLM-R SentencePiece tokenizer (mean, not normalised)
  modernbert  gte-modernbert-base's config (no biases, global every 3rd
              layer, rotary thetas 160000 / 10000, CLS pooling, normalised),
              scaled down with the local window scaled to 16 tokens
  modernbert_bias  the same with norm_bias, attention_bias and mlp_bias
              true, global every 2nd layer, a window of 10, mean pooling

--shapes makes the real shapes for the suite (embeddings only, no
gradients): multilingual-e5-small's config, bge-m3's layers with 2 of its
24, gte-modernbert-base's layers with 4 of its 22 (vocabularies: the
tokenizers' trained here).

--real makes the real shapes (bench/encode_families/: multilingual-e5-small;
bge-m3's layers with 6 of its 24; gte-modernbert-base).

Tokenizers are trained here on the Cranfield collection and a few lines in
other scripts (SentencePiece unigram with XLM-R's fairseq ids, byte-level
BPE); the ids below are the tokenizer's as sentence-transformers calls it.
Weights: transformers' initialisation replaced by seeded draws large enough
that positions, windows and every bias change the output (matrices N(0,
0.15), biases N(0, 0.1), norms 1 + N(0, 0.1) and N(0, 0.1), embeddings
N(0, 1)).

Per checkpoint NAME, DIR/NAME/ and DIR/NAME.ref.safetensors with:
  ids, lens        the texts' token ids back to back (int32) and counts
  emb32, emb64     sentence-transformers' embeddings in float32, and the
                   same forward in float64 (the reference's own error)
  q_ids, q_lens, p_ids, p_lens   a fine-tuning batch (3 Cranfield queries,
                   3 passages each: a judged one first), padded with the
                   tokenizer's pad id; the first passage's fourth token is
                   the pad id too (inside its length)
  loss32, loss64   InfoNCE over it (tau 0.05, cosine; F64 scalars)
  grad32.<t>, grad64.<t>  every parameter's gradient in qac's layout
                   (api/qac_model.h, tensors the family lacks left out;
                   ModernBERT's layer-0 attention norm, which it has not, as
                   zeros)
  hid32.<s>, hid64.<s>, dhid32.<s>, dhid64.<s>  ModernBERT only, for the
                   side s (q, p): the hidden states [L+1, n, T, C] (index l:
                   layer l's input; L: the last layer's output, before the
                   final norm) and the loss's gradient with respect to each
                   (retain_grad on the layers' inputs and outputs)
and DIR/texts.txt: the texts, one per line (hex-escaped newlines none: the
texts have none).

Run: python3 tests/reference/gen_family_fixtures.py --out DIR [--data DIR] [--only NAME,...] [--real | --shapes]
"""
import argparse
import io
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

MULTILINGUAL = [
    "Über die Straße gehen Müller, Søren und Zoë zur Bäckerei.",
    "Le garçon a mangé une crème brûlée à Noël, déjà célèbre.",
    "Привет, как дела? Москва — столица России.",
    "Καλημέρα κόσμε· η θάλασσα είναι γαλάζια.",
    "東京は日本の首都です。空気力学の実験を行った。",
    "风洞实验显示边界层在高速下分离。",
    "مرحبا بالعالم، هذه تجربة في الديناميكا الهوائية.",
    "नमस्ते दुनिया, यह वायुगतिकी का परीक्षण है।",
    "emoji 😀🎉👍 and a flag 🇫🇷 in text",
    "naïve café résumé coöperate",
]

SMALL = {
    "xlmr": dict(kind="xlm-roberta", tok="spm", pooling="mean", normalize=True, max_seq=128,
                 cfg=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                          max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5)),
    "roberta": dict(kind="roberta", tok="bpe", pooling="cls", normalize=False, max_seq=128,
                    cfg=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                             max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5)),
    "bert_xlmr": dict(kind="bert", tok="spm", pooling="mean", normalize=False, max_seq=128,
                      cfg=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                               max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12,
                               pad_token_id=0)),
    "modernbert": dict(kind="modernbert", tok="mbpe", pooling="cls", normalize=True, max_seq=128,
                       cfg=dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=2, intermediate_size=96,
                                max_position_embeddings=8192, local_attention=16, global_attn_every_n_layers=3,
                                global_rope_theta=160000.0, local_rope_theta=10000.0, norm_eps=1e-5)),
    "modernbert_bias": dict(kind="modernbert", tok="mbpe", pooling="mean", normalize=False, max_seq=128,
                            cfg=dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=2,
                                     intermediate_size=96, max_position_embeddings=8192, local_attention=10,
                                     global_attn_every_n_layers=2, global_rope_theta=160000.0,
                                     local_rope_theta=10000.0, norm_eps=1e-5, norm_bias=True,
                                     attention_bias=True, mlp_bias=True)),
}

# The real shapes, for bench/encode_families/ (weights random: speed only).
REAL = {
    "e5_small": dict(kind="xlm-roberta", tok="spm", pooling="mean", normalize=True, max_seq=512,
                     cfg=dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=12, intermediate_size=1536,
                              max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5)),
    "bge_m3_6l": dict(kind="xlm-roberta", tok="spm", pooling="cls", normalize=True, max_seq=8192,
                      cfg=dict(hidden_size=1024, num_hidden_layers=6, num_attention_heads=16,
                               intermediate_size=4096, max_position_embeddings=8194, type_vocab_size=1,
                               layer_norm_eps=1e-5)),
    "gte_modernbert": dict(kind="modernbert", tok="mbpe", pooling="cls", normalize=True, max_seq=8192,
                           cfg=dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                                    intermediate_size=1152, max_position_embeddings=8192, local_attention=128,
                                    global_attn_every_n_layers=3, global_rope_theta=160000.0,
                                    local_rope_theta=10000.0, norm_eps=1e-5)),
}

# The real shapes in the test suite (--shapes; embeddings only: the
# gradients are the small checkpoints'): multilingual-e5-small's config,
# bge-m3's layers (1024 hidden, 16 heads, 4096 intermediate, 8194
# positions) with 2 of its 24, and gte-modernbert-base's layers (768
# hidden, 12 heads, GeGLU 1152, a window of 128, thetas 160000 / 10000,
# global every 3rd) with 4 of its 22 (global, local, local, global). The
# whole 22 layers: bench/encode_families, which reports the cosine too.
# Matrices drawn N(0, 1.2 / sqrt(fan-in)) (the small ones' 0.15 at a fan-in
# of 64), so activations keep the small checkpoints' scale at any width.
SHAPES = {
    "e5_small": dict(REAL["e5_small"], scaled_init=True),
    "bge_m3_2l": dict(REAL["bge_m3_6l"], scaled_init=True, cfg=dict(REAL["bge_m3_6l"]["cfg"], num_hidden_layers=2)),
    "gte_modernbert_4l": dict(REAL["gte_modernbert"], scaled_init=True,
                              cfg=dict(REAL["gte_modernbert"]["cfg"], num_hidden_layers=4)),
}

NQ, NPASS, QLEN, PLEN, TAU = 3, 3, 24, 64, 0.05


# ---------- texts ----------

def cranfield(data):
    """(documents, queries, relevant doc ordinals by query ordinal)."""
    docs = []
    raw = open(os.path.join(data, "cran.all.1400"), encoding="utf-8").read()
    for rec in raw.split(".I ")[1:]:
        fields, cur = {}, None
        for line in rec.split("\n")[1:]:
            if line[:2] in (".T", ".A", ".B", ".W"):
                cur = line[:2]
                fields[cur] = []
            elif cur:
                fields[cur].append(line.strip())
        docs.append(" ".join(x for x in (" ".join(fields.get(".T", [])), " ".join(fields.get(".W", []))) if x))
    queries = []
    for q in open(os.path.join(data, "cran.qry"), encoding="utf-8").read().split(".I ")[1:]:
        body = q.split(".W", 1)[1] if ".W" in q else ""
        queries.append(" ".join(body.split()))
    rel = {}
    for line in open(os.path.join(data, "cranqrel")):
        q, d, r = line.split()[:3]
        if 1 <= int(r) <= 4:
            rel.setdefault(int(q), []).append(int(d))
    return docs, queries, rel


def texts_for_tests(docs, queries):
    out = [docs[i] for i in (0, 1, 5, 17, 99, 400, 1000, 1398)]
    out += queries[:6] + MULTILINGUAL + ["a", "boundary layer", "flow " * 150]
    return [" ".join(t.split()) for t in out]


# ---------- tokenizers ----------

def train_corpus(docs, queries):
    return docs[::3] + queries + MULTILINGUAL * 30


def spm_tokenizer(corpus, work):
    """XLM-R's: a unigram SentencePiece model with fairseq's ids (<s> <pad>
    </s> <unk>, the pieces from SentencePiece's id 3 on, <mask> last)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import XLMRobertaTokenizer
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_writer=buf, vocab_size=1500,
                                   model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2)
    proto = pb.ModelProto()
    proto.ParseFromString(buf.getvalue())
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(p.piece, p.score) for p in proto.pieces[3:]] + [("<mask>", 0.0)]
    tok = XLMRobertaTokenizer(vocab=vocab, _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap)
    return tok, buf.getvalue()


def bpe_tokenizer(corpus, modern):
    """RoBERTa's byte-level BPE (<s> ... </s>), or ModernBERT's tokenizer.json
    ([CLS] ... [SEP], specials first)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, RobertaTokenizer
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"] if modern else ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=1200, special_tokens=specials, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if not modern:
        j = json.loads(t.to_str())
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in j["model"]["merges"]]
        return RobertaTokenizer(vocab=j["model"]["vocab"], merges=merges), None
    cls, sep = t.token_to_id("[CLS]"), t.token_to_id("[SEP]")
    t.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                     pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
                                                     special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]", model_max_length=8192), None


# ---------- models ----------

def hf_config(spec, tok):
    from transformers import BertConfig, ModernBertConfig, RobertaConfig, XLMRobertaConfig
    c = dict(spec["cfg"], vocab_size=len(tok))
    kind = spec["kind"]
    if kind == "modernbert":
        c.update(pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
                 bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
        return ModernBertConfig(**c)
    c.setdefault("pad_token_id", tok.pad_token_id)
    c.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if kind == "bert":
        return BertConfig(**c)
    c.update(bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    return (XLMRobertaConfig if kind == "xlm-roberta" else RobertaConfig)(**c)


def randomize(model, seed, scaled=False):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = torch.randn(p.shape, generator=g)
            if "norm" in name.lower():
                p.copy_(1 + 0.1 * n if name.endswith("weight") else 0.1 * n)
            elif "embeddings" in name and p.dim() == 2:
                p.copy_(n)
            elif name.endswith("bias"):
                p.copy_(0.1 * n)
            else:
                p.copy_((1.2 / p.shape[-1] ** 0.5 if scaled else 0.15) * n)


def build(name, spec, out, corpus, seed):
    """The checkpoint directory out/name, saved by sentence-transformers."""
    import torch
    from sentence_transformers import SentenceTransformer
    try:  # sentence-transformers 6's module path, else the older one
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models
    from transformers import AutoModel
    work = os.path.join(out, name + ".hf")
    if spec["tok"] == "spm":
        tok, spm_bytes = spm_tokenizer(corpus, work)
    else:
        tok, spm_bytes = bpe_tokenizer(corpus, spec["tok"] == "mbpe")
    cfg = hf_config(spec, tok)
    torch.manual_seed(seed)
    model = AutoModel.from_config(cfg)
    randomize(model, seed, spec.get("scaled_init", False))
    model.save_pretrained(work)
    tok.model_max_length = spec["max_seq"]
    tok.save_pretrained(work)
    if spm_bytes:
        with open(os.path.join(work, "sentencepiece.bpe.model"), "wb") as f:
            f.write(spm_bytes)
    tr = models.Transformer(work, max_seq_length=spec["max_seq"])
    mods = [tr, models.Pooling(tr.get_embedding_dimension(), pooling_mode=spec["pooling"])]
    if spec["normalize"]:
        mods.append(models.Normalize())
    st = SentenceTransformer(modules=mods, device="cpu")
    final = os.path.join(out, name)
    st.save(final)
    if spm_bytes:
        with open(os.path.join(final, "sentencepiece.bpe.model"), "wb") as f:
            f.write(spm_bytes)
    import shutil
    shutil.rmtree(work)
    return SentenceTransformer(final, device="cpu")


# ---------- references ----------

def forward(st, ids_list, pad, dtype):
    """sentence-transformers' modules on padded ids in dtype: [n, C]."""
    import torch
    T = max(len(x) for x in ids_list)
    ids = torch.full((len(ids_list), T), pad, dtype=torch.long)
    mask = torch.zeros((len(ids_list), T), dtype=torch.long)
    for i, x in enumerate(ids_list):
        ids[i, :len(x)] = torch.tensor(x)
        mask[i, :len(x)] = 1
    feats = {"input_ids": ids, "attention_mask": mask}
    st.to(dtype)
    out = st.forward(feats)["sentence_embedding"]
    st.to(torch.float32)
    return out


def qac_layout(model, kind, L, attr):
    """Every parameter's .grad (or .data) in qac's flat layout, by name."""
    import torch
    sd = dict(model.named_parameters())
    get = lambda k: (getattr(sd[k], attr) if getattr(sd[k], attr) is not None else torch.zeros_like(sd[k])).detach()
    lay = lambda fmt: torch.stack([get(fmt.format(l)) for l in range(L)])
    has = lambda k: k in sd
    out = {}
    if kind == "modernbert":
        out["word_emb"] = get("embeddings.tok_embeddings.weight")
        out["emb_ln_w"] = get("embeddings.norm.weight")
        if has("embeddings.norm.bias"):
            out["emb_ln_b"] = get("embeddings.norm.bias")
        pairs = [("qkv_w", "attn.Wqkv.weight"), ("qkv_b", "attn.Wqkv.bias"), ("attn_out_w", "attn.Wo.weight"),
                 ("attn_out_b", "attn.Wo.bias"), ("ffn_in_w", "mlp.Wi.weight"), ("ffn_in_b", "mlp.Wi.bias"),
                 ("ffn_out_w", "mlp.Wo.weight"), ("ffn_out_b", "mlp.Wo.bias"), ("ln2_w", "mlp_norm.weight"),
                 ("ln2_b", "mlp_norm.bias")]
        for q, h in pairs:
            if has(f"layers.0.{h}"):
                out[q] = lay("layers.{}." + h)
        for q, h in (("ln1_w", "attn_norm.weight"), ("ln1_b", "attn_norm.bias")):
            if has(f"layers.1.{h}"):  # layer 0 has no attention norm: zeros in qac's slot
                rows = [get(f"layers.{l}.{h}") for l in range(1, L)]
                out[q] = torch.stack([torch.zeros_like(rows[0])] + rows)
        out["final_ln_w"] = get("final_norm.weight")
        if has("final_norm.bias"):
            out["final_ln_b"] = get("final_norm.bias")
        return out
    out["word_emb"] = get("embeddings.word_embeddings.weight")
    out["pos_emb"] = get("embeddings.position_embeddings.weight")
    out["type_emb"] = get("embeddings.token_type_embeddings.weight")
    out["emb_ln_w"] = get("embeddings.LayerNorm.weight")
    out["emb_ln_b"] = get("embeddings.LayerNorm.bias")
    for q, part in (("qkv_w", "weight"), ("qkv_b", "bias")):
        out[q] = torch.stack([torch.cat([get(f"encoder.layer.{l}.attention.self.{x}.{part}")
                                         for x in ("query", "key", "value")]) for l in range(L)])
    pre = "encoder.layer.{}."
    for q, h in [("attn_out_w", "attention.output.dense.weight"), ("attn_out_b", "attention.output.dense.bias"),
                 ("ln1_w", "attention.output.LayerNorm.weight"), ("ln1_b", "attention.output.LayerNorm.bias"),
                 ("ffn_in_w", "intermediate.dense.weight"), ("ffn_in_b", "intermediate.dense.bias"),
                 ("ffn_out_w", "output.dense.weight"), ("ffn_out_b", "output.dense.bias"),
                 ("ln2_w", "output.LayerNorm.weight"), ("ln2_b", "output.LayerNorm.bias")]:
        out[q] = lay(pre + h)
    return out


def pad_batch(seqs, pad):
    T = max(len(s) for s in seqs)
    ids = np.full((len(seqs), T), pad, dtype=np.int32)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
    return ids, np.array([len(s) for s in seqs], dtype=np.int32)


def grads(st, spec, batch, dtype):
    """InfoNCE (tau 0.05, cosine: qac's SIM_COS) over the batch through the
    checkpoint's own pooling and normalisation; the loss and every gradient."""
    import torch
    (qi, ql), (pi, pl) = batch
    st.to(dtype)
    st.train()
    model = st[0].auto_model
    model.zero_grad(set_to_none=True)
    # ModernBERT: every layer's input and output kept with its gradient
    seen, hooks = [], []
    if spec["kind"] == "modernbert":
        def keep(mod, args, kwargs, out):
            x = args[0] if args else kwargs["hidden_states"]
            y = out[0] if isinstance(out, tuple) else out
            x.retain_grad()
            y.retain_grad()
            seen.append((mod.layer_idx, x, y))
        for layer in model.layers:
            hooks.append(layer.register_forward_hook(keep, with_kwargs=True))
    def enc(ids, lens):
        mask = (np.arange(ids.shape[1])[None, :] < lens[:, None]).astype(np.int64)
        feats = {"input_ids": torch.from_numpy(ids.astype(np.int64)), "attention_mask": torch.from_numpy(mask)}
        return st.forward(feats)["sentence_embedding"]
    q, p = enc(qi, ql), enc(pi, pl)
    q, p = torch.nn.functional.normalize(q, dim=1), torch.nn.functional.normalize(p, dim=1)
    scores = q @ p.T / TAU
    loss = torch.nn.functional.cross_entropy(scores, torch.arange(NQ) * NPASS)
    loss.backward()
    for h in hooks:
        h.remove()
    out = qac_layout(model, spec["kind"], model.config.num_hidden_layers, "grad")
    L = model.config.num_hidden_layers
    if seen:  # q's layers, then p's
        assert len(seen) == 2 * L and [l for l, _, _ in seen] == list(range(L)) * 2
        for k, side in enumerate(("q", "p")):
            calls = seen[k * L:(k + 1) * L]
            xs = [x for _, x, _ in calls] + [calls[-1][2]]
            out["@hid." + side] = torch.stack([x.detach() for x in xs])
            out["@dhid." + side] = torch.stack([x.grad.detach() for x in xs])
    st.eval()
    st.to(torch.float32)
    return loss.item(), out


def reference(name, spec, out, st, texts, docs, queries, rel, with_grads=True):
    import torch
    from safetensors.numpy import save_file
    tok = st.tokenizer
    pad = tok.pad_token_id
    ids_list = [list(map(int, x)) for x in st.tokenize(texts)["input_ids"]]
    ids_list = [x[:int(m.sum())] for x, m in zip(ids_list, st.tokenize(texts)["attention_mask"])]
    t = {"ids": np.concatenate([np.array(x, dtype=np.int32) for x in ids_list]),
         "lens": np.array([len(x) for x in ids_list], dtype=np.int32)}
    with torch.no_grad():
        t["emb32"] = np.stack([st.encode(x, convert_to_numpy=True) for x in [texts]])[0].astype(np.float32)
        t["emb64"] = forward(st, ids_list, pad, torch.float64).numpy()
    if not with_grads:
        save_file(t, os.path.join(out, name + ".ref.safetensors"))
        return
    # the fine-tuning batch: queries 1, 2 and 5 with a judged document first
    qs, ps = [], []
    for qn in (1, 2, 5):
        qs.append(queries[qn - 1])
        ps += [docs[rel[qn][0] - 1], docs[(rel[qn][0] + 40) % len(docs)], docs[(rel[qn][0] + 400) % len(docs)]]
    enc = lambda xs, n: [tok(x, truncation=True, max_length=n)["input_ids"] for x in xs]
    batch = (pad_batch(enc(qs, QLEN), pad), pad_batch(enc(ps, PLEN), pad))
    # a pad token inside the first passage (as a text holding the pad token's
    # string encodes): a row that counts, whose word row (and, where
    # positions are offset past the padding index, whose position row
    # padding_idx) torch's nn.Embedding(padding_idx=...) leaves without a
    # gradient; in padding alone those rows get none from the loss anyway
    batch[1][0][0, 3] = pad
    t["q_ids"], t["q_lens"] = batch[0]
    t["p_ids"], t["p_lens"] = batch[1]
    for tag, dt in (("32", torch.float32), ("64", torch.float64)):
        loss, g = grads(st, spec, batch, dt)
        t["loss" + tag] = np.array([loss], dtype=np.float64)
        for k, v in g.items():
            key = f"{k[1:].split('.')[0]}{tag}.{k.split('.')[1]}" if k.startswith("@") else f"grad{tag}.{k}"
            t[key] = v.numpy().astype(np.float32 if tag == "32" else np.float64)
    save_file(t, os.path.join(out, name + ".ref.safetensors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=None, help="the Cranfield directory")
    ap.add_argument("--only", default="", help="comma-separated checkpoint names")
    ap.add_argument("--real", action="store_true", help="the real shapes (no references: speed only)")
    ap.add_argument("--shapes", action="store_true", help="the real shapes of the suite (embedding references only)")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(2)
    if a.data is None:
        import testdata
        a.data = testdata.path("cranfield")
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    docs, queries, rel = cranfield(a.data)
    corpus = train_corpus(docs, queries)
    texts = texts_for_tests(docs, queries)
    with open(os.path.join(a.out, "texts.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in texts))
    specs = REAL if a.real else SHAPES if a.shapes else SMALL
    names = [n for n in a.only.split(",") if n] or list(specs)
    for i, name in enumerate(names):
        st = build(name, specs[name], a.out, corpus, seed=1000 + i)
        if not a.real:
            reference(name, specs[name], a.out, st, texts, docs, queries, rel, with_grads=not a.shapes)
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
