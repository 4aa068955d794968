#!/usr/bin/env python3
"""Builds tiny random Hugging Face models and records HF's own outputs for kvlm's conformance tests.

Run in a venv with torch and transformers (not needed by CI: the outputs are committed):
    python3 -m venv ~/kvlm-venv && ~/kvlm-venv/bin/pip install torch transformers safetensors
    ~/kvlm-venv/bin/python tools/make_fixtures.py tests/fixtures

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
from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoConfig, GPTNeoForCausalLM

PROMPT_LEN = 32
NEW_TOKENS = 32


def models():
    yield "gpt2_tiny", GPT2LMHeadModel, GPT2Config(
        vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4, initializer_range=0.2,
        activation_function="gelu_new", bos_token_id=255, eos_token_id=255)
    # Local layers see 8 positions; the 64-token test sequence runs far past the window.
    yield "gptneo_tiny", GPTNeoForCausalLM, GPTNeoConfig(
        vocab_size=256, max_position_embeddings=128, hidden_size=64, num_layers=4, num_heads=4,
        attention_types=[[["global", "local"], 2]], window_size=8, initializer_range=0.2,
        intermediate_size=None, activation_function="gelu_new", bos_token_id=255, eos_token_id=255)


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


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
