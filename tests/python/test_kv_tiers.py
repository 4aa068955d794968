"""The KV disk tier across restarts: a restarted `kvlm serve` with the same --kv-disk-dir serves a
repeated 1,000-token prefix from disk on its first request, and a server killed with SIGKILL while
writing, whose files are then torn, restarts and answers correctly (bad files refused, counted,
recomputed). Each server binds 127.0.0.1 on a free port and stops inside its test."""
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from conftest import Server

# About 1,030 tokens with stories260K's 512-token vocabulary.
PROMPT = " ".join(f"Once upon a time, Lily saw {n} red birds in the park and she was happy." for n in range(40))
ARGS = ("--ctx", "1400", "--block-size", "16")


def complete(server, prompt, n=8):
    body = json.dumps({"model": "stories", "prompt": prompt, "max_tokens": n, "temperature": 0}).encode()
    req = urllib.request.Request(server.base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def metric(server, name, **labels):
    with urllib.request.urlopen(server.base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def promtool_check(server):
    """The tier series parse as Prometheus text (lint: only the ':' in names, as vLLM's own)."""
    with urllib.request.urlopen(server.base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    assert "kvlm:kv_tier_bytes{" in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: scripts/deps.sh installs Debian's prometheus package")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 3), r.stderr
    other = [p for p in r.stderr.splitlines() if p.strip() and not p.endswith("metric names should not contain ':'")]
    assert not other, other


def wait_for_disk_blocks(server, n, timeout=60):
    """The writer thread writes behind: wait until n blocks are on disk."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (metric(server, "kvlm:kv_tier_blocks", tier="disk") or 0) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} blocks reached the disk tier in {timeout} s")


def test_restarted_server_is_warm(tmp_path):
    disk = str(tmp_path / "kv")
    s = Server("--kv-disk-dir", disk, *ARGS, template=None)
    try:
        first = complete(s, PROMPT)
        n = first["usage"]["prompt_tokens"]
        assert n >= 1000, n
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        wait_for_disk_blocks(s, (n - 1) // 16)
    finally:
        s.stop()
    s = Server("--kv-disk-dir", disk, *ARGS, template=None)
    try:
        again = complete(s, PROMPT)
        cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= 992 and cached == (n - 1) // 16 * 16, cached
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
        assert metric(s, "kvlm:kv_tier_hits_total", tier="disk") >= cached // 16
        for reason in ("checksum", "truncated", "model", "codec", "tenant", "hash", "io"):
            assert metric(s, "kvlm:kv_tier_verification_failures_total", reason=reason) == 0, reason
        promtool_check(s)
    finally:
        s.stop()


def test_kill9_while_writing_then_restart_serves_correctly(tmp_path):
    disk = str(tmp_path / "kv")
    reference = Server(*ARGS, template=None)  # no tier: what the answer must be
    try:
        want = complete(reference, PROMPT)["choices"][0]["text"]
    finally:
        reference.stop()
    s = Server("--kv-disk-dir", disk, *ARGS, template=None)
    killed_pid = s.proc.pid
    complete(s, PROMPT)
    s.proc.send_signal(signal.SIGKILL)  # the writer thread is still writing blocks behind
    s.proc.wait(timeout=20)
    files = sorted(f for f in os.listdir(disk) if f.endswith(".kvb"))
    # What a crash mid-write can leave: a temporary file, and (were the rename not atomic) a torn
    # block. Tear every block that made it, and leave a temporary file beside them.
    for f in files:
        path = os.path.join(disk, f)
        os.truncate(path, os.path.getsize(path) // 2)
    with open(os.path.join(disk, "0" * 64 + ".kvb.123.tmp"), "wb") as f:
        f.write(b"KVLMBLK1 half a header")
    s = Server("--kv-disk-dir", disk, *ARGS, template=None)
    try:
        got = complete(s, PROMPT)
        assert got["choices"][0]["text"] == want
        left = [f for f in os.listdir(disk) if f.endswith(".123.tmp") or f.endswith(f".{killed_pid}.tmp")]
        assert not left, "temporary files of earlier runs are removed at start"
        if files:  # a torn first block is refused before any other is read
            assert metric(s, "kvlm:kv_tier_verification_failures_total", reason="truncated") >= 1
            assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        # The recomputed blocks are written again, whole: a further restart is warm.
        wait_for_disk_blocks(s, (got["usage"]["prompt_tokens"] - 1) // 16)
    finally:
        s.stop()
    s = Server("--kv-disk-dir", disk, *ARGS, template=None)
    try:
        third = complete(s, PROMPT)
        assert third["choices"][0]["text"] == want
        assert third["usage"]["prompt_tokens_details"]["cached_tokens"] >= 992
    finally:
        s.stop()


def test_conversation_snapshots_save_and_restore(tmp_path):
    """kv_save / kv_load (kvlm's extension fields, with --kv-snapshot-dir): a conversation saved by
    one server is restored by a restarted one, whose output equals a server that never saved."""
    snaps = str(tmp_path / "snaps")
    prompt = "Once upon a time, Lily found a red ball in the garden."
    s = Server("--kv-snapshot-dir", snaps, template=None)
    try:
        first = post_json(s, {"model": "stories", "prompt": prompt, "max_tokens": 12, "temperature": 0, "kv_save": "c-1"})
        assert "kv_snapshot_error" not in first
        assert any(f.endswith("c-1.kvs") for f in os.listdir(snaps))
        bad = post_json(s, {"model": "stories", "prompt": prompt, "kv_save": "../etc"}, expect=400)
        assert bad["error"]["param"] == "kv_save"
    finally:
        s.stop()
    s = Server("--kv-snapshot-dir", snaps, template=None)
    try:
        again = post_json(s, {"model": "stories", "prompt": prompt, "max_tokens": 12, "temperature": 0, "kv_load": "c-1"})
        assert "kv_snapshot_error" not in again
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"] - 1
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
        missing = post_json(s, {"model": "stories", "prompt": prompt, "max_tokens": 4, "temperature": 0, "kv_load": "nope"})
        assert "cannot open" in missing["kv_snapshot_error"] and snaps not in missing["kv_snapshot_error"]
    finally:
        s.stop()
    s = Server(template=None)  # no --kv-snapshot-dir: the fields are refused, never ignored
    try:
        r = post_json(s, {"model": "stories", "prompt": prompt, "kv_load": "c-1"}, expect=400)
        assert "kv-snapshot-dir" in r["error"]["message"]
    finally:
        s.stop()


def post_json(server, body, expect=200):
    req = urllib.request.Request(server.base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == expect
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        assert e.code == expect, (e.code, e.read())
        return json.loads(e.read())
