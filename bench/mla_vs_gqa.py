#!/usr/bin/env python3
"""DeepSeek's latent attention (MLA) against the same model with per-head keys and values: KV bytes
per token and decode time per step at long contexts, from `kvlm bench --decode-at` (the cache is
filled with random rows, so no long prefill runs; each cell is timed against the roofline).

Three random models of one size (hidden 1024, 8 layers, 16 query heads, dense SwiGLU MLP of 2816,
Llama-2's vocabulary size), bf16 weights, made with transformers:
  - mla:  DeepSeek-V3 attention, kv_lora_rank 512, qk_rope 64, qk_nope 128, v_head 128,
          q_lora_rank 384 (every layer dense: first_k_dense_replace = layers);
  - gqa:  Llama attention with 4 KV heads of 128 (the usual grouped-query equivalent);
  - mha:  Llama attention with 16 KV heads of 128 (what MLA's heads expand to, near enough).
Run in a venv with torch and transformers:
    ~/venv/bin/python bench/mla_vs_gqa.py --out /tmp/mla --at 4096,16384
Prints one JSON object: per model, bench's rows (context, KV type, KV bytes, TPOT, roofline).
"""
import argparse
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make(out):
    names = ("mla", "gqa", "mha")
    if all(os.path.exists(os.path.join(out, n, "config.json")) for n in names):
        return
    import torch
    import transformers as tf
    common = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                  max_position_embeddings=32768, tie_word_embeddings=False, rms_norm_eps=1e-5)
    cfgs = {
        "mla": tf.DeepseekV3Config(kv_lora_rank=512, q_lora_rank=384, qk_rope_head_dim=64, qk_nope_head_dim=128,
                                   v_head_dim=128, num_key_value_heads=16, n_routed_experts=8, num_experts_per_tok=2,
                                   moe_intermediate_size=704, first_k_dense_replace=8, n_group=1, topk_group=1,
                                   **common),
        "gqa": tf.LlamaConfig(num_key_value_heads=4, head_dim=128, **common),
        "mha": tf.LlamaConfig(num_key_value_heads=16, head_dim=128, **common),
    }
    for name, cfg in cfgs.items():
        d = os.path.join(out, name)
        if os.path.exists(os.path.join(d, "config.json")):
            continue
        torch.manual_seed(0)
        model = tf.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
        model.save_pretrained(d, safe_serialization=True)
        if os.path.exists(os.path.join(d, "generation_config.json")):
            os.remove(os.path.join(d, "generation_config.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--at", default="4096,16384")
    ap.add_argument("--kv-dtypes", default="f16,int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kvlm", default=os.path.join(ROOT, "build", "kvlm"))
    a = ap.parse_args()
    make(a.out)
    result = {}
    for name in ("mla", "gqa", "mha"):
        cmd = [a.kvlm, "bench", "--model", os.path.join(a.out, name), "--prompt-ids", "1,2,3,4", "--new-tokens", "2",
               "--runs", "1", "--cache-on-only", "--decode-at", a.at, "--kv-dtypes", a.kv_dtypes, "--json",
               "--threads", str(a.threads)]
        j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        result[name] = j["kv_types"]
    json.dump(result, os.sys.stdout, indent=1)


if __name__ == "__main__":
    main()
