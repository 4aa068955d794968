#!/usr/bin/env python3
"""The classic KV-cache experiment, Hugging Face and kvlm side by side on the same saved model.

Setup (once, outside the repo):
    python3 -m venv ~/kvlm-venv && ~/kvlm-venv/bin/pip install torch transformers
Run:
    ~/kvlm-venv/bin/python bench/compare_hf.py --arch distilgpt2 --runs 10
    ~/kvlm-venv/bin/python bench/compare_hf.py --arch gpt-neo-1.3B --runs 3 --new-tokens 20,100

It builds the model in transformers at the real shapes with random weights (fixed seed), saves
it (safetensors + the GPT-2 tokenizer from ../shared/tokenizers/gpt2), checks that HF and kvlm
produce the same greedy tokens on it, then times HF `generate(use_cache=True/False)` and
`kvlm bench --model` with the same prompt, token counts and thread count, and prints both
tables with the ratio HF/kvlm per cell.

TTFT = time of generate(max_new_tokens=1). TPOT(N) = (time(N) - TTFT) / (N - 1), the same
definition kvlm bench uses (its per-step mean after the first token).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoConfig, GPTNeoForCausalLM, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build(arch, out_dir, seed):
    torch.manual_seed(seed)
    if arch == "distilgpt2":
        cfg = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
        model = GPT2LMHeadModel(cfg)
    elif arch == "gpt2":
        cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
        model = GPT2LMHeadModel(cfg)
    elif arch == "gpt-neo-1.3B":
        cfg = GPTNeoConfig(hidden_size=2048, num_layers=24, num_heads=16, max_position_embeddings=2048,
                           attention_types=[[["global", "local"], 12]], window_size=256, vocab_size=50257)
        model = GPTNeoForCausalLM(cfg)
    else:
        sys.exit(f"unknown arch {arch}")
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    return model


def tokenizer(shared):
    """The GPT-2 tokenizer from OpenAI's files, built with HF `tokenizers` (no hub access)."""
    d = os.path.join(shared, "tokenizers", "gpt2")
    tk = Tokenizer(models.BPE.from_file(os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe")))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", bos_token="<|endoftext|>")


def time_hf(model, inputs, use_cache, new_tokens, runs, warmup):
    def once(n):
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(**inputs, use_cache=use_cache, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=50256)
        return (time.perf_counter() - t0) * 1000

    for _ in range(warmup):
        once(2)
    ttft = [once(1) for _ in range(runs)]
    res = {"ttft_ms": ttft, "tpot_ms": {}}
    t1 = statistics.mean(ttft)
    for n in new_tokens:
        res["tpot_ms"][str(n)] = [(once(n) - t1) / (n - 1) for _ in range(runs)]
        print(f"  HF use_cache={use_cache} TPOT@{n} done", file=sys.stderr, flush=True)
    return res


def ms(v):
    return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="distilgpt2", choices=["distilgpt2", "gpt2", "gpt-neo-1.3B"])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--new-tokens", default="20,100")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", default="What is KV caching?")
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--kvlm", default=os.path.join(ROOT, "build", "kvlm"))
    ap.add_argument("--workdir", default="/tmp/kvlm_compare_hf")
    ap.add_argument("--skip-no-cache", action="store_true", help="time only use_cache=True")
    ap.add_argument("--kvlm-weights", default="", help="run kvlm's matrices as bf16, q8_0 or q4_0 (HF stays f32)")
    args = ap.parse_args()
    new_tokens = [int(x) for x in args.new_tokens.split(",")]
    torch.set_num_threads(args.threads)

    out_dir = os.path.join(args.workdir, args.arch)
    model = build(args.arch, out_dir, seed=0)
    tok = tokenizer(args.shared)
    tok.save_pretrained(out_dir)
    inputs = tok(args.prompt, return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()

    # Same greedy tokens first, or the timings compare different work.
    check_n = 20
    with torch.no_grad():
        hf_ids = model.generate(**inputs, max_new_tokens=check_n, do_sample=False, pad_token_id=50256)[0, len(ids):].tolist()
    wflag = ["--weights", args.kvlm_weights] if args.kvlm_weights else []
    kv = json.loads(subprocess.run([args.kvlm, "generate", "--model", out_dir, "--prompt", args.prompt, "--max-new-tokens",
                                    str(check_n), "--ignore-eos", "--json", "--threads", str(args.threads)] + wflag,
                                   check=True, capture_output=True, text=True).stdout)
    assert kv["prompt_ids"] == ids, f"prompt ids differ: kvlm {kv['prompt_ids']} HF {ids}"
    same = sum(a == b for a, b in zip(hf_ids, kv["generated_ids"]))
    print(f"greedy check: {same}/{check_n} tokens equal (HF {hf_ids[:8]}..., kvlm {kv['generated_ids'][:8]}...)")
    if same != check_n and not args.kvlm_weights:
        sys.exit("greedy tokens differ: not timing different work")
    if args.kvlm_weights:
        print(f"(kvlm runs {args.kvlm_weights} weights: token agreement is informational; both generate the same "
              f"number of tokens through the same shapes)")

    hf = {}
    modes = [True] if args.skip_no_cache else [True, False]
    for use_cache in modes:
        hf[use_cache] = time_hf(model, inputs, use_cache, new_tokens, args.runs, args.warmup)
    cmd = [args.kvlm, "bench", "--model", out_dir, "--prompt", args.prompt, "--runs", str(args.runs), "--warmup",
           str(args.warmup), "--new-tokens", ",".join(map(str, new_tokens)), "--json", "--threads", str(args.threads)]
    if args.skip_no_cache:
        cmd.append("--cache-on-only")
    cmd += wflag
    ours = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

    print(f"\n{args.arch}: random weights (seed 0), kvlm weights {args.kvlm_weights or 'f32'}, prompt {args.prompt!r} ({len(ids)} tokens), "
          f"{args.runs} runs after {args.warmup} warm-up, {args.threads} threads; "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"command: {' '.join(sys.argv)}\n")
    print("| metric | cache | HF (ms) | kvlm (ms) | HF / kvlm |")
    print("|---|---|---|---|---|")
    for use_cache in modes:
        key = "cache_on" if use_cache else "cache_off"
        rows = [("TTFT", hf[use_cache]["ttft_ms"], ours["results"][key]["ttft_ms"])]
        rows += [(f"TPOT @{n}", hf[use_cache]["tpot_ms"][str(n)], ours["results"][key]["tpot_ms"][str(n)])
                 for n in new_tokens]
        for name, h, k in rows:
            hm, hs = ms(h)
            print(f"| {name} | {'on' if use_cache else 'off'} | {hm:.2f} ± {hs:.2f} | {k['mean']:.2f} ± {k['std']:.2f} "
                  f"| {hm / k['mean']:.2f}x |")
    if not args.skip_no_cache:
        print("\n| cache speedup (off / on) | HF | kvlm |\n|---|---|---|")
        for n in new_tokens:
            h = ms(hf[False]["tpot_ms"][str(n)])[0] / ms(hf[True]["tpot_ms"][str(n)])[0]
            print(f"| TPOT @{n} | {h:.2f}x | {ours['speedup']['tpot_' + str(n)]:.2f}x |")


if __name__ == "__main__":
    main()
