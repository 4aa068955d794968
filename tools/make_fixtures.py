#!/usr/bin/env python3
"""Builds tiny random Hugging Face models and records HF's own outputs for kvlm's conformance tests.

Run in a venv with torch, transformers and gguf (not needed by CI: the outputs are committed):
    python3 -m venv ~/kvlm-venv && ~/kvlm-venv/bin/pip install torch transformers safetensors gguf
    ~/kvlm-venv/bin/python tools/make_fixtures.py tests/fixtures

Llama (GQA, llama3 rope scaling), Mistral (window 8 < the 64-token test sequence) and Qwen2
(q/k/v bias) join GPT-2 and GPT-Neo. The Llama and GPT-2 models are also written as GGUF, in F32
and Q8_0, with the PyPI gguf package (q/k rows permuted to llama.cpp's layout, as its converter
does). quants/ holds random blocks of each GGUF quant type and gguf's own dequantization of them.

For each model it writes <out>/<name>/ (config.json, model.safetensors) and
<out>/<name>/expected.json: the 32-token prompt, HF's greedy continuation of 32 tokens (with the
cache on and off, which must agree), and logits.f32 = HF logits [64][vocab] at every position of
prompt + continuation, teacher-forced in one pass, computed in float64.
"""
import json
import os
import sys

import torch
import transformers
import gguf
import numpy as np
from transformers import (GPT2Config, GPT2LMHeadModel, GPTNeoConfig, GPTNeoForCausalLM, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

PROMPT_LEN = 32
NEW_TOKENS = 32


def models():
    yield "gpt2_tiny", GPT2LMHeadModel, GPT2Config(
        vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4, initializer_range=0.1,
        activation_function="gelu_new", bos_token_id=255, eos_token_id=255)
    # Local layers see 8 positions; the 64-token test sequence runs far past the window.
    yield "gptneo_tiny", GPTNeoForCausalLM, GPTNeoConfig(
        vocab_size=256, max_position_embeddings=128, hidden_size=64, num_layers=2, num_heads=4,
        attention_types=[[["global", "local"], 1]], window_size=8, initializer_range=0.1,
        intermediate_size=None, activation_function="gelu_new", bos_token_id=255, eos_token_id=255)
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=128, initializer_range=0.1, bos_token_id=1, eos_token_id=2)
    yield "llama_tiny", LlamaForCausalLM, LlamaConfig(
        num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 32}, **common)
    yield "mistral_tiny", MistralForCausalLM, MistralConfig(num_key_value_heads=2, sliding_window=8, **common)
    yield "qwen2_tiny", Qwen2ForCausalLM, Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **common)


def main(out_dir):
    for name, cls, cfg in models():
        torch.manual_seed(1234)
        cfg._attn_implementation = "eager"
        model = cls(cfg).eval()
        d = os.path.join(out_dir, name)
        model.save_pretrained(d, safe_serialization=True)
        g = torch.Generator().manual_seed(99)
        prompt = torch.randint(0, 255, (1, PROMPT_LEN), generator=g)
        with torch.no_grad():
            runs = {}
            for use_cache in (True, False):
                out = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, use_cache=use_cache,
                                     pad_token_id=255, eos_token_id=None)
                runs[use_cache] = out[0, PROMPT_LEN:].tolist()
            assert runs[True] == runs[False], f"{name}: HF greedy differs with use_cache"
            full = torch.cat([prompt[0], torch.tensor(runs[True])]).unsqueeze(0)
            # Reference logits in float64, so the tolerance measures kvlm's f32 error alone.
            logits = model.double()(full).logits[0]
            assert logits[PROMPT_LEN - 1:-1].argmax(-1).tolist() == runs[True], f"{name}: f64 greedy differs"
            logits = logits.float()
        top2 = logits.topk(2, dim=-1).values
        gap = float((top2[:, 0] - top2[:, 1]).min())
        logits.numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump({"prompt_ids": prompt[0].tolist(), "greedy_ids": runs[True], "logits_file": "logits.f32",
                       "logits_shape": list(logits.shape), "min_top1_top2_gap": gap,
                       "transformers": transformers.__version__, "torch": torch.__version__}, f, indent=1)
        print(f"{name}: {sum(p.numel() for p in model.parameters())} params, min top-2 gap {gap:.4f}")
        if name in ("llama_tiny", "gpt2_tiny"):
            sd = {k: v.float().numpy() for k, v in cls.from_pretrained(d).state_dict().items()}
            for qtype in ("F32", "Q8_0"):
                write_gguf(name, cfg, sd, os.path.join(d, f"model-{qtype}.gguf"), qtype)
    write_quant_references(os.path.join(out_dir, "quants"))


