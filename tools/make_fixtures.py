#!/usr/bin/env python3
"""Builds tiny random Hugging Face models and records HF's own outputs for kvlm's conformance tests.

Run in a venv with torch, transformers and gguf (not needed by CI: the outputs are committed):
    python3 -m venv ~/kvlm-venv && ~/kvlm-venv/bin/pip install torch transformers safetensors gguf
    ~/kvlm-venv/bin/python tools/make_fixtures.py tests/fixtures

Llama (GQA, llama3 rope scaling), Mistral (window 8 < the 64-token test sequence) and Qwen2
(q/k/v bias) join GPT-2 and GPT-Neo. Every parameter is randomized, norm weights and biases
included (HF's defaults of 1 and 0 would hide a missing or misplaced norm or bias). Held-out
cases: GPT-2 and GPT-Neo with untied output layers, GPT-2 without the 1/sqrt(d) scale (and with
reorder_and_upcast_attn) and with the inverse-layer scale, Llama with linear rope scaling (also as
a GGUF carrying llama.rope.scaling.*), and half precision: Llama in fp16 safetensors and Llama /
Qwen2 as GGUF F16, whose references are computed in float64 from the same fp16 weights. The Llama and GPT-2 models are also written as GGUF, in F32
and Q8_0, with the PyPI gguf package (q/k rows permuted to llama.cpp's layout, as its converter
does). quants/ holds random blocks of each GGUF quant type and gguf's own dequantization of them
(tools/make_fixtures.py --quants-only writes just those: they need gguf and numpy alone).

For each model it writes <out>/<name>/ (config.json, model.safetensors) and
<out>/<name>/expected.json: the 32-token prompt, HF's greedy continuation of 32 tokens (with the
cache on and off, which must agree), and logits.f32 = HF logits [64][vocab] at every position of
prompt + continuation, teacher-forced in one pass, computed in float64.
"""
import json
import os
import sys

import gguf
import numpy as np

if "--quants-only" not in sys.argv:
    import torch
    import transformers
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
    gpt2 = dict(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4, initializer_range=0.1,
                activation_function="gelu_new", bos_token_id=255, eos_token_id=255)
    yield "gpt2_untied", GPT2LMHeadModel, GPT2Config(tie_word_embeddings=False, **gpt2)
    yield "gpt2_unscaled", GPT2LMHeadModel, GPT2Config(scale_attn_weights=False, reorder_and_upcast_attn=True, **gpt2)
    yield "gpt2_layerscaled", GPT2LMHeadModel, GPT2Config(scale_attn_by_inverse_layer_idx=True, **gpt2)
    yield "gptneo_untied", GPTNeoForCausalLM, GPTNeoConfig(
        vocab_size=256, max_position_embeddings=128, hidden_size=64, num_layers=2, num_heads=4,
        attention_types=[[["global", "local"], 1]], window_size=8, initializer_range=0.1, tie_word_embeddings=False,
        intermediate_size=None, activation_function="gelu_new", bos_token_id=255, eos_token_id=255)
    yield "llama_ropelinear", LlamaForCausalLM, LlamaConfig(
        num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5,
        rope_scaling={"rope_type": "linear", "factor": 2.0}, **common)
    yield "llama_f16", LlamaForCausalLM, LlamaConfig(num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5,
                                                     **common)
    yield "qwen2_f16", Qwen2ForCausalLM, Qwen2Config(num_key_value_heads=2, tie_word_embeddings=False, **common)


def randomize(model):
    """Every parameter random: norm weights around 1, everything else (biases too) around 0."""
    g = torch.Generator().manual_seed(4321)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name or name.startswith("ln_") or "ln_f" in name:
                p.copy_(0.5 + torch.rand(p.shape, generator=g))  # [0.5, 1.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


# fixture -> GGUF files written beside its HF folder
GGUF_FILES = {"llama_tiny": ("F32", "Q8_0"), "gpt2_tiny": ("F32", "Q8_0"), "gpt2_untied": ("F32",),
              "llama_ropelinear": ("F32",), "llama_f16": ("F16",), "qwen2_f16": ("F16",)}


def record_reference(name, model, d):
    """expected.json (prompt, HF's greedy continuation with the cache on and off) and logits.f32 (HF's
    logits at every position of prompt + continuation, teacher-forced in one pass, in float64)."""
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


def main(out_dir):
    for name, cls, cfg in models():
        torch.manual_seed(1234)
        cfg._attn_implementation = "eager"
        model = cls(cfg).eval()
        randomize(model)
        half = name.endswith("_f16")
        # Buffers (RoPE inv_freq) are not weights: .half() would round them too, so keep them.
        buffers = {n: b.clone() for n, b in model.named_buffers()}

        def restore_buffers():
            with torch.no_grad():
                for n, b in model.named_buffers():
                    b.copy_(buffers[n])
        if half:  # the reference is the fp16 model itself, evaluated in float64
            model = model.half().float()
            restore_buffers()
        d = os.path.join(out_dir, name)
        if name == "llama_f16":
            model.half().save_pretrained(d, safe_serialization=True)
            model.float()
            restore_buffers()
        else:
            model.save_pretrained(d, safe_serialization=True)
        if os.path.exists(os.path.join(d, "generation_config.json")):
            os.remove(os.path.join(d, "generation_config.json"))
        if getattr(cfg, "reorder_and_upcast_attn", False):
            # HF's upcast path only runs in float32; it changes precision, not the math. Check that
            # in float32, then compute the float64 reference on the plain path.
            probe = torch.randint(0, 255, (1, 16))
            with torch.no_grad():
                upcast = model(probe).logits
                for mod in model.modules():
                    if hasattr(mod, "reorder_and_upcast_attn"):
                        mod.reorder_and_upcast_attn = False
                plain = model(probe).logits
            assert (upcast - plain).abs().max() < 1e-4, "reorder_and_upcast_attn changed the math"
        record_reference(name, model, d)
        if name in GGUF_FILES:
            sd = {k: v.float().numpy() for k, v in model.state_dict().items()}
            for qtype in GGUF_FILES[name]:
                write_gguf(name, cfg, sd, os.path.join(d, f"model-{qtype}.gguf"), qtype)
    write_quant_references(os.path.join(out_dir, "quants"))


