#!/usr/bin/env python3
"""Reference side of bench/encode_int8: sentence-transformers with the ONNX
Runtime and OpenVINO backends, fp32 and int8, as a user serving embeddings on
a CPU would run them. Runs in its own environment (not the repository's):

    python3 -m venv ~/venv-cpubench
    ~/venv-cpubench/bin/pip install "sentence-transformers[onnx,openvino]==5.7.0" optimum-onnx==0.1.0 \\
        optimum-intel==1.27.0 optimum==2.1.0 onnxruntime==1.32.0 openvino==2026.4.1 nncf==3.4.0 \\
        transformers==4.57.6 torch==2.15.0 "datasets<4.4" huggingface-hub==0.36.2

(sentence-transformers 6 needs transformers 5, which optimum-onnx does not
support yet; 5.7.0 is the newest that installs with both backends.)

Backends:
  onnx fp32      SentenceTransformer(dir, backend="onnx"): optimum's export,
                 ONNX Runtime's CPU provider and its default graph optimisations
  onnx int8      export_dynamic_quantized_onnx_model(model, "avx512_vnni"):
                 dynamic quantisation (int8 weights, uint8 activations with a
                 per-tensor scale computed at run time) for AVX512-VNNI
  openvino fp32  SentenceTransformer(dir, backend="openvino")
  openvino int8  export_static_quantized_openvino_model(model,
                 OVQuantizationConfig()): NNCF post-training static
                 quantisation, calibrated on CALIB (a JSONL folder of texts;
                 the default would download GLUE/SST-2, and this runs offline)
Both run with THREADS intra-op threads (ONNX Runtime's intra_op_num_threads,
OpenVINO's INFERENCE_NUM_THREADS). Exports are made once into CACHE and reused.

Modes: passages (encode(texts, batch_size=BATCH), throughput) and queries
(encode([text]) one at a time: the latency a single request sees).
Prints one line: "<backend> <dtype> ... passages_per_s=<r> cpu_passages_per_s=<c>
ms_per_text=<m> peak_rss_mib=<m>".
With --dump OUT.npy it writes the normalised embeddings of the texts in
their order instead of timing (the accuracy study).

Usage: ref_backends.py --model DIR --backend onnx|openvino --dtype fp32|int8
       --texts FILE (one text a line) --runs MAX_LEN:BATCH:N[,...] --threads T
       --cache DIR [--calib DIR] [--dump OUT.npy]
       ref_backends.py make-bertbase OUT_DIR TOKENIZER_DIR
(the second form saves a BERT-base-shaped sentence-transformers model,
random weights from transformers' own initialisation with seed 0, mean
pooling, normalised, with the given model's tokenizer)"""
import argparse
import os
import resource
import shutil
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load(args):
    from sentence_transformers import SentenceTransformer
    name = os.path.basename(os.path.normpath(args.model))
    base = os.path.join(args.cache, f"{name}-{args.backend}")
    if not os.path.isdir(base):  # the fp32 export, once
        m = SentenceTransformer(args.model, device="cpu", backend=args.backend)
        m.save(base + ".tmp")
        os.replace(base + ".tmp", base)
    if args.backend == "onnx":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        kw = {"session_options": so, "provider": "CPUExecutionProvider"}
        file_name = "onnx/model.onnx"
        if args.dtype == "int8":
            file_name = "onnx/model_qint8_avx512_vnni.onnx"
            if not os.path.exists(os.path.join(base, file_name)):
                from sentence_transformers import export_dynamic_quantized_onnx_model
                m = SentenceTransformer(base, device="cpu", backend="onnx")
                export_dynamic_quantized_onnx_model(m, "avx512_vnni", base)
        kw["file_name"] = file_name
    else:
        kw = {"ov_config": {"INFERENCE_NUM_THREADS": str(args.threads)}}
        file_name = "openvino/openvino_model.xml"
        if args.dtype == "int8":
            file_name = "openvino/openvino_model_qint8_quantized.xml"
            if not os.path.exists(os.path.join(base, file_name)):
                if not args.calib:
                    sys.exit("ref_backends.py: OpenVINO int8 needs --calib (a folder with train.jsonl of {\"text\": ...})")
                from optimum.intel import OVQuantizationConfig
                from sentence_transformers import export_static_quantized_openvino_model
                m = SentenceTransformer(base, device="cpu", backend="openvino")
                export_static_quantized_openvino_model(m, OVQuantizationConfig(), base, dataset_name=args.calib,
                                                       dataset_config_name="default", dataset_split="train",
                                                       column_name="text")
        kw["file_name"] = file_name
    model = SentenceTransformer(base, device="cpu", backend=args.backend, model_kwargs=kw)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", choices=["onnx", "openvino"], required=True)
    ap.add_argument("--dtype", choices=["fp32", "int8"], required=True)
    ap.add_argument("--texts", required=True)
    ap.add_argument("--runs", default="128:64:512")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--calib")
    ap.add_argument("--dump")
    args = ap.parse_args()
    texts = [t.rstrip("\n") for t in open(args.texts, encoding="utf-8")]
    model = load(args)
    if args.dump:
        import numpy as np
        max_len, batch, _ = (int(x) for x in args.runs.split(",")[0].split(":"))
        model.max_seq_length = max_len
        e = model.encode(texts, batch_size=batch, convert_to_numpy=True, normalize_embeddings=True)
        np.save(args.dump, e.astype(np.float32))
        return
    for spec in args.runs.split(","):
        max_len, batch, n = (int(x) for x in spec.split(":"))
        model.max_seq_length = max_len
        ts = [texts[i % len(texts)] for i in range(n)]
        if batch == 1:
            def run(xs):
                for t in xs:
                    model.encode([t], batch_size=1, convert_to_numpy=True)
        else:
            def run(xs):
                model.encode(xs, batch_size=batch, convert_to_numpy=True)
        run(ts[:2 * batch if batch > 1 else 8])  # warm-up
        t0, c0 = time.perf_counter(), time.process_time()
        run(ts)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print(f"{args.backend} {args.dtype} max_len={max_len} batch={batch} texts={n} seconds={dt:.3f} "
              f"passages_per_s={n / dt:.2f} cpu_passages_per_s={n / cpu:.2f} ms_per_text={1000 * dt / n:.3f} "
              f"peak_rss_mib={rss:.1f}", flush=True)


def make_bertbase(out, tokenizer_dir):
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel
    torch.manual_seed(0)
    tmp = out + ".hf"
    BertModel(BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, max_position_embeddings=512), add_pooling_layer=False).save_pretrained(tmp)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(tmp)
    word = models.Transformer(tmp, max_seq_length=512)
    st = SentenceTransformer(modules=[word, models.Pooling(768, "mean"), models.Normalize()], device="cpu")
    st.save(out + ".tmp")
    shutil.rmtree(tmp)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make-bertbase":
        make_bertbase(sys.argv[2], sys.argv[3])
    else:
        main()
