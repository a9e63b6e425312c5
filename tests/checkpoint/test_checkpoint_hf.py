#!/usr/bin/env python3
"""Checkpoint parity against the real Hugging Face stack.

usage: test_checkpoint_hf.py PATH/TO/qac_ckpt_tool

1. qac's flat views of the default model equal the safetensors tensors
   (q/k/v fused as the header says); pooling/normalize/max_seq_len match the
   sentence-transformers files; the fingerprint equals XXH64 from libxxhash.
2. A checkpoint qac saves loads in transformers.AutoModel with tensors
   exactly equal to the source, and sentence_transformers embeds with it
   exactly like the source model. F16/BF16 saves equal torch's conversion.
3. F16 and BF16 inputs written by torch (every 16-bit pattern, "bert."
   prefix, a cls.* head, position_ids, no pooler) load with the same fp32
   values torch's .float() gives.
4. qac's fp32 -> F16/BF16 writer matches torch's .to() on random bit patterns.
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import torch
from safetensors.numpy import load_file as np_load
from safetensors.torch import load_file as torch_load
from safetensors.torch import save_file as torch_save

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

warnings.simplefilter("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.manual_seed(0)
TOOL = sys.argv[1]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def default_model_dir():
    if os.environ.get("QAC_MODEL"):
        return os.environ["QAC_MODEL"]
    home = os.environ.get("QAC_HOME") or os.path.expanduser("~/.local/share/qac")
    return os.path.join(home, "models", "all-MiniLM-L6-v2")


def tool(*args):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
        sys.exit(f"ckpt_tool {' '.join(args)} failed")


def bits_equal(a, b):
    """Bitwise equality of float arrays, any NaN matching any NaN."""
    a = np.asarray(a, dtype=np.float32).ravel()
    b = np.asarray(b, dtype=np.float32).ravel()
    if a.shape != b.shape:
        return False, -1
    nan = np.isnan(a) & np.isnan(b)
    diff = (a.view(np.uint32) != b.view(np.uint32)) & ~nan
    return not diff.any(), int(diff.sum())


def expected_views(sd, cfg, prefix):
    """The flat layout of api/qac_model.h built from HF tensors (torch fp32)."""
    def g(name):
        return sd[prefix + name].float().numpy()

    L, C = cfg["num_hidden_layers"], cfg["hidden_size"]
    lay = lambda fmt: np.stack([g(fmt % l) for l in range(L)])
    att = "encoder.layer.%d.attention."
    qkv_w = np.stack([np.concatenate([g(att % l + "self.%s.weight" % x) for x in ("query", "key", "value")])
                      for l in range(L)])
    qkv_b = np.stack([np.concatenate([g(att % l + "self.%s.bias" % x) for x in ("query", "key", "value")])
                      for l in range(L)])
    pool_w = g("pooler.dense.weight") if prefix + "pooler.dense.weight" in sd else np.zeros((C, C), np.float32)
    pool_b = g("pooler.dense.bias") if prefix + "pooler.dense.bias" in sd else np.zeros(C, np.float32)
    return {
        "word_emb": g("embeddings.word_embeddings.weight"),
        "pos_emb": g("embeddings.position_embeddings.weight"),
        "type_emb": g("embeddings.token_type_embeddings.weight"),
        "emb_ln_w": g("embeddings.LayerNorm.weight"),
        "emb_ln_b": g("embeddings.LayerNorm.bias"),
        "qkv_w": qkv_w, "qkv_b": qkv_b,
        "attn_out_w": lay(att + "output.dense.weight"), "attn_out_b": lay(att + "output.dense.bias"),
        "ln1_w": lay(att + "output.LayerNorm.weight"), "ln1_b": lay(att + "output.LayerNorm.bias"),
        "ffn_in_w": lay("encoder.layer.%d.intermediate.dense.weight"),
        "ffn_in_b": lay("encoder.layer.%d.intermediate.dense.bias"),
        "ffn_out_w": lay("encoder.layer.%d.output.dense.weight"),
        "ffn_out_b": lay("encoder.layer.%d.output.dense.bias"),
        "ln2_w": lay("encoder.layer.%d.output.LayerNorm.weight"),
        "ln2_b": lay("encoder.layer.%d.output.LayerNorm.bias"),
        "pooler_w": pool_w, "pooler_b": pool_b,
    }


def load_dump(path):
    from safetensors import safe_open
    with safe_open(path, "np") as f:
        meta = f.metadata()
        return {k: f.get_tensor(k) for k in f.keys()}, meta


def compare_views(label, dump, exp):
    worst = 0
    for name, want in exp.items():
        ok, nbad = bits_equal(dump[name], want)
        check(ok, f"{label}: view {name} differs in {nbad} values")
        if not ok:
            worst = max(worst, nbad)
    print(f"{label}: {len(exp)} views compared bitwise, max mismatching values {worst}")


def xxh64(data):
    for name in ("libxxhash.so.0", "libxxhash.so"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            lib = None
    if lib is None:
        return None
    lib.XXH64.restype = ctypes.c_uint64
    lib.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    return "%016x" % lib.XXH64(data, len(data), 0)


tmp = scratch.mkdtemp(prefix="qac-ckpt-hf-")
src = default_model_dir()

# ---- 1. default model views, extras, fingerprint ----
dump_path = os.path.join(tmp, "default.dump")
tool("dump", src, dump_path)
dump, meta = load_dump(dump_path)
meta_default = meta
cfg = json.load(open(os.path.join(src, "config.json")))
sd = torch_load(os.path.join(src, "model.safetensors"))
compare_views("default model", dump, expected_views(sd, cfg, ""))
check(meta["pooling"] == "mean" and meta["normalize"] == "1" and meta["max_seq_len"] == "256",
      f"default model extras: {meta}")
order = ["word_emb", "pos_emb", "type_emb", "emb_ln_w", "emb_ln_b", "qkv_w", "qkv_b", "attn_out_w", "attn_out_b",
         "ln1_w", "ln1_b", "ffn_in_w", "ffn_in_b", "ffn_out_w", "ffn_out_b", "ln2_w", "ln2_b", "pooler_w", "pooler_b"]
blob = open(os.path.join(src, "config.json"), "rb").read()
blob += b"\npooling=%s normalize=%s max_seq_len=%s\n" % (meta["pooling"].encode(), meta["normalize"].encode(),
                                                        meta["max_seq_len"].encode())
blob += b"".join(dump[k].astype("<f4").tobytes() for k in order)
ref = xxh64(blob)
if ref is None:
    print("note: libxxhash not found; fingerprint not checked against it")
else:
    check(ref == meta["fingerprint"], f"fingerprint {meta['fingerprint']} != XXH64 {ref}")
    print(f"fingerprint {meta['fingerprint']} == libxxhash XXH64")

# ---- 2. save, then load with transformers and sentence-transformers ----
from sentence_transformers import SentenceTransformer
from transformers import AutoModel

out32 = os.path.join(tmp, "saved-f32")
tool("save", src, out32, "f32")
orig = AutoModel.from_pretrained(src).eval()
back = AutoModel.from_pretrained(out32).eval()
osd, bsd = orig.state_dict(), back.state_dict()
check(set(osd) == set(bsd), f"saved state_dict keys differ: {set(osd) ^ set(bsd)}")
nbad = sum(not torch.equal(osd[k], bsd[k]) for k in osd if k in bsd)
check(nbad == 0, f"{nbad} tensors differ after save")
print(f"transformers: {len(osd)} tensors of the saved checkpoint equal the source exactly")
texts = ["what is dense passage retrieval?", "Query-as-context pre-training.", "a b c " * 50]
st_src = SentenceTransformer(src, device="cpu")
st_out = SentenceTransformer(out32, device="cpu")
e1, e2 = st_src.encode(texts), st_out.encode(texts)
d = float(np.abs(e1 - e2).max())
print(f"sentence-transformers embeddings, source vs saved: max abs diff {d:.3g}")
check(d == 0.0, f"saved model embeds differently (max diff {d})")
check(st_out.max_seq_length == 256, f"saved max_seq_length {st_out.max_seq_length}")
check(any(type(m).__name__ == "Normalize" for m in st_out), "saved model lost its Normalize module")

for dt, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
    outh = os.path.join(tmp, "saved-" + dt)
    tool("save", src, outh, dt)
    raw = torch_load(os.path.join(outh, "model.safetensors"))
    bad = [k for k in raw if k in sd and not torch.equal(raw[k], sd[k].to(tdt))]
    check(not bad and raw, f"{dt} save differs from torch's conversion in {bad[:3]}")
    m = AutoModel.from_pretrained(outh).eval()
    msd = m.state_dict()
    bad = [k for k in osd if not torch.equal(msd[k].float(), osd[k].to(tdt).float())]
    check(not bad, f"{dt} save loaded in transformers differs in {bad[:3]}")
    print(f"{dt} save: equals torch .to({tdt}) and loads in transformers")

# ---- 3. F16 / BF16 inputs with prefix, extra head, no pooler ----
from transformers import BertConfig, BertForMaskedLM

tcfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64)
mlm = BertForMaskedLM(tcfg).eval()
for dt, tdt, np_bits in (("f16", torch.float16, np.uint16), ("bf16", torch.bfloat16, np.uint16)):
    d = os.path.join(tmp, "tiny-" + dt)
    os.makedirs(d)
    tcfg.to_json_file(os.path.join(d, "config.json"))
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(src, f), d)
    state = {k: v.detach().to(tdt).contiguous() for k, v in mlm.state_dict().items() if v.is_floating_point()}
    we = state["bert.embeddings.word_embeddings.weight"]
    flat = we.view(torch.int16).view(-1)
    flat[:65536] = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)  # every 16-bit pattern
    state["bert.embeddings.position_ids"] = torch.arange(64, dtype=torch.int64)[None]
    state = {k: v.clone() for k, v in state.items()}  # no shared storage (tied decoder weight)
    torch_save(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    dump_path = os.path.join(tmp, dt + ".dump")
    tool("dump", d, dump_path)
    dmp, meta = load_dump(dump_path)
    compare_views(f"{dt} input", dmp, expected_views(state, tcfg.to_dict(), "bert."))
    check(meta["pooling"] == "cls" and meta["normalize"] == "0" and meta["max_seq_len"] == "64",
          f"{dt} input extras: {meta}")

# ---- 4. fp32 -> F16 / BF16 writer on random bit patterns ----
rng = np.random.default_rng(1)
vals = rng.integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
near = (rng.standard_normal(1 << 16) * 10.0 ** rng.integers(-9, 6, 1 << 16)).astype(np.float32)
edge = np.array([65504, 65519, 65520, 65536, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14, 1e-40, -0.0,
                 np.inf, -np.inf, np.nan, 3.4e38, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11], dtype=np.float32)
x = np.concatenate([vals, near, edge])
src_st = os.path.join(tmp, "bits.safetensors")
torch_save({"x": torch.from_numpy(x)}, src_st)
for dt, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
    out = os.path.join(tmp, "bits." + dt)
    tool("convert", src_st, out, dt)
    got = torch_load(out)["x"]
    want = torch.from_numpy(x).to(tdt)
    nan = torch.isnan(got) & torch.isnan(want)
    nbad = int(((got.view(torch.int16) != want.view(torch.int16)) & ~nan).sum())
    check(got.dtype == tdt and nbad == 0, f"fp32 -> {dt}: {nbad} of {x.size} values differ from torch")
    print(f"fp32 -> {dt} writer: {x.size} values, {nbad} differ from torch")

# ---- 5. `qac info --json` agrees with config.json and sentence-transformers ----
qac_bin = os.environ.get("QAC_BIN")
if qac_bin and os.path.exists(qac_bin):
    r = subprocess.run([qac_bin, "info", "--json", "--model", src], capture_output=True, text=True)
    check(r.returncode == 0, f"qac info failed: {r.stderr}")
    info = json.loads(r.stdout)
    for k, v in info["config"].items():
        want = cfg.get(k, "bert" if k == "model_type" else None)
        check(v == want or (isinstance(v, float) and abs(v - want) <= 1e-6 * abs(want)),
              f"qac info config {k}: {v} != {want}")
    pooling = st_src[1].pooling_mode
    check(info["pooling"] == pooling, f"qac info pooling {info['pooling']} != {pooling}")
    check(info["normalize"] is True and info["max_seq_len"] == st_src.max_seq_length, "qac info extras")
    n_hf = sum(v.numel() for k, v in osd.items() if "position_ids" not in k)
    check(info["parameters"] == n_hf, f"qac info parameters {info['parameters']} != transformers {n_hf}")
    check(info["fingerprint"] == meta_default["fingerprint"], "qac info fingerprint differs from the load")
    r = subprocess.run([qac_bin, "info", "--model", os.path.join(tmp, "missing")], capture_output=True, text=True)
    check(r.returncode == 1 and "missing" in r.stderr, f"qac info on a missing dir: rc {r.returncode} {r.stderr}")
    print("qac info --json matches config.json, sentence-transformers and transformers' parameter count")

if failures:
    print(f"{len(failures)} failures")
    sys.exit(1)
print("all checkpoint parity checks passed")