def to_llama_cpp_rows(w, n_head):
    """Undo HF's rotate-half permutation of q/k rows (llama.cpp's convert_hf_to_gguf does this)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(name, cfg, sd, path, qtype):
    arch = "llama" if name.startswith("llama") else "gpt2"
    w = gguf.GGUFWriter(path, arch)
    tensors = {}
    if arch == "llama":
        w.add_context_length(cfg.max_position_embeddings)
        w.add_embedding_length(cfg.hidden_size)
        w.add_block_count(cfg.num_hidden_layers)
        w.add_feed_forward_length(cfg.intermediate_size)
        w.add_head_count(cfg.num_attention_heads)
        w.add_head_count_kv(cfg.num_key_value_heads)
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
        rp = getattr(cfg, "rope_parameters", None) or {}
        w.add_rope_freq_base(rp.get("rope_theta", 10000.0))
        w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
        # llama3 scaling travels as per-frequency divisors, like llama.cpp's rope_freqs tensor.
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        inv_scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
        base = 1.0 / (rp.get("rope_theta", 10000.0) ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
        tensors["rope_freqs.weight"] = (base / inv_scaled).numpy().astype(np.float32)
        tensors["token_embd.weight"] = sd["model.embed_tokens.weight"]
        tensors["output_norm.weight"] = sd["model.norm.weight"]
        tensors["output.weight"] = sd["lm_head.weight"]
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            tensors[f"blk.{i}.attn_norm.weight"] = sd[p + "input_layernorm.weight"]
            tensors[f"blk.{i}.attn_q.weight"] = to_llama_cpp_rows(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads)
            tensors[f"blk.{i}.attn_k.weight"] = to_llama_cpp_rows(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads)
            tensors[f"blk.{i}.attn_v.weight"] = sd[p + "self_attn.v_proj.weight"]
            tensors[f"blk.{i}.attn_output.weight"] = sd[p + "self_attn.o_proj.weight"]
            tensors[f"blk.{i}.ffn_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
            tensors[f"blk.{i}.ffn_gate.weight"] = sd[p + "mlp.gate_proj.weight"]
            tensors[f"blk.{i}.ffn_up.weight"] = sd[p + "mlp.up_proj.weight"]
            tensors[f"blk.{i}.ffn_down.weight"] = sd[p + "mlp.down_proj.weight"]
    else:
        w.add_context_length(cfg.n_positions)
        w.add_embedding_length(cfg.n_embd)
        w.add_block_count(cfg.n_layer)
        w.add_feed_forward_length(4 * cfg.n_embd)
        w.add_head_count(cfg.n_head)
        w.add_layer_norm_eps(cfg.layer_norm_epsilon)
        pre = "transformer." if "transformer.wte.weight" in sd else ""
        tensors["token_embd.weight"] = sd[pre + "wte.weight"]
        tensors["position_embd.weight"] = sd[pre + "wpe.weight"]
        tensors["output_norm.weight"] = sd[pre + "ln_f.weight"]
        tensors["output_norm.bias"] = sd[pre + "ln_f.bias"]
        for i in range(cfg.n_layer):
            p = f"{pre}h.{i}."
            for ours, theirs in (("attn_norm", "ln_1"), ("ffn_norm", "ln_2")):
                tensors[f"blk.{i}.{ours}.weight"] = sd[p + theirs + ".weight"]
                tensors[f"blk.{i}.{ours}.bias"] = sd[p + theirs + ".bias"]
            # Conv1D stores [in][out]; GGUF holds nn.Linear's [out][in].
            for ours, theirs in (("attn_qkv", "attn.c_attn"), ("attn_output", "attn.c_proj"), ("ffn_up", "mlp.c_fc"),
                                 ("ffn_down", "mlp.c_proj")):
                tensors[f"blk.{i}.{ours}.weight"] = np.ascontiguousarray(sd[p + theirs + ".weight"].T)
                tensors[f"blk.{i}.{ours}.bias"] = sd[p + theirs + ".bias"]
    for tname, arr in tensors.items():
        arr = np.ascontiguousarray(arr.astype(np.float32))
        if qtype == "Q8_0" and arr.ndim == 2 and arr.shape[-1] % 32 == 0:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_quant_references(d):
    """Random blocks of each quant type, and what the gguf package dequantizes them to."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(5)
    T = gguf.GGMLQuantizationType
    # (type, block bytes, byte offsets of f16 scale fields)
    for qt, nbytes, scale_offsets in ((T.Q8_0, 34, (0,)), (T.Q4_0, 18, (0,)), (T.Q4_K, 144, (0, 2)),
                                      (T.Q6_K, 210, (208,))):
        blocks = rng.integers(0, 256, size=(8, nbytes), dtype=np.uint8)
        for off in scale_offsets:  # finite, modest scales
            blocks[:, off:off + 2] = rng.uniform(0.001, 0.1, size=8).astype(np.float16).view(np.uint8).reshape(8, 2)
        values = gguf.quants.dequantize(blocks, qt).astype("<f4")
        blocks.tofile(os.path.join(d, f"{qt.name}.bin"))
        values.tofile(os.path.join(d, f"{qt.name}.f32"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
