#!/usr/bin/env python3
"""Reference outputs for the encoder parity tests (tests/encoder/).

Two models:
  minilm   the default model (all-MiniLM-L6-v2: mean pooling, normalised),
           run through sentence-transformers;
  bertbase a randomly initialised BERT-base-shaped BertModel (12 layers, 768
           hidden, 12 heads, 3072 intermediate, vocab 30522, 512 positions),
           CLS pooling, not normalised. Its weights are never stored: both
           this script and the C test derive them from SEED with the
           generator below, bit-identically.

Weight generator: one splitmix64 stream over the flat parameter array in
qac_bert_params order (api/qac_model.h); value j uses output j of the stream
(state = SEED + (j + 1) * 0x9e3779b97f4a7c15). u = top 24 bits.
  LayerNorm weights:  1 + ((u >> 8) - 2^15) * 2^-19
  everything else:    (u - 2^23) * 2^-28          (uniform in [-1/32, 1/32))
Both are exact in float32.

Texts come from the Cranfield collection (cran.all.1400): documents chosen by
ordinal, title and body joined, truncated at 256 and 128 tokens, plus a
synthetic batch of lengths 1..256 cut from the token stream.

Output: tests/reference/encoder/<model>.bin, little-endian:
  char[8] "QACENCF1"; int32 L, C, n_sets
  per set: int32 max_len, n, is_docs; int32 doc_ordinal[n] (0-based, -1 for
           synthetic); int32 len[n]; int32 ids[sum len]; float32 emb[n, C]
  int32 n_hidden
  per item: int32 set, item, n_pos; int32 pos[n_pos]; float32 h[L+1, n_pos, C]

Run: python3 tests/reference/gen_encoder_fixtures.py [--data DIR] [--model DIR]
"""
import argparse
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testdata  # noqa: E402

SEED = 0x5141430001
GAMMA = 0x9E3779B97F4A7C15
MAGIC = b"QACENCF1"

BERTBASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2,
                layer_norm_eps=1e-12, hidden_act="gelu", pad_token_id=0)

# qac_bert_params order (api/qac_model.h); True marks LayerNorm weights
TENSORS = [("word_emb", False), ("pos_emb", False), ("type_emb", False), ("emb_ln_w", True),
           ("emb_ln_b", False), ("qkv_w", False), ("qkv_b", False), ("attn_out_w", False),
           ("attn_out_b", False), ("ln1_w", True), ("ln1_b", False), ("ffn_in_w", False),
           ("ffn_in_b", False), ("ffn_out_w", False), ("ffn_out_b", False), ("ln2_w", True),
           ("ln2_b", False), ("pooler_w", False), ("pooler_b", False)]


def tensor_shapes(c):
    V, C, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
    I, P, Tt = c["intermediate_size"], c["max_position_embeddings"], c["type_vocab_size"]
    return {"word_emb": (V, C), "pos_emb": (P, C), "type_emb": (Tt, C), "emb_ln_w": (C,), "emb_ln_b": (C,),
            "qkv_w": (L, 3 * C, C), "qkv_b": (L, 3 * C), "attn_out_w": (L, C, C), "attn_out_b": (L, C),
            "ln1_w": (L, C), "ln1_b": (L, C), "ffn_in_w": (L, I, C), "ffn_in_b": (L, I),
            "ffn_out_w": (L, C, I), "ffn_out_b": (L, C), "ln2_w": (L, C), "ln2_b": (L, C),
            "pooler_w": (C, C), "pooler_b": (C,)}


def splitmix_u24(start, n, seed=SEED):
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (np.arange(start + 1, start + n + 1, dtype=np.uint64) * np.uint64(GAMMA))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.int64)


def random_params(c):
    shapes = tensor_shapes(c)
    out, off = {}, 0
    for name, is_ln_w in TENSORS:
        n = int(np.prod(shapes[name]))
        vals = np.empty(n, dtype=np.float32)
        for s in range(0, n, 1 << 22):
            u = splitmix_u24(off + s, min(1 << 22, n - s))
            if is_ln_w:
                v = 1.0 + ((u >> 8) - 32768).astype(np.float64) * 2.0 ** -19
            else:
                v = (u - 8388608).astype(np.float64) * 2.0 ** -28
            vals[s:s + len(u)] = v.astype(np.float32)
        out[name] = vals.reshape(shapes[name])
        off += n
    return out


