#!/usr/bin/env python3
"""Records what llama.cpp's own quantizer writes, for tests/quantize_test.cpp: blocks for f32
values, and whole files for small GGUF inputs.

ggml_quantize_chunk (libggml-base, the function llama-quantize and llama-cpp-python's
llama_model_quantize call per tensor) is called through ctypes, without an importance matrix.
The library comes from the llama.cpp that PyPI's llama-cpp-python 0.3.36 vendors, built natively:

    cmake -S vendor/llama.cpp -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build build
    python3 tools/make_quantize_fixtures.py build/bin/libggml-base.so tests/fixtures/quantize

Writes values.f32 (rows of 512 values: normal, heavy-tailed, all-zero and constant blocks, tiny
and huge magnitudes, one-sided, values already on an f16 grid) and <TYPE>.ggml for each type: the
blocks ggml writes for those rows. Needs numpy alone; CI reads the committed files.

    python3 tools/make_quantize_fixtures.py --files build/bin/llama-quantize tests/fixtures/quantize

writes two small GGUF inputs with the gguf package (llama-f16.gguf: 8 layers, grouped KV heads,
an untied output, rows that fall back from 256-value types to 32-value types and to F16, F32 and
BF16 tensors among the F16 ones, an expert tensor; gpt2-f32.gguf: fused QKV, tied embeddings,
biases, position embeddings), runs llama-quantize on each for every file type kvlm writes, and
records in expected.json each output's size and SHA-256, and each tensor's type and SHA-256 (its
first 16 hex digits).
The tensors' shapes need not make a working model: llama-quantize reads only names, shapes and
the hyperparameters its rules use.
"""
import hashlib
import json
import subprocess
import ctypes
import os
import sys

import numpy as np

N_PER_ROW = 512
# ggml_type numbers (ggml.h)
TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12,
         "Q5_K": 13, "Q6_K": 14, "IQ4_NL": 20, "IQ4_XS": 23, "MXFP4": 39}


def rows():
    rng = np.random.default_rng(20261206)
    out = [
        rng.normal(0, 0.02, N_PER_ROW),                      # a weight matrix's row
        rng.standard_t(2, N_PER_ROW) * 0.05,                 # heavy tails: outliers in blocks
        rng.uniform(-1, 1, N_PER_ROW),
        np.abs(rng.normal(0, 1, N_PER_ROW)),                 # one-sided: mins of zero
        -np.abs(rng.normal(3, 1, N_PER_ROW)),                # one-sided, away from zero
        rng.normal(0, 1e-6, N_PER_ROW),                      # tiny scales
        rng.normal(0, 3e3, N_PER_ROW),                       # large scales
        rng.normal(0, 0.5, N_PER_ROW).astype(np.float16).astype(np.float64),  # an f16 file's values
    ]
    r = rng.normal(0, 1, N_PER_ROW)
    r[:32] = 0                     # an all-zero block and sub-blocks
    r[64:96] = 0.25                # a constant block
    r[256:272] = 0                 # a zero sixteen inside a super-block
    r[300] = 40.0                  # one outlier
    out.append(r)
    r = np.zeros(N_PER_ROW)
    r[::37] = rng.normal(0, 1, len(r[::37]))  # sparse
    out.append(r)
    return np.stack(out).astype(np.float32)


def main(lib_path, out_dir):
    lib = ctypes.CDLL(lib_path)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    os.makedirs(out_dir, exist_ok=True)
    values = np.ascontiguousarray(rows())
    values.tofile(os.path.join(out_dir, "values.f32"))
    nrows = values.shape[0]
    for name, t in TYPES.items():
        size = lib.ggml_row_size(t, N_PER_ROW) * nrows
        dst = ctypes.create_string_buffer(size)
        got = lib.ggml_quantize_chunk(t, values.ctypes.data, dst, 0, nrows, N_PER_ROW, None)
        assert got == size, (name, got, size)
        with open(os.path.join(out_dir, f"{name}.ggml"), "wb") as f:
            f.write(dst.raw)
        print(f"{name}: {size} bytes")


FILE_TYPES = ["Q4_0", "Q4_1", "MXFP4_MOE", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K_S", "Q3_K_M",
              "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32"]