def to_llama_cpp_rows(w, n_head):
    """Undo HF's rotate-half permutation of q/k rows (llama.cpp's convert_hf_to_gguf does this)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(name, cfg, sd, path, qtype):
    arch = "llama" if name.startswith("llama") else "qwen2" if name.startswith("qwen2") else "gpt2"
    w = gguf.GGUFWriter(path, arch)
    tensors = {}
    if arch in ("llama", "qwen2"):
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
        rope_type = rp.get("rope_type", "default")
        if rope_type == "llama3":
            # llama3 scaling travels as per-frequency divisors, like llama.cpp's rope_freqs tensor.
            from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
            inv_scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
            base = 1.0 / (rp.get("rope_theta", 10000.0) ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
            tensors["rope_freqs.weight"] = (base / inv_scaled).numpy().astype(np.float32)
        elif rope_type == "linear":  # as convert_hf_to_gguf.py writes it
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(rp["factor"])
        tensors["token_embd.weight"] = sd["model.embed_tokens.weight"]
        tensors["output_norm.weight"] = sd["model.norm.weight"]
        if "lm_head.weight" in sd and not cfg.tie_word_embeddings:
            tensors["output.weight"] = sd["lm_head.weight"]
        permute = arch == "llama"  # llama.cpp keeps HF's rotate-half rows for qwen2
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
            tensors[f"blk.{i}.attn_norm.weight"] = sd[p + "input_layernorm.weight"]
            tensors[f"blk.{i}.attn_q.weight"] = to_llama_cpp_rows(q, cfg.num_attention_heads) if permute else q
            tensors[f"blk.{i}.attn_k.weight"] = to_llama_cpp_rows(k, cfg.num_key_value_heads) if permute else k
            for b in ("q", "k", "v"):
                if p + f"self_attn.{b}_proj.bias" in sd:
                    tensors[f"blk.{i}.attn_{b}.bias"] = sd[p + f"self_attn.{b}_proj.bias"]
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
        if not cfg.tie_word_embeddings:
            tensors["output.weight"] = sd["lm_head.weight"]
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
        if qtype == "F16" and arr.ndim == 2:  # matrices in F16, norms and biases F32, as llama.cpp writes
            w.add_tensor(tname, arr.astype(np.float16))
        elif qtype == "Q8_0" and arr.ndim == 2 and arr.shape[-1] % 32 == 0:
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
    # (type, byte offsets of f16 scale fields): any other bytes are valid, the scales are made
    # finite and modest. MXFP4's scale is an E8M0 exponent (byte 0): every value is valid, the
    # ends (0, 1, 254, 255) included.
    for qt, scale_offsets in ((T.Q8_0, (0,)), (T.Q4_0, (0,)), (T.Q4_K, (0, 2)), (T.Q6_K, (208,)),
                              (T.Q4_1, (0, 2)), (T.Q5_0, (0,)), (T.Q5_1, (0, 2)), (T.Q2_K, (80, 82)),
                              (T.Q3_K, (108,)), (T.Q5_K, (0, 2)), (T.IQ4_NL, (0,)), (T.IQ4_XS, (0,)),
                              (T.MXFP4, ())):
        nbytes = gguf.GGML_QUANT_SIZES[qt][1]
        blocks = rng.integers(0, 256, size=(8, nbytes), dtype=np.uint8)
        for off in scale_offsets:  # finite, modest scales
            blocks[:, off:off + 2] = rng.uniform(0.001, 0.1, size=8).astype(np.float16).view(np.uint8).reshape(8, 2)
        if qt == T.MXFP4:
            blocks[:4, 0] = (0, 1, 254, 255)
        values = gguf.quants.dequantize(blocks, qt).astype("<f4")
        blocks.tofile(os.path.join(d, f"{qt.name}.bin"))
        values.tofile(os.path.join(d, f"{qt.name}.f32"))
    write_quantize_references(d)


def write_quantize_references(d):
    """Random values and the blocks the gguf package quantizes them to (the from-float direction)."""
    rng = np.random.default_rng(6)
    T = gguf.GGMLQuantizationType
    values = (rng.standard_normal((8, 64)) * rng.uniform(0.01, 3, size=(8, 1))).astype("<f4")
    values[3, :32] = 0  # an all-zero block: scale 0
    values.tofile(os.path.join(d, "quantize_src.f32"))
    for qt in (T.Q8_0, T.Q4_0):
        gguf.quants.quantize(values, qt).tofile(os.path.join(d, f"quantize_{qt.name}.bin"))


if __name__ == "__main__":
    if "--quants-only" in sys.argv:
        args = [a for a in sys.argv[1:] if a != "--quants-only"]
        write_quant_references(os.path.join(args[0] if args else "tests/fixtures", "quants"))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
