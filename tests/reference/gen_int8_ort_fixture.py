#!/usr/bin/env python3
"""The tolerance of qac's int8 encoder test (tests/encoder/test_encoder_int8.c):
how far ONNX Runtime's int8 model of the default model lands from the fp32
reference on the same token ids.

For every text of tests/reference/encoder/minilm.bin (Cranfield documents at
256 and 128 tokens, and the synthetic batch of lengths 1..256), it runs the
model sentence-transformers exports for int8 on a CPU with VNNI
(export_dynamic_quantized_onnx_model(model, "avx512_vnni"): int8 weights,
uint8 activations with a per-tensor scale computed at run time, ONNX
Runtime's MLAS kernels), mean-pools and normalises as the model does, and
stores the cosine to the fixture's sentence-transformers fp32 embedding.
The C test requires qac's int8 encoder to stay at least that close: its
mean and its largest deviation (1 - cosine) per set no larger than ONNX
Runtime's.

Output: tests/reference/encoder/minilm_ort_int8.bin, little-endian:
  char[8] "QACORT01"; int32 n_sets; per set: int32 n; float32 cos[n]

It needs ONNX Runtime and optimum, which the test environment does not
have: run it from the benchmark environment of bench/encode_int8
(ref_backends.py's docstring has the install line):
  ~/venv-cpubench/bin/python tests/reference/gen_int8_ort_fixture.py [--model DIR] [--work DIR]
"""
import argparse
import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def read_fixture(path):
    """The sets of minilm.bin: (ids per text, fp32 embeddings [n, C])."""
    b = open(path, "rb").read()
    assert b[:8] == b"QACENCF1", path
    L, C, n_sets = struct.unpack_from("<3i", b, 8)
    off, sets = 20, []
    for _ in range(n_sets):
        max_len, n, is_docs = struct.unpack_from("<3i", b, off)
        off += 12 + 4 * n  # the ordinals
        lens = np.frombuffer(b, "<i4", n, off)
        off += 4 * n
        flat = np.frombuffer(b, "<i4", int(lens.sum()), off)
        off += 4 * int(lens.sum())
        emb = np.frombuffer(b, "<f4", n * C, off).reshape(n, C)
        off += 4 * n * C
        ids, at = [], 0
        for ln in lens:
            ids.append(flat[at:at + ln].astype(np.int64))
            at += ln
        sets.append((ids, emb))
    return sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.local/share/qac/models/all-MiniLM-L6-v2"))
    ap.add_argument("--work", help="where the ONNX exports go (default: a temporary folder)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model
    work = args.work or tempfile.mkdtemp(prefix="qac-ort-")
    base = os.path.join(work, "minilm-onnx")
    if not os.path.isdir(base):
        SentenceTransformer(args.model, device="cpu", backend="onnx").save(base)
    q = os.path.join(base, "onnx", "model_qint8_avx512_vnni.onnx")
    if not os.path.exists(q):
        export_dynamic_quantized_onnx_model(SentenceTransformer(base, device="cpu", backend="onnx"), "avx512_vnni", base)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(q, so, providers=["CPUExecutionProvider"])
    fp32 = ort.InferenceSession(os.path.join(base, "onnx", "model.onnx"), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    sets = read_fixture(os.path.join(HERE, "encoder", "minilm.bin"))
    out = []
    for ids, emb in sets:
        cos = []
        for x, ref in zip(ids, emb):  # one text at a time: no padding, no batch effects
            feed = {"input_ids": x[None], "attention_mask": np.ones_like(x)[None]}
            if "token_type_ids" in names:
                feed["token_type_ids"] = np.zeros_like(x)[None]

            def embed(s):
                v = s.run(None, feed)[0][0].mean(0)  # mean of the last hidden state [T, C]
                return v / max(np.linalg.norm(v), 1e-12)
            # the same ids, pooling and normalisation through the fp32 export: the pipeline is the fixture's
            c32 = float(np.dot(embed(fp32), ref) / np.linalg.norm(ref))
            if c32 < 0.99999:
                sys.exit(f"the fp32 export is {c32:.6f} from the fixture: not the same model or inputs")
            cos.append(float(np.dot(embed(sess), ref) / np.linalg.norm(ref)))
        cos = np.asarray(cos, dtype=np.float32)
        print(f"set of {len(ids)}: ONNX Runtime int8 vs fp32 cosine mean {cos.mean():.6f} min {cos.min():.6f}",
              file=sys.stderr)
        out.append(cos)
    path = os.path.join(HERE, "encoder", "minilm_ort_int8.bin")
    with open(path + ".tmp", "wb") as f:
        f.write(b"QACORT01" + struct.pack("<i", len(out)))
        for cos in out:
            f.write(struct.pack("<i", len(cos)) + cos.astype("<f4").tobytes())
    os.replace(path + ".tmp", path)
    print(f"wrote {path} (onnxruntime {ort.__version__})", file=sys.stderr)


if __name__ == "__main__":
    main()