def bf16_bits(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_llama(path, rng):
    import gguf
    def mat(rows, cols, scale=0.05):
        return (rng.standard_t(4, (rows, cols)) * scale).astype(np.float32)
    w = gguf.GGUFWriter(path, "llama")
    n_layer = 8
    w.add_name("kvlm quantize fixture")
    w.add_context_length(256)
    w.add_embedding_length(256)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(64)
    w.add_vocab_size(64)
    w.add_file_type(1)
    w.add_tensor("token_embd.weight", mat(64, 256).astype(np.float16))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", rng.normal(1, 0.1, 256).astype(np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(8, 256).astype(np.float16))
        # layer 2's keys: rows of 100 values (no block divides them: F16) stored as F32
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(4, 100) if i == 2 else mat(4, 256).astype(np.float16))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(4, 256).astype(np.float16))
        w.add_tensor(f"blk.{i}.attn_output.weight", mat(8, 256).astype(np.float16))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", rng.normal(1, 0.1, 256).astype(np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(8, 256).astype(np.float16))
        if i == 3:  # stored as BF16
            w.add_tensor(f"blk.{i}.ffn_up.weight", bf16_bits(mat(8, 256)), raw_shape=(8, 256),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(f"blk.{i}.ffn_up.weight", mat(8, 256).astype(np.float16))
        # layer 1's rows of 288 values: 32-value types only
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(4, 288 if i == 1 else 512).astype(np.float16))
    w.add_tensor("blk.0.ffn_up_exps.weight", (rng.normal(0, 0.05, (4, 2, 256))).astype(np.float16))
    w.add_tensor("output_norm.weight", rng.normal(1, 0.1, 256).astype(np.float32))
    w.add_tensor("output.weight", mat(64, 256).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gpt2(path, rng):
    import gguf
    w = gguf.GGUFWriter(path, "gpt2")
    n_layer = 2
    w.add_context_length(64)
    w.add_embedding_length(256)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(256)
    w.add_head_count(4)
    w.add_layer_norm_eps(1e-5)
    w.add_file_type(0)
    f32 = lambda *shape: rng.normal(0, 0.05, shape).astype(np.float32)
    w.add_tensor("token_embd.weight", f32(48, 256))
    w.add_tensor("position_embd.weight", f32(64, 256))
    for i in range(n_layer):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{norm}.weight", f32(256) + 1)
            w.add_tensor(f"blk.{i}.{norm}.bias", f32(256))
        w.add_tensor(f"blk.{i}.attn_qkv.weight", f32(12, 256))
        w.add_tensor(f"blk.{i}.attn_qkv.bias", f32(12))
        w.add_tensor(f"blk.{i}.attn_output.weight", f32(4, 256))
        w.add_tensor(f"blk.{i}.attn_output.bias", f32(4))
        w.add_tensor(f"blk.{i}.ffn_up.weight", f32(4, 256))
        w.add_tensor(f"blk.{i}.ffn_up.bias", f32(4))
        w.add_tensor(f"blk.{i}.ffn_down.weight", f32(4, 256))
        w.add_tensor(f"blk.{i}.ffn_down.bias", f32(4))
    w.add_tensor("output_norm.weight", f32(256) + 1)
    w.add_tensor("output_norm.bias", f32(256))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def describe(path):
    import gguf
    r = gguf.GGUFReader(path)
    tensors = {t.name: [t.tensor_type.name, hashlib.sha256(t.data.tobytes()).hexdigest()[:16]] for t in r.tensors}
    data = open(path, "rb").read()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "tensors": tensors}


def make_files(quantizer, out_dir):
    rng = np.random.default_rng(20261207)
    inputs = {"llama-f16.gguf": write_llama, "gpt2-f32.gguf": write_gpt2}
    expected = {}
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.abspath(quantizer)))
    for name, write in inputs.items():
        src = os.path.join(out_dir, name)
        write(src, rng)
        expected[name] = {}
        for ft in FILE_TYPES:
            dst = os.path.join(out_dir, f"tmp-{ft}.gguf")
            subprocess.run([quantizer, src, dst, ft], check=True, env=env, capture_output=True)
            expected[name][ft] = describe(dst)
            os.remove(dst)
            print(name, ft, expected[name][ft]["bytes"])
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"), sort_keys=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--files":
        make_files(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3:
        main(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)