def hf_state_dict(p, c):
    C, L = c["hidden_size"], c["num_hidden_layers"]
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    sd = {"embeddings.word_embeddings.weight": t(p["word_emb"]),
          "embeddings.position_embeddings.weight": t(p["pos_emb"]),
          "embeddings.token_type_embeddings.weight": t(p["type_emb"]),
          "embeddings.LayerNorm.weight": t(p["emb_ln_w"]), "embeddings.LayerNorm.bias": t(p["emb_ln_b"]),
          "pooler.dense.weight": t(p["pooler_w"]), "pooler.dense.bias": t(p["pooler_b"])}
    for l in range(L):
        pre = f"encoder.layer.{l}."
        for i, qkv in enumerate(["query", "key", "value"]):
            sd[pre + f"attention.self.{qkv}.weight"] = t(p["qkv_w"][l, i * C:(i + 1) * C])
            sd[pre + f"attention.self.{qkv}.bias"] = t(p["qkv_b"][l, i * C:(i + 1) * C])
        sd[pre + "attention.output.dense.weight"] = t(p["attn_out_w"][l])
        sd[pre + "attention.output.dense.bias"] = t(p["attn_out_b"][l])
        sd[pre + "attention.output.LayerNorm.weight"] = t(p["ln1_w"][l])
        sd[pre + "attention.output.LayerNorm.bias"] = t(p["ln1_b"][l])
        sd[pre + "intermediate.dense.weight"] = t(p["ffn_in_w"][l])
        sd[pre + "intermediate.dense.bias"] = t(p["ffn_in_b"][l])
        sd[pre + "output.dense.weight"] = t(p["ffn_out_w"][l])
        sd[pre + "output.dense.bias"] = t(p["ffn_out_b"][l])
        sd[pre + "output.LayerNorm.weight"] = t(p["ln2_w"][l])
        sd[pre + "output.LayerNorm.bias"] = t(p["ln2_b"][l])
    return sd


def read_cranfield(path):
    """Title and body of each record, lines trimmed and joined by spaces
    (the same text index/readers.c produces): tests/testdata.py's reader."""
    return [t for _, t in testdata.cranfield_texts(os.path.basename(path), cran_dir=os.path.dirname(path))]


def pooled(model, pooling, normalize, ids_list, batch=16):
    """Embeddings of token-id sequences through the HF BertModel, padded batches."""
    out = []
    for s in range(0, len(ids_list), batch):
        chunk = ids_list[s:s + batch]
        T = max(len(x) for x in chunk)
        ids = torch.zeros((len(chunk), T), dtype=torch.long)
        mask = torch.zeros((len(chunk), T), dtype=torch.long)
        for i, x in enumerate(chunk):
            ids[i, :len(x)] = torch.tensor(x)
            mask[i, :len(x)] = 1
        with torch.no_grad():
            h = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        if pooling == "mean":
            m = mask.unsqueeze(-1).float()
            v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        else:
            v = h[:, 0]
        if normalize:
            v = torch.nn.functional.normalize(v, p=2, dim=1)
        out.append(v.numpy().astype(np.float32))
    return np.concatenate(out)


def hidden_states(model, ids):
    with torch.no_grad():
        o = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                  token_type_ids=torch.zeros((1, len(ids)), dtype=torch.long), output_hidden_states=True)
    return np.stack([h[0].numpy() for h in o.hidden_states]).astype(np.float32)  # [L+1, T, C]


def synthetic(tok, docs, lengths):
    stream = []
    for d in docs:
        stream += tok(d, add_special_tokens=False)["input_ids"]
        if len(stream) > max(lengths):
            break
    cls, sep = tok.cls_token_id, tok.sep_token_id
    return [[cls] if L == 1 else [cls] + stream[:L - 2] + [sep] for L in lengths]


