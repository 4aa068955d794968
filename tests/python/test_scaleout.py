"""Scale-out: two `kvlm serve` replicas sharing a Redis KV tier, publishing KV events over ZMQ,
behind sglang-router. Everything binds to 127.0.0.1 on free ports and stops inside the test.

Checked against independent pieces: the events are read by pyzmq and decoded by msgpack, their
block hashes recomputed with cbor2 + hashlib as vLLM defines them; the router is sglang-router
from PyPI; the clients are the openai package and plain HTTP.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import cbor2
import msgpack
import openai
import pytest
import zmq

sys.path.insert(0, os.path.dirname(__file__))
from conftest import CHATML, Server, need_shared  # noqa: E402

DEADLINE_S = 30  # every wait below is bounded by this


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metric(base, name):
    """Sum of a Prometheus series' samples (all label sets) from /metrics."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    assert seen, f"{name} missing from /metrics"
    return total


def wait_for(cond, what):
    deadline = time.time() + DEADLINE_S
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Redis:
    def __init__(self, port):
        exe = shutil.which("redis-server")
        if not exe:
            pytest.fail("redis-server is not installed (scripts/deps.sh installs it)")
        self.port = port
        self.proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.up, "redis-server to accept connections")

    def up(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


# vLLM's block hashes, written from its definition (vllm/utils/hashing.py, kv_cache_utils.py):
# hash = SHA-256 over canonical CBOR (parent, tuple(tokens), extra_keys); the first block's parent
# is SHA-256 over CBOR of the seed (PYTHONHASHSEED); the 64-bit variant keeps the low 64 bits of
# every hash and chains on those.
def vllm_hashes(tokens, block_size, seed, int64):
    def h(x):
        d = hashlib.sha256(cbor2.dumps(x, canonical=True)).digest()
        return int.from_bytes(d, "big") & ((1 << 64) - 1) if int64 else d
    parent, out = h(seed), []
    for i in range(len(tokens) // block_size):
        parent = h((parent, tuple(tokens[i * block_size:(i + 1) * block_size]), None))
        out.append(parent)
    return out


class Subscriber:
    def __init__(self, pub, replay):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.connect(pub)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.replay_endpoint = replay
        self.batches = {}  # seq -> decoded batch

    def drain(self, ms=50):
        while self.sub.poll(ms):
            topic, seq, payload = self.sub.recv_multipart()
            assert topic == b""
            assert len(seq) == 8
            self.batches[int.from_bytes(seq, "big")] = msgpack.unpackb(payload)

    def replay(self, start):
        d = self.ctx.socket(zmq.DEALER)
        d.connect(self.replay_endpoint)
        d.send_multipart([b"", start.to_bytes(8, "big")])  # REQ's envelope, then the start
        got = []
        while d.poll(DEADLINE_S * 1000):
            frames = d.recv_multipart()
            assert frames[0] == b""
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq == -1:
                assert frames[2] == b""
                break
            got.append((seq, msgpack.unpackb(frames[2])))
        d.close(0)
        return got

    def events(self):
        return [e for seq in sorted(self.batches) for e in self.batches[seq][1]]

    def close(self):
        self.ctx.destroy(0)


@pytest.fixture(scope="module")
def cluster():
    need_shared()
    redis = Redis(free_port())
    remote = f"redis://127.0.0.1:{redis.port}"
    ev = {name: f"tcp://127.0.0.1:{free_port()}" for name in ("a", "a_replay", "b", "b_replay")}
    a = Server("--kv-remote", remote, "--kv-events", ev["a"], "--kv-events-replay", ev["a_replay"],
               "--prefix-hash", "sha256_cbor_64bit", "--prefix-hash-seed", "0")
    b = Server("--kv-remote", remote, "--kv-events", ev["b"], "--kv-events-replay", ev["b_replay"],
               "--prefix-hash", "sha256_cbor", "--prefix-hash-seed", "1234")
    router_port = free_port()
    router = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                               "--port", str(router_port), "--prometheus-port", str(free_port()),
                               "--worker-urls", a.base, b.base, "--policy", "cache_aware", "--log-level", "warn"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{router_port}"

    def router_up():
        try:
            with urllib.request.urlopen(base + "/v1/models", timeout=2) as r:
                return r.status == 200
        except Exception:
            return False
    state = {"redis": redis, "a": a, "b": b, "router": base, "events": ev, "remote": remote}
    try:
        wait_for(router_up, "sglang-router to serve /v1/models")
        yield state
    finally:
        router.terminate()
        try:
            router.wait(timeout=10)
        except subprocess.TimeoutExpired:
            router.kill()
        a.stop()
        b.stop()
        # The Redis running now: a test restarts it (a new process on the same port), and
        # stopping the first one only left the second running after the tests.
        state["redis"].stop()
        redis.stop()


def complete(base, prompt, n=6):
    return http_json(base + "/v1/completions", {"model": "stories", "prompt": prompt, "max_tokens": n, "temperature": 0})


def tokens_of(base, prompt):
    return http_json(base + "/tokenize", {"content": prompt, "add_special": True})["tokens"]


PROMPT_A = ("Once upon a time there was a little girl named Lily. She loved to play outside in the park with her "
            "friends every day, and one day she found a big red ball under a tree.")


def test_events_are_vllm_batches_whose_hashes_an_indexer_reproduces(cluster):
    a, b = cluster["a"], cluster["b"]
    subs = {n: Subscriber(cluster["events"][n], cluster["events"][n + "_replay"]) for n in ("a", "b")}
    try:
        time.sleep(0.3)  # a SUB socket sees only what is published after it joins
        for name, server, seed, int64 in (("a", a, "0", True), ("b", b, "1234", False)):
            prompt = f"Replica {name} tells this story. " + PROMPT_A
            complete(server.base, prompt)
            toks = tokens_of(server.base, prompt)
            want = vllm_hashes(toks, 16, seed, int64)
            sub = subs[name]

            def stored():
                sub.drain()
                got = [h for e in sub.events() if e[0] == "BlockStored" and e[-1] == "pool" for h in e[1]]
                return all(h in got for h in want)
            wait_for(stored, f"replica {name}'s BlockStored events for the prompt's {len(want)} blocks")
            assert len(want) >= 2
            # The batch shape: [timestamp, [events], dp_rank], events as vLLM's tagged arrays.
            for seq, batch in sub.batches.items():
                assert len(batch) == 3 and isinstance(batch[0], float) and batch[2] == 0
                assert abs(batch[0] - time.time()) < 600
            events = [e for e in sub.events() if e[0] == "BlockStored" and e[-1] == "pool" and want[0] in e[1]]
            assert events, "the first block's BlockStored event"
            e = events[0]
            assert len(e) == 7 and e[4] == 16 and e[5] is None
            i = e[1].index(want[0])
            assert e[2] is None if i == 0 else e[2] is not None
            # Token ids are the blocks' own, in order; the hashes chain through the parents.
            assert e[3][16 * i:16 * (i + 1)] == toks[:16]
            if int64:
                assert all(isinstance(h, int) for h in e[1])
            else:
                assert all(isinstance(h, bytes) and len(h) == 32 for h in e[1])
            # The Redis tier announces what it wrote, in the same hashes.
            def remote_stored():
                sub.drain()
                return any(e[0] == "BlockStored" and e[-1] == "remote" and want[0] in e[1] for e in sub.events())
            wait_for(remote_stored, f"replica {name}'s BlockStored events for medium 'remote'")
            # Replay from 0 gives every batch still buffered, from the first (AllBlocksCleared).
            replayed = sub.replay(0)
            assert replayed[0][0] == 0 and replayed[0][1][1][0] == ["AllBlocksCleared"]
            assert [s for s, _ in replayed] == list(range(len(replayed)))
            for seq, batch in replayed:
                if seq in sub.batches:
                    assert batch == sub.batches[seq]
            assert metric(server.base, "kvlm:kv_event_replays_total") >= 1
            # A malformed request (no 8-byte seq) gets the end marker alone, not silence.
            bad = sub.ctx.socket(zmq.DEALER)
            bad.connect(sub.replay_endpoint)
            bad.send_multipart([b"", b"not a seq"])
            assert bad.poll(DEADLINE_S * 1000), "no answer to a malformed replay request"
            assert bad.recv_multipart() == [b"", (-1).to_bytes(8, "big", signed=True), b""]
            bad.close(0)
    finally:
        for s in subs.values():
            s.close()


def test_a_prefix_computed_on_one_replica_is_reused_on_the_other_through_redis(cluster):
    a, b = cluster["a"], cluster["b"]
    prompt = "This prompt is computed on replica A first. " + PROMPT_A
    written = metric(a.base, "kvlm:kv_remote_written_total")
    first = complete(a.base, prompt)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    wait_for(lambda: metric(a.base, "kvlm:kv_remote_written_total") > written, "replica A's blocks to reach Redis")
    hits = metric(b.base, "kvlm:kv_tier_hits_total")
    second = complete(b.base, prompt)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert metric(b.base, "kvlm:kv_tier_hits_total") > hits
    assert second["choices"][0]["text"] == first["choices"][0]["text"]


def test_redis_stopped_mid_run_changes_no_answer_and_is_used_again_when_back(cluster):
    a, b, redis = cluster["a"], cluster["b"], cluster["redis"]
    prompts = [f"Story number {i} begins with a dog. " + PROMPT_A for i in range(3)]
    # References from a replica that never saw these prompts, Redis up (b computes, then a reads).
    want = [complete(b.base, p)["choices"][0]["text"] for p in prompts]
    redis.stop()
    for p, w in zip(prompts, want):
        for server in (a, b):
            got = complete(server.base, p)
            assert got["choices"][0]["text"] == w
    for p in ["A new prompt while Redis is down. " + PROMPT_A]:
        assert complete(a.base, p)["choices"][0]["text"]
    wait_for(lambda: metric(a.base, "kvlm:kv_remote_up") == 0, "replica A to report Redis down")
    assert metric(a.base, "kvlm:kv_remote_failures_total") >= 1
    # Back on the same port (empty): replicas reconnect and share again, with no restart.
    cluster["redis"] = redis = Redis(redis.port)
    written = metric(a.base, "kvlm:kv_remote_written_total")
    deadline = time.time() + DEADLINE_S
    # The writer reconnects on its next write and the reader (whose connection kv_remote_up
    # reports) on its next lookup after its one-second back-off: requests until both have.
    def back():
        return metric(a.base, "kvlm:kv_remote_written_total") > written and metric(a.base, "kvlm:kv_remote_up") == 1
    while not back() and time.time() < deadline:
        complete(a.base, f"Redis came back at {time.time()}. " + PROMPT_A)  # each a fresh prefix to publish
        time.sleep(0.3)
    assert metric(a.base, "kvlm:kv_remote_written_total") > written, "replica A never wrote to Redis again"
    assert metric(a.base, "kvlm:kv_remote_up") == 1, "replica A's reader never reconnected"


def redis_cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_tampered_redis_block_is_refused_by_reason_and_recomputed(cluster):
    a, b, redis = cluster["a"], cluster["b"], cluster["redis"]
    prompt = "A block in Redis is damaged before replica B reads it. " + PROMPT_A
    want = complete(a.base, prompt)["choices"][0]["text"]
    wait_for(lambda: redis_cli(redis.port, "--scan", "--pattern", "kvlm@*").strip() != b"", "blocks in Redis")
    time.sleep(0.5)  # the writer lands the rest of this prompt's blocks
    keys = redis_cli(redis.port, "--scan", "--pattern", "kvlm@*").split()
    assert all(re.fullmatch(rb"kvlm@[0-9a-f]{16}@f32x16@[0-9a-f]{64}", k) for k in keys), keys[:3]
    for k in keys:  # one payload byte changed in every record (the header is 176 bytes)
        old = redis_cli(redis.port, "GETRANGE", k, "200", "200")[:1]
        redis_cli(redis.port, "SETRANGE", k, "200", "B" if old == b"A" else "A")
    before = metric(b.base, "kvlm:kv_tier_verification_failures_total")
    got = complete(b.base, prompt)
    assert got["choices"][0]["text"] == want
    assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert metric(b.base, "kvlm:kv_tier_verification_failures_total") > before


def test_a_hung_redis_costs_bounded_time_and_changes_no_answer(cluster):
    a, b, redis = cluster["a"], cluster["b"], cluster["redis"]
    prompts = [f"Redis hangs during story {i}. " + PROMPT_A for i in range(3)]
    want = [complete(a.base, p)["choices"][0]["text"] for p in prompts]
    redis.proc.send_signal(signal.SIGSTOP)  # accepts connections (the kernel does), never answers
    try:
        for p, w in zip(prompts, want):
            t0 = time.time()
            got = complete(b.base, p)
            assert got["choices"][0]["text"] == w
            assert time.time() - t0 < 5, "a request waited on a hung Redis past its timeouts"
    finally:
        redis.proc.send_signal(signal.SIGCONT)


def test_sglang_router_serves_completions_and_chat_streamed_and_not(cluster):
    # The router's own probe, which deploy/k8s/router.yaml uses.
    with urllib.request.urlopen(cluster["router"] + "/health", timeout=10) as r:
        assert r.status == 200
    client = openai.OpenAI(base_url=cluster["router"] + "/v1", api_key="unused", max_retries=0, timeout=60)
    direct = openai.OpenAI(base_url=cluster["a"].base + "/v1", api_key="unused", max_retries=0, timeout=60)
    prompt = "Once upon a time"
    want = direct.completions.create(model="stories", prompt=prompt, max_tokens=8, temperature=0).choices[0].text
    got = client.completions.create(model="stories", prompt=prompt, max_tokens=8, temperature=0)
    assert got.choices[0].text == want and got.usage.completion_tokens == 8
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="stories", prompt=prompt, max_tokens=8, temperature=0, stream=True) if c.choices)
    assert streamed == want
    messages = [{"role": "system", "content": "You tell short stories."}, {"role": "user", "content": "A cat?"}]
    want_chat = direct.chat.completions.create(model="stories", messages=messages, max_tokens=8,
                                               temperature=0).choices[0].message.content
    chat = client.chat.completions.create(model="stories", messages=messages, max_tokens=8, temperature=0)
    assert chat.choices[0].message.content == want_chat and chat.choices[0].finish_reason == "length"
    streamed_chat = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="stories", messages=messages, max_tokens=8, temperature=0, stream=True) if c.choices)
    assert streamed_chat == want_chat
    # Through the router, a shared prefix lands where it is cached: the second request hits.
    long_prompt = "The router keeps this prefix on one replica. " + PROMPT_A
    client.completions.create(model="stories", prompt=long_prompt, max_tokens=2, temperature=0)
    again = client.completions.create(model="stories", prompt=long_prompt + " And again.", max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_bad_scale_out_flags_are_clear_errors():
    need_shared()
    from conftest import BIN, STORIES_HF
    cases = [
        (["--kv-remote", "http://127.0.0.1:1"], "redis://"),
        (["--kv-remote", "redis://127.0.0.1:99999"], "bad port"),
        (["--prefix-hash", "md5"], "unknown --prefix-hash"),
        (["--kv-events-replay", "tcp://127.0.0.1:1"], "needs --kv-events"),
        (["--kv-events", "nonsense://x"], "--kv-events: cannot bind"),
        (["--kv-events", "tcp://127.0.0.1:1", "--no-prefix-cache"], "need it"),
    ]
    for flags, message in cases:
        out = subprocess.run([BIN, "serve", "--model", STORIES_HF, "--port", "0", *flags], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode != 0, flags
        assert message in out.stderr, (flags, out.stderr)
