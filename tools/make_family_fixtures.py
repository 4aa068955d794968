#!/usr/bin/env python3
"""Fixtures for the model families added on the forward-from-ops design: a tiny random Hugging Face
model per case (every parameter random, norms and biases included; config keys off their
defaults), HF's float64 reference (make_fixtures.record_reference), and GGUF files written by
llama.cpp's own converter (convert_hf_to_gguf.py from llama-cpp-python's source distribution) in
F32 and Q8_0. The tiny models have no real tokenizer, so the converter's vocabulary step is
replaced by its own _set_vocab_none: tensors and arithmetic metadata are the converter's.

Run in a venv with torch, transformers, numpy and sentencepiece (not needed by CI: the outputs
are committed):
    ~/venv/bin/python tools/make_family_fixtures.py tests/fixtures \
        --llama-cpp /root/dl/llama_cpp_python-0.3.36/vendor/llama.cpp
"""
import argparse
import importlib
import json
import os
import subprocess
import sys

if len(sys.argv) == 5 and sys.argv[1] == "--convert":  # the converter's own gguf-py, not PyPI's
    sys.path[:0] = [sys.argv[4], os.path.join(sys.argv[4], "gguf-py")]

import torch  # noqa: E402
import transformers as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import randomize, record_reference  # noqa: E402

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=128, initializer_range=0.1, bos_token_id=1, eos_token_id=2)