def write_fixture(path, L, C, sets, hidden):
    with open(path + ".tmp", "wb") as f:
        f.write(MAGIC + struct.pack("<3i", L, C, len(sets)))
        for max_len, ords, ids, emb in sets:
            f.write(struct.pack("<3i", max_len, len(ids), int(ords[0] >= 0)))
            f.write(np.asarray(ords, dtype="<i4").tobytes())
            f.write(np.asarray([len(x) for x in ids], dtype="<i4").tobytes())
            f.write(np.concatenate([np.asarray(x, dtype="<i4") for x in ids]).tobytes())
            f.write(np.asarray(emb, dtype="<f4").tobytes())
        f.write(struct.pack("<i", len(hidden)))
        for set_i, item, pos, h in hidden:
            f.write(struct.pack("<3i", set_i, item, len(pos)))
            f.write(np.asarray(pos, dtype="<i4").tobytes())
            f.write(np.ascontiguousarray(h[:, pos, :], dtype="<f4").tobytes())
    os.replace(path + ".tmp", path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


def build(name, model, tok, pooling, normalize, docs, doc_sets, lengths, out_dir, st_model=None):
    L, C = model.config.num_hidden_layers, model.config.hidden_size
    sets = []
    for max_len, ords in doc_sets:
        enc = tok([docs[i] for i in ords], truncation=True, max_length=max_len)
        ids = enc["input_ids"]
        if st_model is not None:
            # the real sentence-transformers pipeline, on the texts themselves
            st_model.max_seq_length = max_len
            emb = st_model.encode([docs[i] for i in ords], batch_size=16, convert_to_numpy=True)
            emb_ids = pooled(model, pooling, normalize, ids)
            print(f"{name} max_len {max_len}: sentence-transformers vs BertModel max |diff| "
                  f"{np.abs(emb - emb_ids).max():.2e}", file=sys.stderr)
        else:
            emb = pooled(model, pooling, normalize, ids)
        sets.append((max_len, list(ords), ids, emb))
    syn = synthetic(tok, docs, lengths)
    sets.append((max(lengths), [-1] * len(syn), syn, pooled(model, pooling, normalize, syn)))
    hidden = []
    for set_i, item in [(0, 0), (1, 1), (len(sets) - 1, 1)]:
        ids = sets[set_i][2][item]
        n = len(ids)
        pos = sorted({p for p in (0, 1, 2, n // 2, n - 2, n - 1) if 0 <= p < n})
        hidden.append((set_i, item, pos, hidden_states(model, ids)))
    write_fixture(os.path.join(out_dir, name + ".bin"), L, C, sets, hidden)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("QAC_SHARED_DATA", os.path.join(repo, "..", "shared", "data")))
    ap.add_argument("--model", default=os.environ.get("QAC_MODEL", os.path.expanduser(
        os.path.join(os.environ.get("QAC_HOME", "~/.local/share/qac"), "models", "all-MiniLM-L6-v2"))))
    ap.add_argument("--out", default=os.path.join(here, "encoder"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)

    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    docs = read_cranfield(os.path.join(args.data, "cranfield", "cran.all.1400"))
    assert len(docs) == 1400, len(docs)
    tok = AutoTokenizer.from_pretrained(args.model)

    st = SentenceTransformer(args.model, device="cpu")
    minilm = st[0].auto_model.float().eval()
    build("minilm", minilm, tok, "mean", True, docs,
          [(256, list(range(0, 1400, 8))[:128]), (128, list(range(4, 1400, 8))[:96])],
          list(range(1, 256, 4)) + [256], args.out, st_model=st)

    cfg = BertConfig(**BERTBASE)
    base = BertModel(cfg, add_pooling_layer=True).eval()
    missing, unexpected = base.load_state_dict(hf_state_dict(random_params(BERTBASE), BERTBASE), strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    build("bertbase", base, tok, "cls", False, docs,
          [(256, list(range(3, 1400, 160))[:8]), (128, list(range(43, 1400, 160))[:8])],
          list(range(1, 256, 16)) + [256], args.out)


if __name__ == "__main__":
    main()
