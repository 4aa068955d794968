#!/usr/bin/env python3
"""kvlm against llama.cpp's llama-bench on the same GGUF files of each quant type, same threads.

The files are made by llama.cpp's own quantizer from one F16 file per shape (synthetic weights,
std 0.02, seed 0, the Llama-2 / GPT-2 vocabulary from ../shared):
    ~/kvlm-venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); import compare_llamacpp as c; \
        c.write_gguf('/work/qfiles/tinyllama-f16.gguf', 'tinyllama', 'f16', '../shared')"
    llama-quantize /work/qfiles/tinyllama-f16.gguf /work/qfiles/tinyllama-Q4_K_M.gguf Q4_K_M 2
llama-bench comes from the llama.cpp that llama-cpp-python's sdist vendors, built natively (on a
CPU with AMX build it with clang: GCC's build faults in its AMX kernels, docs/benchmarks.md).
Run:
    python3 bench/compare_quant_types.py --files /work/qfiles --llama-bench PATH/llama-bench \
        --shapes tinyllama,gpt2 --types Q4_K_M,Q5_K_M,Q6_K,IQ4_XS,Q3_K_M

Per file: prefill of 512 tokens and decode of 128 from an empty context (tokens/s; llama-bench's
pp512 and tg128), each engine `--runs` times, medians; then the wall time and peak RSS of
loading the file and generating one token (kvlm generate, llama-bench -p 0 -n 1). JSON to stdout.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_flags():
    flags = open("/proc/cpuinfo").read().split("flags\t\t: ")[1].split("\n")[0].split()
    model = re.search(r"model name\s*: (.*)", open("/proc/cpuinfo").read()).group(1)
    keep = [f for f in flags if f.startswith(("avx", "amx", "fma", "f16c"))]
    return model, keep


def timed(cmd, env=None):
    """Wall seconds and peak RSS (MB) of a command, through GNU time."""
    r = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M"] + cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {r.stderr[-2000:]}")
    wall, rss = re.findall(r"TIME ([\d.]+) (\d+)", r.stderr)[-1]
    return float(wall), int(rss) / 1024


def llama_bench(bench, path, threads, runs, env):
    r = subprocess.run([bench, "-m", path, "-t", str(threads), "-p", "512", "-n", "128", "-r", str(runs), "-o", "json"],
                       capture_output=True, text=True, check=True, env=env)
    rows = json.loads(r.stdout)
    pp = next(x["avg_ts"] for x in rows if x["n_prompt"] == 512)
    tg = next(x["avg_ts"] for x in rows if x["n_gen"] == 128)
    wall, rss = timed([bench, "-m", path, "-t", str(threads), "-p", "0", "-n", "1", "-r", "1"], env)
    return {"pp512": pp, "tg128": tg, "load_and_1_token_s": wall, "peak_rss_mb": rss}


def kvlm_bench(kvlm, path, threads, runs):
    def bench(ids, new):
        cmd = [kvlm, "bench", "--model", path, "--prompt-ids", ",".join(map(str, ids)), "--new-tokens", str(new),
               "--runs", str(runs), "--warmup", "1", "--cache-on-only", "--json", "--threads", str(threads)]
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

    prompt = [100 + (i * 37) % 20000 for i in range(512)]
    pre = bench(prompt, 2)
    dec = bench(prompt[:1], 128)
    wall, rss = timed([kvlm, "generate", "--model", path, "--prompt", "Hello", "--max-new-tokens", "1",
                       "--threads", str(threads)])
    return {"pp512": 512 / (pre["results"]["cache_on"]["ttft_ms"]["mean"] / 1000),
            "tg128": 1000.0 / dec["results"]["cache_on"]["tpot_ms"]["128"]["mean"],
            "load_and_1_token_s": wall, "peak_rss_mb": rss}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", required=True, help="a folder of {shape}-{TYPE}.gguf")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--shapes", default="tinyllama,gpt2")
    ap.add_argument("--types", default="Q4_K_M,Q5_K_M,Q6_K,IQ4_XS,Q3_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--kvlm", default=os.path.join(ROOT, "build", "kvlm"))
    a = ap.parse_args()
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.abspath(a.llama_bench)))
    model, flags = cpu_flags()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"cpu": model, "flags": flags, "threads": a.threads, "commit": commit, "machine": platform.node(), "rows": []}
    for shape in a.shapes.split(","):
        for t in a.types.split(","):
            path = os.path.join(a.files, f"{shape}-{t}.gguf")
            if not os.path.exists(path):
                print(f"missing {path}", file=sys.stderr)
                continue
            # Which engine goes first alternates with the file, so a slow spell of the VM does not
            # always land on the same one.
            first_llama = len(out["rows"]) % 2 == 0
            ll = llama_bench(a.llama_bench, path, a.threads, a.runs, env) if first_llama else None
            kv = kvlm_bench(a.kvlm, path, a.threads, a.runs)
            if ll is None:
                ll = llama_bench(a.llama_bench, path, a.threads, a.runs, env)
            row = {"shape": shape, "type": t, "file_mb": os.path.getsize(path) / 2**20, "kvlm": kv, "llama_cpp": ll,
                   "ratio_pp512": kv["pp512"] / ll["pp512"], "ratio_tg128": kv["tg128"] / ll["tg128"]}
            out["rows"].append(row)
            print(f"{shape:9} {t:7} pp512 {kv['pp512']:7.1f} vs {ll['pp512']:7.1f} ({row['ratio_pp512']:.2f}x)  "
                  f"tg128 {kv['tg128']:6.1f} vs {ll['tg128']:6.1f} ({row['ratio_tg128']:.2f}x)  "
                  f"RSS {kv['peak_rss_mb']:.0f} vs {ll['peak_rss_mb']:.0f} MB  load+1 {kv['load_and_1_token_s']:.1f} vs "
                  f"{ll['load_and_1_token_s']:.1f} s", file=sys.stderr, flush=True)
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
