#!/usr/bin/env python3
"""Load test for `kvlm serve`: many concurrent clients for a bounded time, through the real openai client.

Run (the figures in docs/benchmarks.md, section 8):
    .venv/bin/python bench/load_test.py --clients 64 --seconds 120
It starts `kvlm serve` on stories260K (or uses --url) and prints a JSON report. tests/python/test_load.py
runs the same function for a shorter time and asserts its checks.

Workload: each client loops until the deadline, drawing requests at random (fixed seed per client)
from a menu of 256, each streamed or whole at random; the menu mixes:
  - chat or text completion; streamed (with usage) or whole;
  - a prompt of 1 to 5 TinyStories sentences, half of the chat requests behind one of four long
    shared system prompts (prefix sharing);
  - max_tokens between 4 and 96; greedy, or sampled with a seed (still deterministic).
A menu item recurs several times in a run, streamed or not and under different batch company.
Checks, per request: status 200 (a 5xx or any other status is counted); a streamed request has one
id across its chunks, exactly one finish_reason, and usage; completion_tokens within max_tokens; no
response id seen twice. Across requests: the same request (same prompt, params and seed) always
gets the same text, so a token delivered to the wrong request or a lost one shows up.
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("KVLM_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))

SYSTEM_PROMPTS = [
    "You are a storyteller for small children. Tell short, happy stories with simple words. " * 2,
    "You are a helpful assistant who writes about animals in the park, the sun and friendship. " * 2,
    "You write stories about a little girl named Lily and her dog, who like to play outside. " * 2,
    "You are a kind teacher. Explain things to a child in a few short sentences, with a story. " * 2,
]


def sentences(path, limit=2000):
    text = open(path, encoding="utf-8").read()
    out = [s.strip() + "." for s in text.replace("\n", " ").split(".") if len(s.strip()) > 10]
    return out[:limit]


def make_request(rng, corpus):
    """One random request: (kind, stream, body)."""
    chat = rng.random() < 0.5
    stream = rng.random() < 0.6
    start = rng.randrange(0, len(corpus) - 8)
    text = " ".join(corpus[start:start + rng.choice([1, 2, 3, 5])])
    body = {"max_tokens": rng.choice([4, 16, 32, 64, 96])}
    if rng.random() < 0.7:
        body["temperature"] = 0
    else:
        body.update(temperature=0.8, top_p=0.95, seed=rng.randrange(1 << 20))
    if chat:
        msgs = [{"role": "user", "content": text}]
        if rng.random() < 0.5:
            msgs.insert(0, {"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        body["messages"] = msgs
    else:
        body["prompt"] = text
    return ("chat" if chat else "text"), stream, body


def request_menu(corpus, size=256, seed=7):
    """A fixed menu the clients draw from, so that each request recurs several times (streamed or
    not, under different batch company) and every answer can be compared with its earlier ones."""
    rng = random.Random(seed)
    return [make_request(rng, corpus) for _ in range(size)]


def percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


class Tally:
    def __init__(self):
        self.ok = 0
        self.status = {}       # HTTP status -> count, for every failed request
        self.errors = []       # first few failures, for the report
        self.ttft = []         # streamed requests, seconds
        self.e2e = []          # all successful requests, seconds
        self.tokens = 0        # completion tokens over successful requests
        self.ids = set()
        self.duplicate_ids = 0
        self.answers = {}      # request key -> text
        self.mismatches = 0
        self.protocol = 0      # malformed streams: several ids, no or several finish_reason, no usage

    def fail(self, status, what):
        self.status[status] = self.status.get(status, 0) + 1
        if len(self.errors) < 10:
            self.errors.append(f"{status}: {what}")

    def answer(self, key, rid, text, tokens, started, first, ended, streamed):
        if rid in self.ids:
            self.duplicate_ids += 1
        self.ids.add(rid)
        seen = self.answers.setdefault(key, text)
        if seen != text:
            self.mismatches += 1
            if len(self.errors) < 10:
                self.errors.append(f"mismatch for {key[:80]}...: {seen[:40]!r} vs {text[:40]!r}")
        self.ok += 1
        self.tokens += tokens
        self.e2e.append(ended - started)
        if streamed and first is not None:
            self.ttft.append(first - started)


async def one_request(client, model, kind, stream, body, tally):
    key = json.dumps([kind, body], sort_keys=True)  # streamed or not, the same text
    t0 = time.perf_counter()
    try:
        if kind == "chat":
            create = client.chat.completions.create
        else:
            create = client.completions.create
        args = dict(model=model, **body)
        if not stream:
            r = await create(**args)
            t1 = time.perf_counter()
            c = r.choices[0]
            text = c.message.content if kind == "chat" else c.text
            if c.finish_reason not in ("stop", "length") or r.usage.completion_tokens > body["max_tokens"]:
                tally.protocol += 1
            tally.answer(key, r.id, text, r.usage.completion_tokens, t0, None, t1, False)
            return
        s = await create(**args, stream=True, stream_options={"include_usage": True})
        ids, finishes, parts, first, usage = set(), 0, [], None, None
        async for ch in s:
            ids.add(ch.id)
            if ch.usage is not None:
                usage = ch.usage
            for c in ch.choices:
                piece = (c.delta.content if kind == "chat" else c.text) or ""
                if piece and first is None:
                    first = time.perf_counter()
                parts.append(piece)
                if c.finish_reason is not None:
                    finishes += 1
        t1 = time.perf_counter()
        if len(ids) != 1 or finishes != 1 or usage is None or usage.completion_tokens > body["max_tokens"]:
            tally.protocol += 1
            if len(tally.errors) < 10:
                tally.errors.append(f"stream: ids={len(ids)} finishes={finishes} usage={usage}")
            return
        tally.answer(key, ids.pop(), "".join(parts), usage.completion_tokens, t0, first, t1, True)
    except openai.APIStatusError as e:
        tally.fail(e.status_code, str(e)[:200])
    except Exception as e:  # a dropped connection or a malformed response is a failure too
        tally.fail("exception", f"{type(e).__name__}: {str(e)[:200]}")


async def client_loop(base, seed, deadline, menu, tally, max_requests):
    rng = random.Random(seed)
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="load-test", max_retries=0, timeout=120) as client:
        try:
            model = (await client.models.list()).data[0].id
        except Exception as e:  # the server is gone (the kill -9 test) or not answering
            tally.fail("exception", f"models.list: {type(e).__name__}: {str(e)[:200]}")
            return
        for _ in range(max_requests):  # bounded in count as well as in time
            if time.perf_counter() >= deadline:
                break
            kind, _, body = rng.choice(menu)
            stream = rng.random() < 0.6
            await one_request(client, model, kind, stream, body, tally)


async def run_load_async(base, clients, seconds, max_requests_per_client=100000, seed=1):
    menu = request_menu(sentences(os.path.join(SHARED, "data", "tinystories", "tinystories_val_sample.txt")))
    tally = Tally()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    await asyncio.gather(*[client_loop(base, seed * 1000 + i, deadline, menu, tally, max_requests_per_client)
                           for i in range(clients)])
    wall = time.perf_counter() - t0
    ms = lambda x: None if x is None else round(1000 * x, 1)  # noqa: E731
    return {
        "clients": clients, "seconds": round(wall, 1), "requests_ok": tally.ok,
        "failed_by_status": {str(k): v for k, v in tally.status.items()},
        "server_errors_5xx": sum(v for k, v in tally.status.items() if isinstance(k, int) and k >= 500),
        "duplicate_ids": tally.duplicate_ids, "mismatched_answers": tally.mismatches,
        "malformed_responses": tally.protocol, "distinct_requests": len(tally.answers),
        "ttft_ms_p50": ms(percentile(tally.ttft, 50)), "ttft_ms_p99": ms(percentile(tally.ttft, 99)),
        "e2e_ms_p50": ms(percentile(tally.e2e, 50)), "e2e_ms_p99": ms(percentile(tally.e2e, 99)),
        "completion_tokens": tally.tokens, "tokens_per_s": round(tally.tokens / wall, 1),
        "requests_per_s": round(tally.ok / wall, 2), "errors": tally.errors,
        "mean_ttft_ms": ms(statistics.mean(tally.ttft)) if tally.ttft else None,
    }


def run_load(base, clients, seconds, **kw):
    return asyncio.run(run_load_async(base, clients, seconds, **kw))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--url", help="an already running server (default: start kvlm serve on stories260K)")
    ap.add_argument("--serve-args", default="", help="extra flags for kvlm serve")
    a = ap.parse_args()
    server = None
    base = a.url
    if not base:
        sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
        from conftest import Server
        server = Server(*a.serve_args.split())
        base = server.base
    try:
        report = run_load(base, a.clients, a.seconds)
        if server:
            report["server_kv_after"] = {k: v for k, v in server.kv().items() if k != "ledger"}
    finally:
        if server:
            server.stop()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
