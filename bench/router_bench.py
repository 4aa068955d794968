#!/usr/bin/env python3
"""Routing benchmark: the prefix-hit rate and TTFT of two `kvlm serve` replicas behind
sglang-router, cache_aware against round_robin (and round_robin with the shared Redis tier),
on one workload of several shared system prompts, the same seed for every policy.

Each policy gets fresh replicas (cold pools) and a fresh router. The hit rate is read from the
replicas' own /metrics (vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total, summed
over both); TTFT is the client's time to the first streamed chunk, through the router.

  .venv/bin/python bench/router_bench.py --model ../llcpp/files/gpt2-q8_0.gguf --requests 96
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("KVLM_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, deadline_s=120):
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"{url} not up in {deadline_s} s")


def metrics(base):
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_:]+)\{[^}]*\} (\S+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def workload(n, n_prompts, seed, chars):
    """n requests: a system prompt (one of n_prompts long TinyStories passages) and a short question."""
    paras = [p.strip() for p in open(os.path.join(SHARED, "data", "tinystories", "tinystories_val_sample.txt")).read()
             .split("\n") if p.strip()]
    passages, cur = [], ""
    for p in paras:  # consecutive paragraphs joined to about `chars` characters each
        cur = (cur + " " + p).strip()
        if len(cur) >= chars:
            passages.append(cur[:chars])
            cur = ""
        if len(passages) == n_prompts:
            break
    rng = random.Random(seed)
    names = ["Tom", "Lily", "Max", "Sue", "Ben", "Mia", "Sam", "Zoe"]
    out = []
    for i in range(n):
        k = rng.randrange(len(passages))
        out.append(f"System: {passages[k]}\nUser: What did {rng.choice(names)} do on day {rng.randrange(1000)}?\n")
    return out


def stream_ttft(base, prompt, max_tokens):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    ttft = None
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            if line.startswith(b"data: ") and ttft is None and b"[DONE]" not in line:
                ttft = time.perf_counter() - t0
    return ttft


def run_policy(args, policy, redis_url):
    replicas = []
    for _ in range(2):
        port = free_port()
        cmd = [args.kvlm, "--threads", str(args.threads), "serve", "--model", args.model, "--model-name", "m",
               "--port", str(port), "--kv-blocks", str(args.kv_blocks), "--max-seqs", "4"]
        if redis_url:
            cmd += ["--kv-remote", redis_url]
        replicas.append((subprocess.Popen(cmd, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}"))
    for _, base in replicas:
        wait_http(base + "/health")
    rport = free_port()
    router = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port",
                               str(rport), "--prometheus-port", str(free_port()), "--policy", policy, "--log-level",
                               "warn", "--worker-urls", *[b for _, b in replicas]],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rbase = f"http://127.0.0.1:{rport}"
    try:
        wait_http(rbase + "/v1/models")
        prompts = workload(args.requests, args.prompts, args.seed, args.prompt_chars)
        ttfts, lock, it = [], threading.Lock(), iter(prompts)

        def client():
            while True:
                with lock:
                    p = next(it, None)
                if p is None:
                    return
                t = stream_ttft(rbase, p, args.max_tokens)
                with lock:
                    ttfts.append(t)
        threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        ms = [metrics(b) for _, b in replicas]
        hits = sum(m["vllm:prefix_cache_hits_total"] for m in ms)
        queries = sum(m["vllm:prefix_cache_queries_total"] for m in ms)
        per_replica = [int(m["vllm:prefix_cache_queries_total"]) for m in ms]
        remote = sum(m.get("kvlm:kv_tier_hits_total", 0) for m in ms) if redis_url else 0
        return {"policy": policy + (" + redis" if redis_url else ""), "hit_rate": hits / queries,
                "ttft_p50_ms": 1000 * statistics.median(ttfts), "ttft_p90_ms": 1000 * statistics.quantiles(ttfts, n=10)[-1],
                "prompt_tokens_per_replica": per_replica, "tier_block_hits": int(remote), "wall_s": wall}
    finally:
        router.terminate()
        router.wait(timeout=10)
        for p, _ in replicas:
            p.terminate()
            p.wait(timeout=20)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(SHARED, "models", "stories260K-hf"))
    ap.add_argument("--kvlm", default=os.path.join(ROOT, "build", "kvlm"))
    ap.add_argument("--requests", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=8, help="distinct system prompts")
    ap.add_argument("--prompt-chars", type=int, default=800, help="length of each system prompt")
    ap.add_argument("--kv-blocks", type=int, default=96, help="each replica's pool, in 16-token blocks")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="compute threads per replica")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-redis", action="store_true", help="skip the round_robin + Redis row")
    args = ap.parse_args()
    rows = [run_policy(args, "round_robin", None), run_policy(args, "cache_aware", None)]
    redis_exe = shutil.which("redis-server")
    if redis_exe and not args.no_redis:
        port = free_port()
        redis = subprocess.Popen([redis_exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                  "no"], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            rows.append(run_policy(args, "round_robin", f"redis://127.0.0.1:{port}"))
        finally:
            redis.kill()
            redis.wait()
    print(json.dumps({"model": args.model, "requests": args.requests, "system_prompts": args.prompts,
                      "kv_blocks": args.kv_blocks, "concurrency": args.concurrency, "seed": args.seed, "rows": rows},
                     indent=1))
    print("\n| policy | prefix-hit rate | TTFT p50 (ms) | TTFT p90 (ms) | prompt tokens per replica | tier block hits |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['policy']} | {r['hit_rate']:.3f} | {r['ttft_p50_ms']:.1f} | {r['ttft_p90_ms']:.1f} | "
              f"{r['prompt_tokens_per_replica']} | {r['tier_block_hits']} |")


if __name__ == "__main__":
    main()