def cases():
    """name -> (config, GGUF types the converter writes)."""
    # head_dim 24 is not hidden/heads (16); theta, eps and the biases are off their defaults.
    yield "qwen3_tiny", tf.Qwen3Config(num_key_value_heads=2, head_dim=24, rope_theta=5000.0, rms_norm_eps=1e-5,
                                       attention_bias=True, tie_word_embeddings=False, **COMMON), ("f32", "q8_0")
    # Layer 1 slides over 8 positions (the 64-token sequence runs far past it). llama.cpp's qwen3
    # has no windows and its converter drops them, so this case is HF only.
    yield "qwen3_window", tf.Qwen3Config(num_key_value_heads=1, use_sliding_window=True, sliding_window=8,
                                         max_window_layers=1, tie_word_embeddings=True, **COMMON), ()
    # Layer 3 of 4 has no positional encoding (llama.cpp's smollm3 assumes every 4th).
    layers4 = dict(COMMON, num_hidden_layers=4, pad_token_id=0)
    yield "smollm3_tiny", tf.SmolLM3Config(num_key_value_heads=2, rope_theta=20000.0, rms_norm_eps=1e-5,
                                           tie_word_embeddings=False, **layers4), ("f32", "q8_0")
    # Every multiplier off 1 (and the score scale off 1/sqrt(head_dim)).
    yield "granite_tiny", tf.GraniteConfig(num_key_value_heads=2, rope_theta=30000.0, rms_norm_eps=1e-5,
                                           embedding_multiplier=3.0, residual_multiplier=0.7, attention_multiplier=0.3,
                                           logits_scaling=2.5, tie_word_embeddings=False, **COMMON), ("f32", "q8_0")
    yield "olmo2_tiny", tf.Olmo2Config(num_key_value_heads=2, rope_theta=40000.0, rms_norm_eps=1e-5,
                                       tie_word_embeddings=False, **dict(COMMON, pad_token_id=0)), ("f32", "q8_0")
    # transformers' default OLMo 3 pattern: layers 0-2 slide over 12 positions, layer 3 is global.
    # Sliding and full layers with their own RoPE bases.
    yield "olmo3_tiny", tf.Olmo3Config(num_key_value_heads=1, sliding_window=12, rms_norm_eps=1e-6,
                                       rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 3000.0},
                                                        "full_attention": {"rope_type": "default", "rope_theta": 70000.0}},
                                       tie_word_embeddings=True, **layers4), ("f32",)
    # Soft caps low enough to bite (scores and logits reach a few units here); 8-position windows
    # on every other layer; query_pre_attn_scalar equal to head_dim (llama.cpp's GGUF reading
    # derives the score scale from the model's size), and off it in the HF-only case. The Gemma 2
    # converter writes no RoPE base (llama.cpp takes 10000), so only the HF-only case moves it.
    gemma = dict(COMMON, pad_token_id=0, num_key_value_heads=2, head_dim=24, sliding_window=8, rms_norm_eps=1e-5)
    yield "gemma2_tiny", tf.Gemma2Config(query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
                                         final_logit_softcapping=5.0, **gemma), ("f32", "q8_0")
    yield "gemma2_scalar", tf.Gemma2Config(query_pre_attn_scalar=40, attn_logit_softcapping=1.5,
                                           final_logit_softcapping=4.0, rope_theta=20000.0,
                                           **dict(gemma, num_hidden_layers=4)), ()
    # Six layers: five slide with their own RoPE base, the sixth is global with linear scaling.
    yield "gemma3_tiny", tf.Gemma3TextConfig(
        query_pre_attn_scalar=24, rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 50000.0}},
        **dict(gemma, num_hidden_layers=6)), ("f32", "q8_0")
    # Half of each head rotates; one 8-position window for every layer.
    yield "phi3_tiny", tf.Phi3Config(num_key_value_heads=2, partial_rotary_factor=0.5, sliding_window=8,
                                     rope_theta=15000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                     **dict(COMMON, pad_token_id=0)), ("f32", "q8_0")
    # 6 of each head's 16 values rotate; every bias random, the LM head's too; llama.cpp's
    # converter assumes an MLP 4x wide, as Phi-2's is, and writes no RoPE base (10000).
    phi = dict(COMMON, intermediate_size=256, num_key_value_heads=4, partial_rotary_factor=0.4, layer_norm_eps=1e-4,
               tie_word_embeddings=False, hidden_act="gelu_new")
    yield "phi2_tiny", tf.PhiConfig(**phi), ("f32", "q8_0")
    yield "phi2_qknorm", tf.PhiConfig(qk_layernorm=True, rope_theta=12000.0, **dict(phi, num_key_value_heads=2)), ()
    # A quarter of each head rotates; q/k biases; the sequential block and the parallel one, this
    # with per-head q/k norms of each head's own weights (HF only: llama.cpp's converter of
    # 2026-10 stacks those norms in a generator it returns from another, so converts none; nor
    # does it write a RoPE base, so only the HF case moves it off 10000).
    slm = dict(COMMON, num_key_value_heads=2, partial_rotary_factor=0.25, layer_norm_eps=1e-4,
               use_qkv_bias=True, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    yield "stablelm_tiny", tf.StableLmConfig(use_parallel_residual=False, **slm), ("f32", "q8_0")
    yield "stablelm_parallel", tf.StableLmConfig(use_parallel_residual=True, qk_layernorm=True, rope_theta=25000.0,
                                                 **slm), ()
    # Four experts, two per token. No window, as Mixtral's own config (llama.cpp's converter writes
    # Mixtral as "llama" and drops one).
    yield "mixtral_tiny", tf.MixtralConfig(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                                           rope_theta=20000.0, rms_norm_eps=1e-5,
                                           tie_word_embeddings=False, **COMMON), ("f32", "q8_0")
    # Eight experts of width 48, three per token, their weights renormalized (llama.cpp always does).
    moe = dict(COMMON, num_key_value_heads=2, head_dim=24, num_experts=8, moe_intermediate_size=48,
               rms_norm_eps=1e-5, rope_theta=30000.0, tie_word_embeddings=False)
    yield "qwen3moe_tiny", tf.Qwen3MoeConfig(num_experts_per_tok=3, norm_topk_prob=True, **moe), ("f32", "q8_0")
    # HF only: weights not renormalized, every 2nd layer sparse and layer 3 dense anyway (so layers
    # 0, 2 and 3 have the dense MLP of intermediate_size), an 8-position window on every layer.
    yield "qwen3moe_sparse", tf.Qwen3MoeConfig(num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=2,
                                               mlp_only_layers=[3], use_sliding_window=True, sliding_window=8,
                                               **dict(moe, num_hidden_layers=4)), ()
    # Sliding (8 positions) and full layers alternating; YaRN over an original context of 16, so
    # the 64-token sequence runs well past it, its band ending between pairs 3 and 4 (so rounding
    # it outward, truncate, would change the frequencies); the gate's clamp low enough to bite; 8 experts, 2
    # per token. HF only.
    yield "gptoss_tiny", tf.GptOssConfig(
        num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
        swiglu_limit=0.6, swiglu_alpha=1.5, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 20000.0, "factor": 4.0, "beta_fast": 4.0,
                         "beta_slow": 0.05, "truncate": False, "original_max_position_embeddings": 16},
        **dict(COMMON, num_hidden_layers=4)), ()
    # DeepSeek-V3's latent attention and routing, HF only: q through its low-rank pair, YaRN over an
    # original context of 16 with mscale off mscale_all_dim (so both score factors move), 8
    # experts in 4 groups of which 2 are kept, 2 per token, a shared expert, layer 0 dense.
    mla = dict(COMMON, num_hidden_layers=3, num_key_value_heads=4, kv_lora_rank=48, qk_rope_head_dim=16,
               qk_nope_head_dim=16, v_head_dim=24, moe_intermediate_size=32, n_routed_experts=8,
               num_experts_per_tok=2, rms_norm_eps=1e-5, tie_word_embeddings=False)
    yield "deepseek3_tiny", tf.DeepseekV3Config(
        q_lora_rank=32, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
        routed_scaling_factor=2.5, norm_topk_prob=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 20000.0, "factor": 4.0, "mscale": 0.8,
                         "mscale_all_dim": 0.6, "original_max_position_embeddings": 16}, **mla), ()
    # Queries straight (no q_lora_rank), rotate-half RoPE, one group, weights not renormalized, two
    # shared experts' width, every layer MoE.
    yield "deepseek3_plain", tf.DeepseekV3Config(
        q_lora_rank=None, rope_interleave=False, n_group=1, topk_group=1, n_shared_experts=2, first_k_dense_replace=0,
        routed_scaling_factor=1.5, norm_topk_prob=False, rope_theta=30000.0, **mla), ()
    # The same family as llama.cpp runs it: its gate constants (alpha 1.702, limit 7) and YaRN band
    # rounded outward (truncate), which llama.cpp's gpt-oss assumes; then GGUF too.
    yield "gptoss_gguf", tf.GptOssConfig(
        num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 20000.0, "factor": 4.0, "beta_fast": 4.0,
                         "beta_slow": 0.05, "truncate": True, "original_max_position_embeddings": 16},
        **dict(COMMON, num_hidden_layers=4)), ("f32", "q8_0")
    # V3 as llama.cpp's converter and reader take it: the scoring function named in the config
    # (else the file says softmax), mscale equal to mscale_all_dim (llama.cpp assumes it); then GGUF.
    yield "deepseek3_gguf", tf.DeepseekV3Config(
        q_lora_rank=32, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
        routed_scaling_factor=2.5, norm_topk_prob=True, scoring_func="sigmoid", topk_method="noaux_tc",
        rope_parameters={"rope_type": "yarn", "rope_theta": 20000.0, "factor": 4.0, "mscale": 0.7,
                         "mscale_all_dim": 0.7, "original_max_position_embeddings": 16}, **mla), ("f32", "q8_0")
    # DeepSeek-V2: softmax routing within the 2 of 4 groups holding the best single scores, not
    # renormalized, two shared experts' width, queries straight, YaRN with mscale_all_dim off 1.
    yield "deepseek2_tiny", tf.DeepseekV2Config(
        q_lora_rank=None, topk_method="group_limited_greedy", n_group=4, topk_group=2, n_shared_experts=2,
        first_k_dense_replace=1, routed_scaling_factor=1.3,
        rope_parameters={"rope_type": "yarn", "rope_theta": 20000.0, "factor": 4.0, "mscale": 1.0,
                         "mscale_all_dim": 0.8, "original_max_position_embeddings": 16}, **mla), ()
    # HF only: biases everywhere, NoPE every 2nd layer, and those layers slide over 8 positions.
    yield "smollm3_window", tf.SmolLM3Config(num_key_value_heads=1, no_rope_layer_interval=2, use_sliding_window=True,
                                             sliding_window=8, attention_bias=True, mlp_bias=True, **layers4), ()


