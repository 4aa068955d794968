#!/usr/bin/env python3
"""Loading: wall time and peak RSS to the first generated token, kvlm against llama.cpp (issue 16).

Each engine runs in its own process on the same GGUF file, one token after a one-word prompt:
  kvlm:      kvlm generate --model F --prompt Hello --max-new-tokens 1 --threads N
  llama.cpp: llama-cpp-python's Llama(F, n_ctx=512, n_threads=N) then one token (use_mmap as default)
Peak RSS is the process's ru_maxrss (kB, /usr/bin/time's %M). For llama.cpp the time is taken
inside the process from before Llama() to the first token, so Python's start and imports are not
counted against it; kvlm's time is its whole process. The file is read once before the runs so
both start from the page cache. Median over --runs.

    ~/kvlm-venv/bin/python bench/load_compare.py /work/llcpp/files/tinyllama-{f16,q8_0,q4_0}.gguf
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LLAMA_CHILD = r"""
import json, resource, sys, time
import llama_cpp
path, threads = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=threads, n_threads_batch=threads, verbose=False)
llm("Hello", max_tokens=1)
t1 = time.perf_counter()
print(json.dumps({"seconds": t1 - t0, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def kvlm_run(kvlm, path, threads):
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "RSS %M", kvlm, "generate", "--model", path, "--prompt", "Hello",
                        "--max-new-tokens", "1", "--threads", str(threads)], capture_output=True, text=True)
    t1 = time.perf_counter()
    if p.returncode != 0:
        sys.exit(f"kvlm failed on {path}: {p.stderr[-2000:]}")
    rss = int([l for l in p.stderr.splitlines() if l.startswith("RSS ")][-1].split()[1])
    return {"seconds": t1 - t0, "rss_kb": rss}


def llama_run(path, threads):
    p = subprocess.run([sys.executable, "-c", LLAMA_CHILD, path, str(threads)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"llama.cpp failed on {path}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kvlm", default=os.path.join(ROOT, "build", "kvlm"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    flags = subprocess.run([args.kvlm, "bench", "--help"], capture_output=True, text=True)  # binary exists
    if flags.returncode not in (0, 1):
        sys.exit("kvlm binary not runnable")
    cpu = [l for l in open("/proc/cpuinfo") if l.startswith("flags")][0].split()
    print("CPU flags (SIMD):", " ".join(sorted(f for f in cpu if f.startswith(("avx", "fma", "f16c")))))
    print("| file | size GB | kvlm s | llama.cpp s | time ratio | kvlm peak RSS GB | llama.cpp peak RSS GB | RSS ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.files:
        with open(path, "rb") as f:  # into the page cache for both
            while f.read(1 << 24):
                pass
        k = [kvlm_run(args.kvlm, path, args.threads) for _ in range(args.runs)]
        l = [llama_run(path, args.threads) for _ in range(args.runs)]
        ks, ls = statistics.median(r["seconds"] for r in k), statistics.median(r["seconds"] for r in l)
        kr, lr = max(r["rss_kb"] for r in k) / 1e6, max(r["rss_kb"] for r in l) / 1e6
        print(f"| {os.path.basename(path)} | {os.path.getsize(path) / 1e9:.2f} | {ks:.2f} | {ls:.2f} | {ks / ls:.2f}x "
              f"| {kr:.2f} | {lr:.2f} | {kr / lr:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
