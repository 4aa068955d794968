#!/usr/bin/env python3
"""The classic KV-cache experiment, through kvlm's Python package.

The seed article times Hugging Face's `model.generate(..., use_cache=True/False)` on distilgpt2
with the prompt "What is KV caching?": TTFT as a 1-token generation, TPOT from a 20-token one,
10 runs each, the cache on and off. This script does the same through kvlm and prints the same
table; with --hf (and `transformers` + `torch` installed) it runs Hugging Face's side in the same
process on the same shapes, for a side-by-side.

    pip install .                                   # from the repository root
    python examples/kv_cache_experiment.py          # distilgpt2 shapes, synthetic weights
    python examples/kv_cache_experiment.py --model path/to/distilgpt2   # a real HF folder
    python examples/kv_cache_experiment.py --hf     # add Hugging Face's numbers

Without --model the model is kvlm's built-in distilgpt2 shape with random weights (its speed and
KV memory are the real model's; its text is noise), prompted with the GPT-2 token ids of
"What is KV caching?".
"""
import argparse
import statistics
import time

import kvlm

PROMPT = "What is KV caching?"


def summarize(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def kvlm_side(llm, prompt, runs):
    """TTFT (1 new token) and TPOT (20 new tokens), cache on and off, as kvlm measures them."""
    rows = {}
    for use_cache in (True, False):
        llm.generate(prompt, max_new_tokens=20, ignore_eos=True, use_cache=use_cache)  # warm-up
        ttft = [llm.generate(prompt, max_new_tokens=1, ignore_eos=True, use_cache=use_cache).ttft_ms
                for _ in range(runs)]
        tpot = [llm.generate(prompt, max_new_tokens=20, ignore_eos=True, use_cache=use_cache).tpot_ms
                for _ in range(runs)]
        rows[use_cache] = (summarize(ttft), summarize(tpot))
    return rows


def hf_side(prompt_ids, model_path, runs, threads):
    """The article's method on Hugging Face: wall time of generate(max_new_tokens=1) is TTFT;
    (time of 20 tokens - TTFT) / 19 is TPOT."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(threads)
    if model_path:
        model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
    else:  # distilgpt2's shapes, random weights, like kvlm's preset
        model = GPT2LMHeadModel(GPT2Config(n_layer=6, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257))
    model.eval()
    ids = torch.tensor([prompt_ids])
    mask = torch.ones_like(ids)

    def timed(n, use_cache):
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           use_cache=use_cache, pad_token_id=0)
        return 1000 * (time.perf_counter() - t0)

    rows = {}
    for use_cache in (True, False):
        timed(20, use_cache)  # warm-up
        ttft = [timed(1, use_cache) for _ in range(runs)]
        full = [timed(20, use_cache) for _ in range(runs)]
        tpot = [(f - statistics.mean(ttft)) / 19 for f in full]
        rows[use_cache] = (summarize(ttft), summarize(tpot))
    return rows


def print_table(title, rows):
    print(f"\n{title}")
    print(f"{'':<14}{'TTFT (ms)':>22}{'TPOT (ms)':>22}")
    for use_cache in (True, False):
        (tm, ts), (pm, ps) = rows[use_cache]
        print(f"{'cache on' if use_cache else 'cache off':<14}{tm:>14.2f} ± {ts:<6.2f}{pm:>14.2f} ± {ps:<6.2f}")
    speed = rows[False][1][0] / rows[True][1][0]
    print(f"TPOT speedup from the cache: {speed:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a model kvlm loads (HF folder, GGUF, llama2.c); default: the distilgpt2 preset")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="compute threads (default: physical cores)")
    ap.add_argument("--hf", action="store_true", help="also run Hugging Face transformers (needs transformers, torch)")
    a = ap.parse_args()

    if a.model:
        llm = kvlm.LLM(a.model, threads=a.threads or None)
        prompt = llm.tokenize(PROMPT)
    else:
        llm = kvlm.LLM.from_preset("distilgpt2", threads=a.threads or None)
        prompt = llm.info["preset_prompt_ids"]  # GPT-2's ids for "What is KV caching?"
    info = llm.info
    print(f"kvlm {kvlm.__version__}: {a.model or 'distilgpt2 shapes (synthetic weights)'}, {info['layers']} layers, "
          f"dim {info['dim']}, {info['threads']} threads; prompt {len(prompt)} tokens; {a.runs} runs; "
          f"KV {info['kv_bytes_per_token']} bytes/token")
    print_table("kvlm", kvlm_side(llm, prompt, a.runs))
    if a.hf:
        try:
            rows = hf_side(prompt, a.model, a.runs, info["threads"])
        except ImportError as e:
            print(f"\nHugging Face side skipped: {e}")
        else:
            print_table("Hugging Face transformers (float32, same shapes and prompt ids)", rows)


if __name__ == "__main__":
    main()
