#!/usr/bin/env python3
"""Serving benchmark: `kvlm serve` against llama-cpp-python's server on the same GGUF and threads.

Setup (once, outside the repo; llama-cpp-python compiles llama.cpp natively):
    CMAKE_ARGS="-DGGML_NATIVE=ON" ~/kvlm-venv/bin/pip install 'llama-cpp-python[server]' openai gguf sentencepiece
Run:
    ~/kvlm-venv/bin/python bench/serving_bench.py --clients 1,4,16 --requests 3

Workload: every request shares one ~1,000-token system prompt (TinyStories text) and adds a short
unique question; each asks for --max-tokens tokens, streamed, so TTFT is the time to the first
chunk. Each client sends --requests requests one after another (bounded in count); aggregate
throughput is completion tokens over the wall time of a concurrency level. Servers run one at a
time on 127.0.0.1 with the same --threads. The model is a synthetic-weight Llama (8 layers,
dim 512, GQA 8/4, Llama-2 vocabulary, context 4096) in Q8_0, written by compare_llamacpp.py's writer.
"""
import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import compare_llamacpp  # noqa: E402

compare_llamacpp.SHAPES["serving"] = dict(arch="llama", dim=512, hidden=1408, layers=8, heads=8, kv_heads=4,
                                          vocab=32000, ctx=4096)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        for path in ("/health", "/v1/models"):
            try:
                with urllib.request.urlopen(base + path, timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
        time.sleep(0.2)
    raise RuntimeError("server did not become healthy")


def start(kind, model, threads, extra=()):
    port = free_port()
    if kind == "kvlm":
        cmd = [os.path.join(ROOT, "build", "kvlm"), "serve", "--model", model, "--model-name", "m", "--port", str(port),
               "--threads", str(threads), "--max-seqs", "16", "--ctx", "4096", *extra]
    else:
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--model_alias", "m", "--port", str(port),
               "--host", "127.0.0.1", "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", "4096",
               "--n_batch", "512", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, proc)
    return proc, base


async def one_request(client, prompt, max_tokens):
    t0 = time.perf_counter()
    ttft, n = None, 0
    stream = await client.completions.create(model="m", prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True)
    async for ch in stream:
        if ch.choices and ch.choices[0].text:
            if ttft is None:
                ttft = time.perf_counter() - t0
            n += 1
    return ttft if ttft is not None else time.perf_counter() - t0, n


async def level(base, system, clients, requests, max_tokens, tag):
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
    ttfts, tokens = [], 0

    async def worker(c):
        nonlocal tokens
        for r in range(requests):
            prompt = f"{system}\nQuestion {tag}-{c}-{r}: what happened next to character number {c * 97 + r}?\nAnswer:"
            t, n = await one_request(client, prompt, max_tokens)
            ttfts.append(t)
            tokens += n

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in range(clients)))
    wall = time.perf_counter() - t0
    await client.close()
    ttfts.sort()
    p99 = ttfts[min(len(ttfts) - 1, int(round(0.99 * (len(ttfts) - 1))))]
    return {"clients": clients, "requests": len(ttfts), "ttft_p50_ms": 1000 * statistics.median(ttfts),
            "ttft_p99_ms": 1000 * p99, "tokens_per_s": tokens / wall, "completion_tokens": tokens}


async def tpot_under_traffic(base, system, traffic_clients, tokens=96):
    """Median time between streamed tokens of one request, alone or while `traffic_clients`
    clients keep the HTTP side busy (tokenizing a ~1,000-token text, JSON both ways)."""
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
    # The traffic runs in processes of their own at nice 19: on this 2-core machine the load
    # generator shares the cores with the server, and what is measured is the server's threads.
    code = ("import json,os,sys,time,urllib.request\nos.nice(19)\nbody=json.dumps({'content':sys.argv[3]}).encode()\n"
            "n=0\nend=time.time()+float(sys.argv[2])\n"
            "while time.time()<end and n<20000:\n"
            " urllib.request.urlopen(urllib.request.Request(sys.argv[1]+'/tokenize',data=body,"
            "headers={'Content-Type':'application/json'}),timeout=60).read(); n+=1\nprint(n)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, base, "4", system], stdout=subprocess.PIPE, text=True)
             for _ in range(traffic_clients)]
    await asyncio.sleep(0.5 if procs else 0)
    gaps, last = [], None
    stream = await client.completions.create(model="m", prompt="Once upon a time", max_tokens=tokens, temperature=0,
                                             stream=True, extra_body={"ignore_eos": True})
    async for ch in stream:
        now = time.perf_counter()
        if last is not None:
            gaps.append(now - last)
        last = now
    sent = sum(int(p.communicate(timeout=60)[0] or 0) for p in procs)
    await client.close()
    return 1000 * statistics.median(gaps), sent


def system_prompt(shared, words):
    text = open(os.path.join(shared, "data", "tinystories", "tinystories_val_sample.txt"), encoding="utf-8").read()
    return " ".join(text.split()[:words])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared"))
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=3, help="requests per client at each level")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--words", type=int, default=780, help="words of system prompt (about 1,000 tokens)")
    ap.add_argument("--servers", default="kvlm,kvlm-no-prefix-cache,llama-cpp-python")
    ap.add_argument("--out", default="")
    ap.add_argument("--tpot-only", action="store_true", help="only the TPOT-under-HTTP-traffic measurement (kvlm)")
    a = ap.parse_args()
    model = os.path.join("/tmp", "kvlm_serving_q8_0.gguf")
    if not os.path.exists(model):
        compare_llamacpp.write_gguf(model, "serving", "q8_0", a.shared)
    system = system_prompt(a.shared, a.words)
    results = {}
    for name in a.servers.split(","):
        kind = "kvlm" if name.startswith("kvlm") else "llama"
        extra = ("--no-prefix-cache",) if name == "kvlm-no-prefix-cache" else ()
        proc, base = start(kind, model, a.threads, extra)
        try:
            with urllib.request.urlopen(urllib.request.Request(base + ("/tokenize" if kind == "kvlm" else "/extras/tokenize"),
                                        data=json.dumps({"content": system, "input": system}).encode(),
                                        headers={"Content-Type": "application/json"}), timeout=30) as r:
                body = json.loads(r.read())
                results.setdefault("system_prompt_tokens", len(body.get("tokens", [])))
            asyncio.run(level(base, system, 1, 1, 4, "warmup"))
            rows = []
            for c in ([] if a.tpot_only else [int(x) for x in a.clients.split(",")]):
                row = asyncio.run(level(base, system, c, a.requests, a.max_tokens, f"{name}{c}"))
                print(f"{name:24s} clients {c:3d}: TTFT p50 {row['ttft_p50_ms']:8.1f} ms  p99 {row['ttft_p99_ms']:8.1f} ms  "
                      f"{row['tokens_per_s']:7.1f} tok/s", flush=True)
                rows.append(row)
            results[name] = rows
            if kind == "kvlm" and "--no-prefix-cache" not in extra:
                alone, _ = asyncio.run(tpot_under_traffic(base, system, 0))
                row = {"alone_ms": alone}
                for k in (1, 4):
                    busy, sent = asyncio.run(tpot_under_traffic(base, system, k))
                    print(f"{name:24s} TPOT alone {alone:.2f} ms, with {k} client(s) tokenizing ~1k tokens in a loop "
                          f"({sent} requests meanwhile) {busy:.2f} ms", flush=True)
                    row[f"with_{k}_traffic_clients_ms"] = busy
                    row[f"traffic_requests_{k}"] = sent
                results[name + "-tpot"] = row
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
