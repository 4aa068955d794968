"""Operating `kvlm serve`: Prometheus metrics (checked by promtool), API keys as tenants, and
limits with backpressure."""
import concurrent.futures
import http.client
import json
import shutil
import subprocess

import openai
import pytest

from conftest import Server


def get(server, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    res = conn.getresponse()
    return res.status, res.read().decode(), dict(res.getheaders())


def post(server, path, body, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
    res = conn.getresponse()
    return res.status, json.loads(res.read() or b"null"), dict(res.getheaders())


def test_metrics_are_valid_prometheus_with_vllm_names(server):
    post(server, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
    status, text, headers = get(server, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
                 "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total", "vllm:request_success_total",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_sum", "vllm:request_queue_time_seconds_count",
                 "kvlm:kv_blocks", "kvlm:kv_bytes", "kvlm:kv_residual_bytes"):
        assert name in text, name
    gen = [l for l in text.splitlines() if l.startswith("vllm:generation_tokens_total{")]
    assert float(gen[0].split()[-1]) >= 8

    def value(name):
        return float([l for l in text.splitlines() if l.startswith(name + "{")][0].split()[-1])
    # Decode bandwidth: 7 pure decode steps ran, each reading at least the weights.
    assert value("kvlm:decode_bytes_total") > 0 and value("kvlm:decode_seconds_total") > 0
    assert value("kvlm:decode_gbps") > 0
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: scripts/deps.sh installs Debian's prometheus package")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    # Exit 1 would be a parse error. Exit 3 is lint advice; the one piece of it allowed is the
    # rule against ':' in names, which vLLM's own names (the ones routers read) break as well.
    problems = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode in (0, 3), r.stderr
    other = [p for p in problems if not p.endswith("metric names should not contain ':'")]
    assert not other, other


@pytest.fixture(scope="module")
def keyed():
    s = Server("--api-key", "key-alpha-1234", "--api-key", "key-beta-56789")
    yield s
    s.stop()


def test_api_keys(keyed):
    status, body, headers = post(keyed, "/v1/completions", {"prompt": "Once", "max_tokens": 2})
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    status, body, _ = post(keyed, "/v1/completions", {"prompt": "Once", "max_tokens": 2},
                           {"Authorization": "Bearer key-alpha-12345"})
    assert status == 401
    assert get(keyed, "/health")[0] == 200   # probes stay open
    assert get(keyed, "/metrics")[0] == 200  # open unless --metrics-need-key
    c = openai.OpenAI(base_url=keyed.base + "/v1", api_key="key-alpha-1234", max_retries=0)
    assert c.completions.create(model="stories", prompt="Once", max_tokens=2).usage.completion_tokens == 2
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.base + "/v1", api_key="wrong-key-000", max_retries=0).models.list()


def test_tenants_never_share_a_prefix(keyed):
    prefix = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog."
    alpha = openai.OpenAI(base_url=keyed.base + "/v1", api_key="key-alpha-1234", max_retries=0)
    beta = openai.OpenAI(base_url=keyed.base + "/v1", api_key="key-beta-56789", max_retries=0)
    alpha.completions.create(model="stories", prompt=prefix + " One", max_tokens=2, temperature=0)
    again = alpha.completions.create(model="stories", prompt=prefix + " Two", max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens >= 16  # same tenant: shared
    other = beta.completions.create(model="stories", prompt=prefix + " Three", max_tokens=2, temperature=0)
    assert other.usage.prompt_tokens_details.cached_tokens == 0    # another tenant: never


def test_limits_and_backpressure():
    s = Server("--max-queue", "2", "--max-seqs", "1", "--max-prompt-tokens", "40", "--max-tokens-cap", "300",
               "--request-timeout", "60")
    try:
        status, body, _ = post(s, "/v1/completions", {"prompt": "Once upon a time " * 20, "max_tokens": 2})
        assert status == 400 and body["error"]["code"] == "prompt_too_long"
        status, body, _ = post(s, "/v1/completions", {"prompt": "Once", "max_tokens": 301})
        assert status == 400 and body["error"]["param"] == "max_tokens"
        # 6 long requests at once against a queue of 2: some get 429 with Retry-After, the rest finish.
        def one(_):
            return post(s, "/v1/completions", {"prompt": "Once", "max_tokens": 300, "ignore_eos": True, "temperature": 0})
        for burst in range(2):  # twice: the count of accepted requests returns to zero in between
            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                results = list(pool.map(one, range(6)))
            statuses = sorted(r[0] for r in results)
            assert 429 in statuses and 200 in statuses, (burst, statuses)
            assert statuses.count(200) <= 2 + 2, statuses  # at most the queue, plus any that finished meanwhile
            for status, body, headers in results:
                if status == 429:
                    assert headers.get("Retry-After") == "1" and body["error"]["type"] == "rate_limit_error"
                else:
                    assert status == 200 and body["usage"]["completion_tokens"] == 300
        _, text, _ = get(s, "/metrics")
        assert 'kvlm:requests_rejected_total{model_name="stories",reason="queue_full"}' in text
    finally:
        s.stop()


def test_request_timeout_ends_generation():
    """Sixteen 500-token requests through one sequence slot take several times longer than a
    0.1 s timeout (8,000 tokens one after another): the later ones end early with finish_reason
    "length" and what they generated so far."""
    s = Server("--request-timeout", "0.1", "--max-seqs", "1", "--http-threads", "24")
    try:
        def one(_):
            return post(s, "/v1/completions", {"prompt": "Once", "max_tokens": 500, "ignore_eos": True, "temperature": 0})
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(one, range(16)))
        assert all(r[0] == 200 for r in results)
        cut = [r[1] for r in results if r[1]["usage"]["completion_tokens"] < 500]
        assert cut, "no request was cut by --request-timeout"
        assert all(b["choices"][0]["finish_reason"] == "length" for b in cut)
    finally:
        s.stop()


def test_kv_type_auto_follows_the_matrices(server):
    # The module's server runs stories260K-hf's f32 matrices: f32 pages. Asked to run them as
    # Q8_0, the default KV type (auto) is f16, llama.cpp's default KV, in the ledger and metrics.
    assert server.kv()["ledger"]["page_dtype"] == "f32"
    s = Server("--weights", "q8_0")
    try:
        assert s.kv()["ledger"]["page_dtype"] == "f16"
        status, body, _ = post(s, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})
        assert status == 200 and body["usage"]["completion_tokens"] == 4
        _, text, _ = get(s, "/metrics")
        assert [l for l in text.splitlines() if l.startswith("kvlm:kv_bytes{") and 'precision="f16"' in l], text
    finally:
        s.stop()