def routers(model):
    return [m for n, m in model.named_modules() if n.endswith((".mlp.gate", ".block_sparse_moe.gate", ".mlp.router"))]


def sharpen_routers(model):
    """Router weights 3x the rest: router logits a few units apart, so f32 rounding cannot swap an
    expert choice (checked below), while the chosen experts' weights stay far from 0 and 1."""
    with torch.no_grad():
        for r in routers(model):
            r.weight.mul_(3.0)


def record_routing_margin(model, d):
    """The smallest gap, over every layer and position of the reference sequence, between the
    k-th and the (k+1)-th router logit: the conformance test's tolerance stands on it being far
    above f32 rounding."""
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    k = model.config.num_experts_per_tok
    gaps = []

    def hook(module, _inputs, out):
        choice = out[0].double()
        bias = getattr(module, "e_score_correction_bias", None)
        if bias is not None:  # DeepSeek-V3: sigmoid scores plus the bias, chosen among kept groups
            choice = choice.sigmoid() + bias.double()
            n_group, topk_group = module.num_group, module.topk_group
            groups = choice.view(choice.shape[0], n_group, -1).topk(2, dim=-1).values.sum(-1)
            if n_group > 1:
                top_g = groups.topk(topk_group + 1, dim=-1).values
                gaps.append(float((top_g[:, topk_group - 1] - top_g[:, topk_group]).min()))
                keep = torch.zeros_like(groups).scatter_(1, groups.topk(topk_group, dim=-1).indices, 1)
                mask = keep.unsqueeze(-1).expand(-1, -1, choice.shape[1] // n_group).reshape(choice.shape)
                choice = choice.masked_fill(mask == 0, float("-inf"))
        elif getattr(module, "topk_method", "") == "group_limited_greedy":  # DeepSeek-V2, in logits
            n_group, topk_group = module.num_group, module.topk_group
            groups = choice.view(choice.shape[0], n_group, -1).max(dim=-1).values
            top_g = groups.topk(topk_group + 1, dim=-1).values
            gaps.append(float((top_g[:, topk_group - 1] - top_g[:, topk_group]).min()))
            keep = torch.zeros_like(groups).scatter_(1, groups.topk(topk_group, dim=-1).indices, 1)
            mask = keep.unsqueeze(-1).expand(-1, -1, choice.shape[1] // n_group).reshape(choice.shape)
            choice = choice.masked_fill(mask == 0, float("-inf"))
        top = choice.topk(k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))
    handles = [r.register_forward_hook(hook) for r in routers(model)]
    with torch.no_grad():
        model.double()(torch.tensor([exp["prompt_ids"] + exp["greedy_ids"]]))
    for h in handles:
        h.remove()
    exp["min_routing_margin"] = min(gaps)
    assert exp["min_routing_margin"] > 5e-4, f"{d}: routing margin {min(gaps)} too small"
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
    print(f"  min routing margin {min(gaps):.5f}")


def convert(llama_cpp, d, outtype):
    """convert_hf_to_gguf.py, run in-process so its vocabulary step can be swapped for none."""
    conv = importlib.import_module("convert_hf_to_gguf")
    base = importlib.import_module("conversion.base")
    none = base.TextModel._set_vocab_none
    for step in ("set_vocab", "_set_vocab_gpt2", "_set_vocab_qwen", "_set_vocab_sentencepiece", "_set_vocab_llama_hf"):
        setattr(base.TextModel, step, none)
    find = conv.get_model_class

    def model_class(*args, **kwargs):  # families with a set_vocab of their own (Phi-3)
        cls = find(*args, **kwargs)
        cls.set_vocab = none
        return cls
    conv.get_model_class = model_class
    out = os.path.join(d, f"model-{outtype.upper()}.gguf")
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", d, "--outtype", outtype, "--outfile", out]
    try:
        conv.main()
    finally:
        sys.argv = argv
    print(f"  wrote {out} ({os.path.getsize(out)} bytes)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    for name, cfg, ggufs in cases():
        if a.only and name not in a.only.split(","):
            continue
        torch.manual_seed(1234)
        cfg._attn_implementation = "eager"
        cfg._experts_implementation = "eager"  # the grouped-GEMM default takes no float64
        model = tf.AutoModelForCausalLM.from_config(cfg).eval()
        randomize(model)
        if name.startswith("gemma"):  # Gemma's norms multiply by 1 + w: keep 1 + w in [0.5, 1.5) as elsewhere
            with torch.no_grad():
                for pname, p in model.named_parameters():
                    if "norm" in pname:
                        p.sub_(1.0)
        if getattr(cfg, "num_experts_per_tok", 0):
            sharpen_routers(model)
        if name.startswith("deepseek"):  # the routers' choice biases are buffers, zero unless set
            with torch.no_grad():
                g = torch.Generator().manual_seed(77)
                for bname, b in model.named_buffers():
                    if bname.endswith("e_score_correction_bias"):
                        b.copy_(torch.randn(b.shape, generator=g) * 0.05)
        if name.startswith("gptoss"):  # sink logits near the scores' size, so they matter
            with torch.no_grad():
                for pname, p in model.named_parameters():
                    if pname.endswith(".sinks"):
                        p.mul_(20.0)
        d = os.path.join(a.out, name)
        model.save_pretrained(d, safe_serialization=True)
        if os.path.exists(os.path.join(d, "generation_config.json")):
            os.remove(os.path.join(d, "generation_config.json"))
        record_reference(name, model, d)
        if getattr(cfg, "num_experts_per_tok", 0):
            record_routing_margin(model, d)
        # Gemma 3's converter trims the embedding rows to the tokenizer's vocabulary.
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump({"model": {"vocab": {f"<{i}>": i for i in range(cfg.vocab_size)}}, "added_tokens": []}, f)
        for t in ggufs:  # a fresh process per file: the converter keeps module state
            subprocess.run([sys.executable, __file__, "--convert", d, t, a.llama_cpp], check=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--convert":
        convert(sys.argv[4], sys.argv[2], sys.argv[3])
    else:
        main()
