#!/usr/bin/env python3
"""Writes small, valid seed inputs for the fuzz targets into fuzz/corpus/<target>/.

    ~/kvlm-venv/bin/python tools/make_fuzz_corpus.py   (needs numpy, gguf, tokenizers)
"""
import json
import os
import shutil
import struct

import gguf
import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")
rng = np.random.default_rng(0)


def path(target, name):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    return os.path.join(OUT, target, name)


def safetensors():
    a = rng.standard_normal((4, 8)).astype("<f4").tobytes()
    b = rng.standard_normal((3,)).astype("<f2").tobytes()
    c = (rng.integers(0, 65535, size=5, dtype=np.uint16)).astype("<u2").tobytes()
    hdr = {"__metadata__": {"format": "pt"},
           "a": {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, len(a)]},
           "b": {"dtype": "F16", "shape": [3], "data_offsets": [len(a), len(a) + len(b)]},
           "c": {"dtype": "BF16", "shape": [5], "data_offsets": [len(a) + len(b), len(a) + len(b) + len(c)]}}
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(path("safetensors", "three_tensors.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + a + b + c)
    h2 = json.dumps({"e": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}).encode()
    open(path("safetensors", "empty_tensor.safetensors"), "wb").write(struct.pack("<Q", len(h2)) + h2)


def gguf_files():
    for arch in ("llama", "gpt2"):
        w = gguf.GGUFWriter(path("gguf", f"tiny_{arch}.gguf"), arch)
        w.add_context_length(16)
        w.add_embedding_length(32)
        w.add_block_count(1)
        w.add_feed_forward_length(32)
        w.add_head_count(2)
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + ["\u2581a", "b", "\u2581ab"]
        if arch == "llama":
            w.add_head_count_kv(1)
            w.add_layer_norm_rms_eps(1e-5)
            w.add_tokenizer_model("llama")
            w.add_token_list(tokens)
            w.add_token_scores([0.0] * (len(tokens) - 3) + [-1.0, -2.0, -0.5])
            w.add_token_types([2, 3, 3] + [6] * 256 + [1, 1, 1])
            w.add_string("tokenizer.chat_template", "{{ messages }}")
        else:
            w.add_layer_norm_eps(1e-5)
            w.add_tokenizer_model("gpt2")
            w.add_token_list(["a", "b", "ab", "<|endoftext|>"])
            w.add_token_merges(["a b"])
        w.add_array("general.tags", [1, 2, 3])
        w.add_bool("general.flag", True)
        w.add_float64("general.f64", 1.5)
        w.add_tensor("token_embd.weight", rng.standard_normal((8, 32)).astype(np.float32))
        q = gguf.quants.quantize(rng.standard_normal((4, 32)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor("blk.0.attn_q.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor("blk.0.ffn_norm.weight", rng.standard_normal(32).astype(np.float16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def gguf_row_quants(name="tiny_row_quants.gguf", bad_scales=False):
    """A llama block whose matrices are in every row-quant type (random bytes, sane f16 scales):
    the fuzzer's mutations then reach each block layout. A variant starts it at a case it must
    survive: every f16 scale Inf or NaN, tensor by tensor (bad_scales); fuzz/run.sh adds the file
    cut inside its last super-block."""
    T = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(path("gguf", name), "llama")
    d, vocab = 256, 262
    w.add_context_length(16)
    w.add_embedding_length(d)
    w.add_block_count(1)
    w.add_feed_forward_length(d)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + ["\u2581a", "b", "\u2581ab"]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * (len(tokens) - 3) + [-1.0, -2.0, -0.5])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1, 1, 1])
    scale_offsets = {T.Q4_1: (0, 2), T.Q5_0: (0,), T.Q5_1: (0, 2), T.Q2_K: (80, 82), T.Q3_K: (108,),
                     T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,), T.IQ4_NL: (0,), T.IQ4_XS: (0,), T.MXFP4: ()}

    def blocks(name, rows, cols, qt):  # bad_scales: Inf or NaN as the name's length is even or odd
        per, nbytes = gguf.GGML_QUANT_SIZES[qt]
        b = rng.integers(0, 256, size=(rows * cols // per, nbytes), dtype=np.uint8)
        for off in scale_offsets[qt]:
            d = rng.uniform(-0.02, 0.02, size=len(b)) if not bad_scales else np.full(len(b), [np.inf, np.nan][len(name) % 2])
            b[:, off:off + 2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
        if qt == T.MXFP4:
            b[:, 0] = 120
        b = b.reshape(rows, -1)
        w.add_tensor(name, b, raw_shape=b.shape, raw_dtype=qt)

    kv = d // 2
    blocks("token_embd.weight", vocab, d, T.Q4_1)
    blocks("output.weight", vocab, d, T.MXFP4)
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(d, dtype=np.float32))
    blocks("blk.0.attn_q.weight", d, d, T.Q4_K)
    blocks("blk.0.attn_k.weight", kv, d, T.Q6_K)
    blocks("blk.0.attn_v.weight", kv, d, T.Q5_K)
    blocks("blk.0.attn_output.weight", d, d, T.Q3_K)
    blocks("blk.0.ffn_gate.weight", d, d, T.Q2_K)
    blocks("blk.0.ffn_up.weight", d, d, T.IQ4_XS)
    blocks("blk.0.ffn_down.weight", d, d, T.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def configs():
    for d in sorted(os.listdir(os.path.join(ROOT, "tests", "fixtures"))):
        src = os.path.join(ROOT, "tests", "fixtures", d, "config.json")
        if os.path.exists(src):
            shutil.copy(src, path("config", f"{d}.json"))


def tokenizer_json():
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "tokenizers", "bytelevel_tiny", "tokenizer.json"),
                path("tokenizer_json", "bytelevel.json"))
    sp = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    sp.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    sp.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=80, special_tokens=["<unk>", "<s>", "</s>"])
    sp.train_from_iterator(["once upon a time there was a cat", "the cat sat on the mat"] * 10, trainer)
    sp.save(path("tokenizer_json", "sentencepiece_style.json"))


def llama2c():
    dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 1, 16, 8
    head = dim // heads
    n = vocab * dim + layers * (dim + dim * dim + 2 * kv * head * dim + dim * dim + dim + 3 * hidden * dim) + dim
    n += 2 * seq * head // 2
    data = struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq) + rng.standard_normal(n).astype("<f4").tobytes()
    open(path("llama2c", "tiny.bin"), "wb").write(data)


if __name__ == "__main__":
    safetensors()
    gguf_files()
    gguf_row_quants()
    gguf_row_quants("nan_inf_scales.gguf", bad_scales=True)
    configs()
    tokenizer_json()
    llama2c()
    for t in sorted(os.listdir(OUT)):
        print(t, sorted(os.listdir(os.path.join(OUT, t))))
