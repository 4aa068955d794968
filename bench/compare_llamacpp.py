#!/usr/bin/env python3
"""kvlm against llama.cpp on the same GGUF files, same thread count.

Setup (once, outside the repo; llama-cpp-python compiles llama.cpp from source):
    python3 -m venv ~/kvlm-venv && ~/kvlm-venv/bin/pip install numpy gguf sentencepiece llama-cpp-python
Run:
    ~/kvlm-venv/bin/python bench/compare_llamacpp.py --shape tinyllama --types q8_0,q4_0 --runs 2

For each shape and type it writes a synthetic-weight GGUF (fixed seed, std 0.02, the gguf package
quantizes) with the Llama-2 / GPT-2 vocabulary from ../shared, then measures, with both engines:
  prefill of 512 tokens (tokens/s), decode of 128 tokens from an empty context and at depth 1024.
llama.cpp runs through llama-cpp-python's low-level API: one llama_decode per step, no sampling.
The wrapper's own cost per call (building the ctypes batch, crossing into C) is measured by
timing that Python-side work alone, without the decode, and reported. With --rounds N both engines
are measured N times per file, which goes first alternating, and each round's ratio is printed
beside the medians: on a VM whose bandwidth drifts, one engine's slow spell shows as a spread.
KV: llama.cpp's default is f16; kvlm's (--kv-dtype auto) is f16 beside these files' quantized
matrices too (f32 only beside f32 matrices), so by default both read the same KV bytes.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

import gguf
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHAPES = {
    "tinyllama": dict(arch="llama", dim=2048, hidden=5632, layers=22, heads=32, kv_heads=4, vocab=32000, ctx=2048),
    "gpt2": dict(arch="gpt2", dim=768, hidden=3072, layers=12, heads=12, kv_heads=12, vocab=50257, ctx=1024),
    # Mixtral 8x7B's structure at a size this machine runs: 8 experts, 2 per token, expert width
    # 3.5x the model width, 4 query heads per KV head (1.2B parameters, 0.4B active per token).
    "mixtral": dict(arch="llama", dim=1024, hidden=3584, layers=12, heads=16, kv_heads=4, vocab=32000, ctx=4096,
                    experts=8, experts_used=2),
}


def write_gguf(path, shape, qtype, shared, seed=0):
    s = SHAPES[shape]
    rng = np.random.default_rng(seed)
    # f16: the input llama.cpp's quantizer makes the K- and I-quant files from (bench/make_quant_files.sh)
    T = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
         "f16": gguf.GGMLQuantizationType.F16}[qtype]
    w = gguf.GGUFWriter(path, s["arch"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["dim"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["hidden"])
    w.add_head_count(s["heads"])
    if s["arch"] == "llama":
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=os.path.join(shared, "tokenizers/llama2/tokenizer.model"))
        w.add_head_count_kv(s["kv_heads"])
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_freq_base(10000.0)
        w.add_rope_dimension_count(s["dim"] // s["heads"])
        w.add_tokenizer_model("llama")
        w.add_token_list([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
        w.add_token_scores([sp.get_score(i) for i in range(sp.get_piece_size())])
        types = []
        for i in range(sp.get_piece_size()):
            types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    else:
        w.add_layer_norm_eps(1e-5)
        enc = json.load(open(os.path.join(shared, "tokenizers/gpt2/encoder.json")))
        merges = [l for l in open(os.path.join(shared, "tokenizers/gpt2/vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if l]
        toks = [None] * len(enc)
        for t, i in enc.items():
            toks[i] = t
        w.add_tokenizer_model("gpt2")
        w.add_token_list(toks)
        w.add_token_merges(merges)
        w.add_token_types([3 if t == "<|endoftext|>" else 1 for t in toks])
        w.add_bos_token_id(50256)
        w.add_eos_token_id(50256)

    if s.get("experts"):
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["experts_used"])

    def mat(name, rows, cols, quant=True, stack=0):
        a = (rng.standard_normal((stack, rows, cols) if stack else (rows, cols), dtype=np.float32) * 0.02)
        if quant and T == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, a.astype(np.float16))
        elif quant:
            q = gguf.quants.quantize(a, T)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=T)
        else:
            w.add_tensor(name, a)

    def vec(name, n, value):
        w.add_tensor(name, np.full(n, value, dtype=np.float32))

    d, h, kv = s["dim"], s["hidden"], s["dim"] // s["heads"] * s["kv_heads"]
    mat("token_embd.weight", s["vocab"], d)
    if s["arch"] == "gpt2":
        mat("position_embd.weight", s["ctx"], d, quant=False)
    vec("output_norm.weight", d, 1.0)
    if s["arch"] == "gpt2":
        vec("output_norm.bias", d, 0.0)
    mat("output.weight", s["vocab"], d)
    for i in range(s["layers"]):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", d, 1.0)
        vec(p + "ffn_norm.weight", d, 1.0)
        if s["arch"] == "llama":
            mat(p + "attn_q.weight", d, d)
            mat(p + "attn_k.weight", kv, d)
            mat(p + "attn_v.weight", kv, d)
            mat(p + "attn_output.weight", d, d)
            if s.get("experts"):  # router in f32, as llama.cpp's quantizer keeps it
                mat(p + "ffn_gate_inp.weight", s["experts"], d, quant=False)
                mat(p + "ffn_gate_exps.weight", h, d, stack=s["experts"])
                mat(p + "ffn_up_exps.weight", h, d, stack=s["experts"])
                mat(p + "ffn_down_exps.weight", d, h, stack=s["experts"])
                continue
            mat(p + "ffn_gate.weight", h, d)
            mat(p + "ffn_up.weight", h, d)
            mat(p + "ffn_down.weight", d, h)
        else:
            vec(p + "attn_norm.bias", d, 0.0)
            vec(p + "ffn_norm.bias", d, 0.0)
            mat(p + "attn_qkv.weight", 3 * d, d)
            vec(p + "attn_qkv.bias", 3 * d, 0.0)
            mat(p + "attn_output.weight", d, d)
            vec(p + "attn_output.bias", d, 0.0)
            mat(p + "ffn_up.weight", h, d)
            vec(p + "ffn_up.bias", h, 0.0)
            mat(p + "ffn_down.weight", d, h)
            vec(p + "ffn_down.bias", d, 0.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def wrapper_overhead_ms(L, calls=2000):
    """Python-side cost of one single-token decode call: the ctypes batch built, filled and freed."""
    t0 = time.perf_counter()
    for i in range(calls):
        batch = L.llama_batch_init(1, 0, 1)
        batch.token[0] = 1
        batch.pos[0] = i
        batch.n_seq_id[0] = 1
        batch.seq_id[0][0] = 0
        batch.logits[0] = 1
        batch.n_tokens = 1
        L.llama_batch_free(batch)
    return (time.perf_counter() - t0) * 1000 / calls


def llamacpp_times(path, threads, runs, prompt_ids, decode_n, depth):
    import llama_cpp as L
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    cp = L.llama_context_default_params()
    cp.n_ctx = 2048
    cp.n_batch = 512
    cp.n_ubatch = 512
    cp.n_threads = threads
    cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    mem = L.llama_get_memory(ctx)

    def decode(tokens, pos0):
        n = len(tokens)
        batch = L.llama_batch_init(n, 0, 1)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if i == n - 1 else 0
        batch.n_tokens = n
        rc = L.llama_decode(ctx, batch)
        L.llama_batch_free(batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def clear():
        L.llama_memory_clear(mem, True)

    def prefill(tokens):  # in n_batch chunks, as llama.cpp's own tools do
        for s in range(0, len(tokens), 512):
            decode(tokens[s:s + 512], s)

    res = {"prefill_tps": [], "decode_empty_tps": [], "decode_depth_tps": [], "wrapper_ms_per_call": []}
    clear()
    prefill(prompt_ids[:16])  # warm-up
    for _ in range(runs):
        clear()
        t0 = time.perf_counter()
        prefill(prompt_ids)
        res["prefill_tps"].append(len(prompt_ids) / (time.perf_counter() - t0))
        for key, start in (("decode_empty_tps", 1), ("decode_depth_tps", depth)):
            clear()
            prefill((prompt_ids * 4)[:start])
            t0 = time.perf_counter()
            for i in range(decode_n):
                decode([prompt_ids[i % len(prompt_ids)]], start + i)
            wall = time.perf_counter() - t0
            res[key].append(decode_n / wall)
    res["wrapper_ms_per_call"].append(wrapper_overhead_ms(L))
    L.llama_free(ctx)
    L.llama_model_free(model)
    return res


def kvlm_times(path, threads, runs, prompt_ids, decode_n, depth, kvlm, kv_dtype="auto"):
    def bench(prompt, new):
        cmd = [kvlm, "bench", "--model", path, "--prompt-ids", ",".join(map(str, prompt)), "--new-tokens", str(new),
               "--runs", str(runs), "--warmup", "1", "--cache-on-only", "--json", "--threads", str(threads),
               "--kv-dtype", kv_dtype]
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

    pre = bench(prompt_ids, 2)
    empty = bench(prompt_ids[:1], decode_n)
    deep = bench((prompt_ids * 4)[:depth], decode_n)
    tp = lambda j: 1000.0 / j["results"]["cache_on"]["tpot_ms"][str(decode_n)]["mean"]
    return {"prefill_tps": len(prompt_ids) / (pre["results"]["cache_on"]["ttft_ms"]["mean"] / 1000),
            "decode_empty_tps": tp(empty), "decode_depth_tps": tp(deep),
            "decode_roofline": empty.get("roofline", {}).get("decode", {}).get(str(decode_n), {}),
            "kv_dtype": deep["kv"]["kv_dtype"],  # what --kv-dtype (auto) resolved to
            "triad_gbps": empty.get("roofline", {}).get("triad_gbps")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="tinyllama", help="tinyllama, gpt2 or both (comma-separated)")
    ap.add_argument("--types", default="q8_0,q4_0")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="measure both engines this many times per file, alternating"
                                                         " which goes first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--depth", type=int, default=1024)
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--kvlm", default=os.path.join(ROOT, "build", "kvlm"))
    ap.add_argument("--workdir", default="/tmp/kvlm_compare_llamacpp")
    ap.add_argument("--kv-dtype", default="auto",
                    help="kvlm's KV type (default auto: f16 beside quantized matrices, as llama.cpp's default KV)")
    ap.add_argument("--files", help="a folder of llama.cpp-made files {shape}-{type}.gguf (bench/make_llamacpp_files.py);"
                                    " without it, synthetic files are written by the gguf package")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    rng = np.random.default_rng(1)
    rows = []
    for shape in args.shape.split(","):
        prompt = [int(x) for x in rng.integers(3, SHAPES[shape]["vocab"] - 1, size=args.prompt_tokens)]
        depth = min(args.depth, SHAPES[shape]["ctx"] - args.decode_tokens - 1)
        for qt in args.types.split(","):
            path = os.path.join(args.files or args.workdir, f"{shape}-{qt}.gguf")
            if args.files and not os.path.exists(path):
                sys.exit(f"{path} is missing: make it with bench/make_llamacpp_files.py")
            if not os.path.exists(path):
                print(f"writing {path}", file=sys.stderr, flush=True)
                write_gguf(path, shape, qt, args.shared)
            # Rounds alternate which engine goes first, so a slow spell of the VM (its bandwidth moved
            # by a third within minutes) falls on both sides across rounds rather than on one.
            lcs, kvs = [], []
            for r in range(args.rounds):
                for engine in (("llama.cpp", "kvlm") if r % 2 == 0 else ("kvlm", "llama.cpp")):
                    print(f"{shape} {qt}: {engine} (round {r + 1} of {args.rounds})", file=sys.stderr, flush=True)
                    if engine == "kvlm":
                        kvs.append(kvlm_times(path, args.threads, args.runs, prompt, args.decode_tokens, depth, args.kvlm,
                                              args.kv_dtype))
                    else:
                        lcs.append(llamacpp_times(path, args.threads, args.runs, prompt, args.decode_tokens, depth))
            rows.append((shape, qt, depth, lcs, kvs, os.path.getsize(path)))
    import llama_cpp
    print(f"\nllama-cpp-python {llama_cpp.__version__}, {args.threads} threads, {args.rounds} rounds of {args.runs} runs, "
          f"prefill {args.prompt_tokens} tokens, decode {args.decode_tokens} tokens; KV: llama.cpp f16 (its default), "
          f"kvlm --kv-dtype {args.kv_dtype} (the column kvlm KV: what it ran)")
    print(f"command: {' '.join(sys.argv)}")
    cpu = [l for l in open("/proc/cpuinfo") if l.startswith("flags")][0].split()
    print("CPU SIMD flags:", " ".join(sorted(f for f in cpu if f.startswith(("avx", "fma", "f16c")))))
    print("kvlm kernels:", os.environ.get("KVLM_ISA", "the best the CPU has (core/cpu.h)"), "\n")
    print(f"rounds: {args.rounds} per file, each engine's tok/s the median over them (and over {args.runs} runs in each); "
          "the last column is each round's own ratio")
    print("| shape | type | file MB | kvlm KV | test | llama.cpp tok/s | kvlm tok/s | kvlm / llama.cpp | rounds' ratios |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape, qt, depth, lcs, kvs, size in rows:
        for key, label in (("prefill_tps", f"prefill {args.prompt_tokens}"), ("decode_empty_tps", "decode, empty context"),
                           ("decode_depth_tps", f"decode at depth {depth}")):
            per_l = [statistics.median(lc[key]) for lc in lcs]
            per_k = [kv[key] for kv in kvs]
            l, k = statistics.median(per_l), statistics.median(per_k)
            ratios = [b / a for a, b in zip(per_l, per_k)]
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}x" if len(ratios) > 1 else f"{ratios[0]:.2f}x"
            print(f"| {shape} | {qt} | {size / 1e6:.0f} | {kvs[-1]['kv_dtype']} | {label} | {l:.2f} | {k:.2f} | {k / l:.2f}x "
                  f"| {spread} |")
    print()
    for shape, qt, depth, lcs, kvs, size in rows:
        r = kvs[-1]["decode_roofline"]
        wrapper = statistics.median(lc["wrapper_ms_per_call"][0] for lc in lcs)
        print(f"{shape} {qt}: llama.cpp wrapper overhead {wrapper:.3f} ms per llama_decode call; kvlm decode (last round) "
              f"{r.get('gbps', 0):.1f} GB/s = {100 * r.get('fraction_of_triad', 0):.0f}% of the "
              f"{kvs[-1]['triad_gbps'] or 0:.1f} GB/s triad")


if __name__ == "__main__":
    main()
