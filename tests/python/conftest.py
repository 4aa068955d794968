"""Starts `kvlm serve` on 127.0.0.1 with a free port for the server tests, and stops it after.

KVLM_BIN names the binary (ctest sets it); KVLM_SHARED the reference data (default ../shared).
"""
import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("KVLM_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
BIN = os.environ.get("KVLM_BIN", os.path.join(ROOT, "build", "kvlm"))
STORIES_HF = os.path.join(SHARED, "models", "stories260K-hf")
CHATML = os.path.join(SHARED, "chat-templates", "Qwen-Qwen2.5-7B-Instruct.jinja")


def need_shared():
    if not os.path.isdir(STORIES_HF):
        msg = f"SKIPPED: {STORIES_HF} is missing; NOT CHECKED: the server against the openai client"
        if os.environ.get("KVLM_REQUIRE_SHARED") == "1":
            pytest.fail("KVLM_REQUIRE_SHARED=1 but " + msg)
        pytest.skip(msg)


class Server:
    def __init__(self, *extra, template=CHATML, port=0, wrap=(), cwd=None):
        """wrap: a command prefix (a memory limit); port: 0 for a free one; cwd: where it runs."""
        need_shared()
        tpl = ["--chat-template", template] if template else []
        self.proc = subprocess.Popen([*wrap, BIN, "serve", "--model", STORIES_HF, "--model-name", "stories",
                                      "--port", str(port), *tpl, "--threads", "2", *extra],
                                     stderr=subprocess.PIPE, text=True, cwd=cwd)
        deadline = time.time() + 60
        self.port = None
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError("kvlm serve exited before listening")
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if time.time() > deadline:
                raise RuntimeError("kvlm serve did not start listening in 60 s")
        self.base = f"http://127.0.0.1:{self.port}"
        while time.time() < deadline:  # 503 while loading, then 200
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception:
                time.sleep(0.05)
        raise RuntimeError("kvlm serve did not become healthy in 60 s")

    def wait_idle(self, timeout=30):
        """Waits until the engine is back at idle; returns the last /v1/kv. Idle: no request, no
        sequence, every block's refcount zero (counted block by block), no KV bytes held."""
        deadline = time.time() + timeout
        while True:
            kv = self.kv()
            idle = (kv["active_requests"] == 0 and kv["running"] == 0 and kv["waiting"] == 0 and
                    kv["engine_sequences"] == 0 and kv["blocks_referenced"] == 0 and
                    kv["blocks_free"] == kv["blocks_total"] and kv["ledger"]["private_bytes"] == 0 and
                    kv["ledger"]["shared_bytes"] == 0)
            if idle or time.time() > deadline:
                return kv
            time.sleep(0.1)

    def kv(self):
        with urllib.request.urlopen(self.base + "/v1/kv", timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def generate_cli(prompt, n, *extra):
    """Greedy tokens from `kvlm generate`, the reference the server must equal."""
    out = subprocess.run([BIN, "generate", "--model", STORIES_HF, "--prompt", prompt, "--max-new-tokens", str(n),
                          "--json", *extra], check=True, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)
