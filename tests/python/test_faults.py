"""Fault tests for `kvlm serve`, bounded in count and time, on 127.0.0.1:
random client disconnects, kill -9 mid-load and restart, and a flood under a memory limit.
"""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from conftest import BIN, ROOT, STORIES_HF, Server, generate_cli

sys.path.insert(0, os.path.join(ROOT, "bench"))
import load_test  # noqa: E402


def http_request(port, body, path="/v1/completions", timeout=60, headers=None):
    """One raw HTTP/1.1 request; returns (status, body bytes). Connection: close. `headers`, a
    dict, receives the response's headers (lower-case names)."""
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head + data)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    raw = b"".join(chunks)
    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else -1
    head, _, rest = raw.partition(b"\r\n\r\n")
    if headers is not None:
        for line in head.decode("latin-1").split("\r\n")[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    if b"transfer-encoding: chunked" in head.lower():
        return status, dechunk(rest)
    return status, rest


def dechunk(data):
    """The body of a chunked response; raises on a truncated one (a lost answer must not pass)."""
    out, i = [], 0
    while True:
        j = data.index(b"\r\n", i)
        size = int(data[i:j].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        if j + 2 + size > len(data):
            raise ValueError("truncated chunked body")
        out.append(data[j + 2:j + 2 + size])
        i = j + 2 + size + 2


def assert_idle(server):
    kv = server.wait_idle()
    assert kv["active_requests"] == 0 and kv["running"] == 0 and kv["waiting"] == 0, kv
    assert kv["engine_sequences"] == 0, kv
    assert kv["blocks_referenced"] == 0, kv  # every block's refcount is zero
    assert kv["blocks_free"] == kv["blocks_total"], kv
    assert kv["ledger"]["private_bytes"] == 0 and kv["ledger"]["shared_bytes"] == 0, kv["ledger"]


def disconnecting_client(port, rng, prompt):
    """A client that drops at a random point of a request's life. Returns the point."""
    stream = rng.random() < 0.6
    body = {"prompt": prompt, "max_tokens": rng.choice([8, 64, 200]), "temperature": 0, "stream": stream,
            "ignore_eos": True}
    data = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    point = rng.choice(["in_headers", "in_body", "before_response", "after_headers", "mid_stream", "shutdown_write"])
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        if point == "in_headers":
            s.sendall(head[: rng.randrange(1, len(head))])
        elif point == "in_body":
            s.sendall(head + data[: rng.randrange(1, len(data))])
        else:
            s.sendall(head + data)
            if point == "shutdown_write":
                s.shutdown(socket.SHUT_WR)  # half-close: the response may still come
            if point in ("after_headers", "mid_stream"):
                got = b""
                want = rng.randrange(1, 2000) if point == "mid_stream" else 1
                while len(got) < want:
                    b = s.recv(want - len(got))
                    if not b:
                        break
                    got += b
            if point == "before_response":
                time.sleep(rng.random() * 0.05)
        # SO_LINGER 0: close with a reset now and then, as a crashed client would
        if rng.random() < 0.5:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    finally:
        s.close()
    return point


def test_random_disconnects_leave_the_ledger_idle():
    """96 clients drop at random points (mid-headers, mid-body, waiting, mid-stream, reset or
    FIN) while 16 well-behaved clients run alongside; the well-behaved ones get the exact greedy
    answer, and afterwards the ledger is back at idle with every refcount zero."""
    s = Server("--max-seqs", "8", "--io-timeout", "3")
    try:
        prompt = "Once upon a time, there was a little dog"
        ref = generate_cli(prompt, 40, "--ignore-eos")["text"]
        rng = random.Random(1234)
        seeds = [rng.randrange(1 << 30) for _ in range(96)]
        points, good, errors = [], [], []

        def dropper(seed):
            try:
                points.append(disconnecting_client(s.port, random.Random(seed), prompt))
            except OSError as e:  # a reset from the server side is fine for a client that misbehaves
                points.append("oserror:" + type(e).__name__)

        def well_behaved():
            try:
                st, body = http_request(s.port, {"prompt": prompt, "max_tokens": 40, "temperature": 0,
                                                 "ignore_eos": True})
                good.append((st, json.loads(body)["choices"][0]["text"] if st == 200 else body))
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

        threads = [threading.Thread(target=dropper, args=(x,)) for x in seeds]
        threads += [threading.Thread(target=well_behaved) for _ in range(16)]
        random.Random(5).shuffle(threads)
        for t in threads:
            t.start()
            time.sleep(0.002)
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        assert len(good) == 16 and all(st == 200 and text == ref for st, text in good), good[:3]
        assert len(set(points)) >= 5, points  # the random points covered most kinds
        assert_idle(s)
        # The server goes on: a fresh request after the storm is answered exactly.
        st, body = http_request(s.port, {"prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True})
        assert st == 200 and json.loads(body)["choices"][0]["text"] == ref
        assert s.proc.poll() is None
    finally:
        s.stop()


def test_kill_9_mid_load_then_restart(tmp_path):
    """kill -9 the server while 32 clients load it; a restart on the same port serves again,
    exactly, and the server wrote nothing to disk (its working directory stays empty)."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    s = Server(cwd=str(workdir))
    port = s.port
    report = {}

    def load():
        report.update(load_test.run_load(s.base, clients=32, seconds=6))

    t = threading.Thread(target=load)
    t.start()
    deadline = time.time() + 30
    while s.kv()["generated_tokens"] < 500 and time.time() < deadline:  # well into the load
        time.sleep(0.05)
    time.sleep(0.5)
    assert s.proc.poll() is None
    os.kill(s.proc.pid, signal.SIGKILL)
    s.proc.wait(timeout=10)
    assert s.proc.returncode == -signal.SIGKILL
    t.join(timeout=60)
    assert not t.is_alive()
    assert report["requests_ok"] > 0  # it was serving when killed
    assert list(workdir.iterdir()) == []

    s2 = Server(port=port, cwd=str(workdir))  # the same port, at once (SO_REUSEADDR)
    try:
        assert s2.port == port
        prompt = "Once upon a time"
        ref = generate_cli(prompt, 30, "--ignore-eos")["text"]
        st, body = http_request(port, {"prompt": prompt, "max_tokens": 30, "temperature": 0, "ignore_eos": True})
        assert st == 200 and json.loads(body)["choices"][0]["text"] == ref
        # A second server on a port in use fails clearly (no SO_REUSEPORT: it must not share it).
        third = subprocess.run([BIN, "serve", "--model", STORIES_HF, "--port", str(port)], capture_output=True, text=True,
                               timeout=60)
        assert third.returncode != 0 and "cannot listen on" in third.stderr, third.stderr
        after = load_test.run_load(s2.base, clients=16, seconds=3)
        assert after["requests_ok"] > 0 and not after["failed_by_status"], after
        assert after["mismatched_answers"] == 0 and after["malformed_responses"] == 0, after
        assert_idle(s2)
        assert list(workdir.iterdir()) == []
    finally:
        s2.stop()


# --- a flood under a memory limit ---------------------------------------------------------------

# 256 MiB; under AddressSanitizer (shadow memory, a 256 MiB quarantine of freed blocks) 1 GiB.
MEMORY_LIMIT = (1024 if os.environ.get("KVLM_SANITIZED") == "1" else 256) << 20


class MemoryLimit:
    """Runs a command under a memory limit: a cgroup of our own (v2, else v1) when this machine
    lets us make one, else prlimit's address-space limit. Reports the peak and any OOM kill."""

    def __init__(self, limit):
        self.limit = limit
        self.dir = None
        self.kind = None
        for kind, root, ctrl in (("v2", "/sys/fs/cgroup", ""), ("v1", "/sys/fs/cgroup/memory", "memory")):
            path = self.own_cgroup(ctrl)
            if path is None:
                continue
            parent = root + path
            if not os.path.exists(os.path.join(parent, "cgroup.procs")):
                continue  # not a cgroup file system there (v1 machines have a tmpfs at /sys/fs/cgroup)
            d = os.path.join(parent, f"kvlm-flood-{os.getpid()}")
            try:
                os.mkdir(d)
                if not os.path.exists(os.path.join(d, "cgroup.procs")):
                    raise OSError("not a cgroup")
                limit_file = "memory.max" if kind == "v2" else "memory.limit_in_bytes"
                with open(os.path.join(d, limit_file), "w") as f:
                    f.write(str(limit))
                self.dir, self.kind = d, kind
                break
            except OSError:
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        if self.dir:
            self.wrap = ["sh", "-c", f'echo $$ > {self.dir}/cgroup.procs && exec "$@"', "sh"]
        else:
            self.kind = "prlimit"
            self.wrap = ["prlimit", f"--as={limit * 8}"]  # address space, not RSS: a loose bound

    @staticmethod
    def own_cgroup(controller):
        for line in open("/proc/self/cgroup"):
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if (controller == "" and ctrls == "") or controller in ctrls.split(","):
                return path.rstrip("/")
        return None

    def peak_and_oom(self, pid):
        if self.kind == "v2":
            peak = int(open(os.path.join(self.dir, "memory.peak")).read()) if os.path.exists(
                os.path.join(self.dir, "memory.peak")) else 0
            events = dict(line.split() for line in open(os.path.join(self.dir, "memory.events")))
            return peak, int(events.get("oom_kill", 0))
        if self.kind == "v1":
            peak = int(open(os.path.join(self.dir, "memory.max_usage_in_bytes")).read())
            ctl = dict(line.split() for line in open(os.path.join(self.dir, "memory.oom_control")))
            return peak, int(ctl.get("oom_kill", 0))
        hwm = [line for line in open(f"/proc/{pid}/status") if line.startswith("VmHWM:")][0]
        return int(hwm.split()[1]) * 1024, 0

    def close(self):
        if self.dir:
            for _ in range(50):
                try:
                    os.rmdir(self.dir)
                    return
                except OSError:
                    time.sleep(0.1)


def test_flood_under_a_memory_limit():
    """600 requests at once against a server in a 256 MiB memory cgroup: small prompts, 1 MiB
    prompts, garbage, streams and not; more than --max-queue and more than the HTTP threads. No OOM
    kill, the peak stays under the limit, and every request the server accepted completes with its
    full, exact answer; the rest get a clear error: 400, or 429 / 503 with Retry-After."""
    lim = MemoryLimit(MEMORY_LIMIT)
    s = None
    try:
        s = Server("--max-queue", "24", "--max-seqs", "8", "--http-threads", "32", "--max-pending-connections", "32",
                   wrap=lim.wrap)
        print(f"memory limit via {lim.kind}: {MEMORY_LIMIT >> 20} MiB")
        prompt = "Once upon a time, there was a little girl"
        ref = {n: generate_cli(prompt, n, "--ignore-eos")["text"] for n in (16, 48)}
        rng = random.Random(99)
        results, checked, lock = [], [], threading.Lock()
        big = ("Once upon a time " * 60000)[: 1 << 20]  # 1 MiB of text: far over the context

        def one(i):
            r = random.Random(i)
            kind = r.choices(["small", "big", "garbage", "stream"], [0.55, 0.15, 0.1, 0.2])[0]
            hdr = {}
            try:
                if kind == "big":
                    st, body = http_request(s.port, {"prompt": big, "max_tokens": 8}, headers=hdr)
                elif kind == "garbage":
                    st, body = http_request(s.port, b"{" * 200000, headers=hdr)
                else:
                    n = r.choice([16, 48])
                    st, body = http_request(s.port, {"prompt": prompt, "max_tokens": n, "temperature": 0,
                                                     "ignore_eos": True, "stream": kind == "stream"}, headers=hdr)
                if st in (429, 503) and hdr.get("retry-after") != "1":
                    st = f"{st} without Retry-After"
                if st == 200:  # an accepted request: its whole answer, exactly
                    if kind == "stream":
                        events = [json.loads(x[6:]) for x in body.decode().split("\n\n") if x.startswith("data: {")]
                        text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
                        assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]
                    else:
                        text = json.loads(body)["choices"][0]["text"]
                    if text != ref[n]:
                        st = f"wrong answer: {text[:40]!r}"
                    with lock:
                        checked.append(kind)
                with lock:
                    results.append((kind, st))
            except Exception as e:  # noqa: BLE001 - a dropped accepted request is the failure we look for
                with lock:
                    results.append((kind, f"exception {type(e).__name__}: {e}"))

        order = list(range(600))
        rng.shuffle(order)
        threads = [threading.Thread(target=one, args=(i,)) for i in order]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads)
        assert s.proc.poll() is None, "the server died"
        peak, oom = lim.peak_and_oom(s.proc.pid)
        print(f"peak memory {peak / 2**20:.0f} MiB of {MEMORY_LIMIT >> 20} MiB; statuses:",
              {k: sum(1 for r in results if r[1] == k) for k in set(r[1] for r in results)})
        assert oom == 0
        assert 0 < peak < MEMORY_LIMIT
        bad = [r for r in results if not isinstance(r[1], int)]
        assert not bad, bad[:5]
        # The exact-answer check above ran on answered requests of both kinds.
        assert "small" in checked and "stream" in checked, checked
        by = {}
        for kind, st in results:
            by.setdefault(kind, set()).add(st)
        assert by["small"] <= {200, 429, 503} and 200 in by["small"], by
        assert by["stream"] <= {200, 429, 503} and 200 in by["stream"], by
        assert by["big"] <= {400, 503}, by
        assert by["garbage"] <= {400, 503}, by
        statuses = {st for _, st in results}
        # A limit was reached; which one (queue 429 or connections 503) depends on timing, so the
        # connection limit is shown deterministically in test_connection_overflow_gets_503.
        assert statuses & {429, 503}, statuses
        assert_idle(s)
    finally:
        if s:
            s.stop()
        lim.close()


def test_connection_overflow_gets_503():
    """Idle connections fill the HTTP threads and the pending queue; the next request is answered
    503 with Retry-After at once (not queued without bound, not hung), and once the idle
    connections leave, requests are served again."""
    s = Server("--http-threads", "2", "--max-pending-connections", "2", "--io-timeout", "30")
    try:
        idle = []
        try:
            for _ in range(4):  # 2 hold the threads (reading headers), 2 wait in the queue
                idle.append(socket.create_connection(("127.0.0.1", s.port), timeout=10))
                time.sleep(0.2)
            hdr = {}
            t0 = time.time()
            st, body = http_request(s.port, {"prompt": "Once", "max_tokens": 2}, headers=hdr, timeout=10)
            assert st == 503, (st, body[:200])
            assert hdr.get("retry-after") == "1", hdr
            assert json.loads(body)["error"]["message"], body
            assert time.time() - t0 < 5
        finally:
            for c in idle:
                c.close()
        deadline = time.time() + 20
        st = None
        while time.time() < deadline and st != 200:
            st, _ = http_request(s.port, {"prompt": "Once", "max_tokens": 2})
            time.sleep(0.1)
        assert st == 200
    finally:
        s.stop()
