#!/usr/bin/env python3
"""Records llama.cpp's logits on one small random model in every file type, for
tests/quant_kld_test.cpp: kvlm's KL divergence from the unquantized logits must be no larger
than llama.cpp's on the same quantized file.

Needs numpy, the gguf package and llama-cpp-python 0.3.36. Its library may come from the native
llama.cpp build beside it (CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" pip install the
sdist, then LLAMA_CPP_LIB_PATH=<llama.cpp build>/bin):

    LLAMA_CPP_LIB_PATH=build/bin python3 tools/make_kld_fixtures.py build/bin/llama-quantize tests/fixtures/kld

Writes model-F16.gguf (llama: hidden 256, one layer of 4 query heads sharing one KV head, an
SPM vocabulary of 3 specials and 256 byte tokens; every weight random, norms included; logits
spread over several units so their distributions are far from uniform), ids.json (the 256 token
ids every run scores), llama-F16.f32 (llama.cpp's logits [256][259] on the unquantized file) and
expected.json: per file type, llama.cpp's mean KL divergence from those logits and how often
its top-1 agrees.
"""
import json
import os
import subprocess
import sys

import numpy as np

TYPES = ["Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1", "Q4_0", "IQ4_XS", "IQ4_NL",
         "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K"]
N_TOKENS = 256


def write_model(path, rng):
    import gguf
    hidden, ffn, heads, kv_heads, head_dim = 256, 256, 4, 1, 64
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    vocab = len(tokens)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("kvlm kld fixture")
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_block_count(1)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_file_type(1)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([2, 3, 3] + [6] * 256)  # unknown, control x2, byte
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    f16 = lambda shape, std: rng.normal(0, std, shape).astype(np.float16)
    norm = lambda: rng.normal(1, 0.2, hidden).astype(np.float32)
    w.add_tensor("token_embd.weight", f16((vocab, hidden), 1.0))
    w.add_tensor("blk.0.attn_norm.weight", norm())
    w.add_tensor("blk.0.attn_q.weight", f16((heads * head_dim, hidden), 0.08))
    w.add_tensor("blk.0.attn_k.weight", f16((kv_heads * head_dim, hidden), 0.08))
    w.add_tensor("blk.0.attn_v.weight", f16((kv_heads * head_dim, hidden), 0.08))
    w.add_tensor("blk.0.attn_output.weight", f16((hidden, heads * head_dim), 0.06))
    w.add_tensor("blk.0.ffn_norm.weight", norm())
    w.add_tensor("blk.0.ffn_gate.weight", f16((ffn, hidden), 0.06))
    w.add_tensor("blk.0.ffn_up.weight", f16((ffn, hidden), 0.06))
    w.add_tensor("blk.0.ffn_down.weight", f16((hidden, ffn), 0.06))
    w.add_tensor("output_norm.weight", norm())
    w.add_tensor("output.weight", f16((vocab, hidden), 0.3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_logits(path, ids):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)
    llm.eval(ids)
    out = np.array(llm.scores[:len(ids)], dtype=np.float32)
    llm.close()
    return out


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main(quantizer, out_dir):
    rng = np.random.default_rng(20261208)
    os.makedirs(out_dir, exist_ok=True)
    model = os.path.join(out_dir, "model-F16.gguf")
    write_model(model, rng)
    ids = [1] + [int(i) for i in rng.integers(3, 259, N_TOKENS - 1)]
    with open(os.path.join(out_dir, "ids.json"), "w") as f:
        json.dump(ids, f)
    ref = llama_logits(model, ids)
    ref.tofile(os.path.join(out_dir, "llama-F16.f32"))
    lp = log_softmax(ref)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.abspath(quantizer)))
    expected = {}
    for t in TYPES:
        q = os.path.join(out_dir, f"tmp-{t}.gguf")
        subprocess.run([quantizer, model, q, t], check=True, env=env, capture_output=True)
        got = llama_logits(q, ids)
        os.remove(q)
        lq = log_softmax(got)
        kl = (np.exp(lp) * (lp - lq)).sum(axis=-1)
        top1 = float((ref.argmax(-1) == got.argmax(-1)).mean())
        expected[t] = {"kld_mean": float(kl.mean()), "kld_max": float(kl.max()), "top1": top1}
        print(f"{t:7s} KLD mean {kl.mean():.6f} max {kl.max():.6f} top-1 {top1:.3f}")
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
