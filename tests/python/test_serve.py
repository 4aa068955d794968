"""`kvlm serve` through the real openai client, and raw HTTP where framing matters."""
import concurrent.futures
import http.client
import json
import threading
import time

import openai
import pytest

from conftest import Server, generate_cli

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a big bird"]


def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_health_tokenize(server):
    c = client(server)
    assert [m.id for m in c.models.list().data] == ["stories"]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/tokenize", json.dumps({"content": "Once upon a time", "add_special": True}))
    ids = json.loads(conn.getresponse().read())["tokens"]
    assert ids[0] == 1 and len(ids) > 2  # BOS, then the text
    conn.request("POST", "/detokenize", json.dumps({"tokens": ids[1:]}))
    assert json.loads(conn.getresponse().read())["content"] == "Once upon a time"


def test_completion_greedy_equals_cli(server):
    c = client(server)
    for p in PROMPTS[:2]:
        ref = generate_cli(p, 24)
        r = c.completions.create(model="stories", prompt=p, max_tokens=24, temperature=0)
        assert r.choices[0].text == ref["text"]
        assert r.choices[0].finish_reason == "length"
        assert r.usage.completion_tokens == 24 and r.usage.prompt_tokens == len(ref["prompt_ids"])
        chunks = list(c.completions.create(model="stories", prompt=p, max_tokens=24, temperature=0, stream=True,
                                           stream_options={"include_usage": True}))
        assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == ref["text"]
        assert chunks[-1].usage.completion_tokens == 24  # the usage chunk comes last, with no choices
        assert chunks[-2].choices[0].finish_reason == "length"


def test_chat_streamed_and_not(server):
    c = client(server)
    msgs = [{"role": "system", "content": "Tell stories."}, {"role": "user", "content": "Once upon a time"}]
    r = c.chat.completions.create(model="stories", messages=msgs, max_tokens=16, temperature=0)
    text = r.choices[0].message.content
    assert r.choices[0].message.role == "assistant" and len(text) > 0
    stream = c.chat.completions.create(model="stories", messages=msgs, max_tokens=16, temperature=0, stream=True)
    parts = [ch.choices[0].delta.content or "" for ch in stream if ch.choices]
    assert "".join(parts) == text
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/apply-template", json.dumps({"messages": msgs}))
    prompt = json.loads(conn.getresponse().read())["prompt"]
    assert prompt.startswith("<|im_start|>system\nTell stories.<|im_end|>\n") and prompt.endswith("<|im_start|>assistant\n")


def test_cached_tokens_on_a_repeated_prefix(server):
    c = client(server)
    prefix = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog."
    first = c.completions.create(model="stories", prompt=prefix + " One day", max_tokens=4, temperature=0)
    again = c.completions.create(model="stories", prompt=prefix + " The sun", max_tokens=4, temperature=0)
    assert first.usage.prompt_tokens > 16
    assert again.usage.prompt_tokens_details.cached_tokens >= 16  # at least one whole block reused


def test_stop_strings_are_never_emitted(server):
    c = client(server)
    ref = generate_cli("Once upon a time", 40)["text"]
    word = " girl"  # spans tokens in this vocabulary
    assert word in ref
    for stream in (False, True):
        if stream:
            text = "".join(ch.choices[0].text for ch in c.completions.create(
                model="stories", prompt="Once upon a time", max_tokens=40, temperature=0, stop=[word, "zzz"], stream=True)
                if ch.choices)
        else:
            r = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=40, temperature=0,
                                     stop=[word, "zzz"])
            text = r.choices[0].text
            assert r.choices[0].finish_reason == "stop"
        assert text == ref[:ref.index(word)]


def test_n_and_seeds(server):
    c = client(server)
    r = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=12, temperature=1.0, n=3, seed=7)
    assert sorted(ch.index for ch in r.choices) == [0, 1, 2]
    texts = [ch.text for ch in sorted(r.choices, key=lambda x: x.index)]
    assert len(set(texts)) > 1  # three samples, not one repeated
    again = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=12, temperature=1.0, n=3, seed=7)
    assert [ch.text for ch in sorted(again.choices, key=lambda x: x.index)] == texts  # a seed reproduces
    other = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=8)
    assert other.choices[0].text != texts[0] or other.choices[0].text != texts[1]


def test_logprobs(server):
    c = client(server)
    r = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=5, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == 5 and all(x <= 0 for x in lp.token_logprobs)
    assert all(len(t) == 3 for t in lp.top_logprobs)
    # Greedy: the chosen token is the most likely one.
    for tok, top in zip(lp.tokens, lp.top_logprobs):
        assert max(top.values()) == top.get(tok, max(top.values()))
    chat = c.chat.completions.create(model="stories", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                     temperature=0, logprobs=True, top_logprobs=2)
    assert len(chat.choices[0].logprobs.content) == 3
    assert all(len(t.top_logprobs) == 2 for t in chat.choices[0].logprobs.content)


def raw(server, body, path="/v1/completions", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", path, body, headers or {"Content-Type": "application/json"})
    res = conn.getresponse()
    return res.status, res.read()


def test_sse_framing(server):
    status, body = raw(server, json.dumps({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0,
                                           "stream": True}))
    assert status == 200
    events = [e for e in body.decode().split("\n\n") if e]
    data = [e for e in events if not e.startswith(":")]  # ":" lines are SSE comments (keep-alives)
    assert all(e.startswith("data: ") for e in data)
    assert data[-1] == "data: [DONE]"
    chunks = [json.loads(e[len("data: "):]) for e in data[:-1]]
    assert all(ch["object"] == "text_completion" for ch in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len({ch["id"] for ch in chunks}) == 1


@pytest.mark.parametrize("body,param", [
    ("{not json", None),
    (json.dumps({"prompt": 5}), "prompt"),
    (json.dumps({"prompt": "hi", "max_tokens": -1}), "max_tokens"),
    (json.dumps({"prompt": "hi", "max_tokens": 10 ** 12}), "max_tokens"),
    (json.dumps({"prompt": "hi", "max_tokens": 100000}), "max_tokens"),
    (json.dumps({"prompt": "hi", "n": 10000}), "n"),
    (json.dumps({"prompt": "hi", "temperature": "hot"}), "temperature"),
    (json.dumps({"prompt": "hi", "frobnicate": 1}), "frobnicate"),
    (json.dumps({"prompt": "hi", "presence_penalty": 2.5}), "presence_penalty"),
    (json.dumps({"prompt": "hi", "repetition_penalty": 0}), "repetition_penalty"),
    (json.dumps({"prompt": "hi", "min_p": 1.5}), "min_p"),
    (json.dumps({"prompt": "hi", "logit_bias": {"cat": 1}}), "logit_bias"),
    (json.dumps({"prompt": "hi", "logit_bias": {"5": 500}}), "logit_bias"),
    (json.dumps({"prompt": "hi", "logit_bias": {"99999": 1}}), "logit_bias"),
    (json.dumps({"prompt": "hi", "logit_bias": [1, 2]}), "logit_bias"),
    (json.dumps({"prompt": "hi", "echo": True}), "echo"),
    (json.dumps({"prompt": [1, 999999]}), "prompt"),
    (json.dumps({"prompt": "hi", "model": "gpt-4"}), "model"),
    (json.dumps({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}), "stop"),
    (json.dumps({"prompt": "hi", "stream_options": {"include_usage": True}}), "stream_options"),
    (json.dumps([1, 2]), None),
])
def test_bad_requests_get_4xx_and_the_server_goes_on(server, body, param):
    status, out = raw(server, body)
    assert 400 <= status < 500, out
    err = json.loads(out)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    if param:
        assert err["param"] == param, err
    ok_status, ok = raw(server, json.dumps({"prompt": "Once", "max_tokens": 2, "temperature": 0}))
    assert ok_status == 200 and json.loads(ok)["usage"]["completion_tokens"] == 2


def test_bad_chat_requests(server):
    for body in ({"messages": []}, {"messages": [{"role": "wizard", "content": "x"}]}, {"messages": "hi"}):
        status, out = raw(server, json.dumps(body), "/v1/chat/completions")
        assert status == 400, out
        assert json.loads(out)["error"]["param"] == "messages"


def test_neutral_values_are_accepted(server):
    # What sglang-router and other clients send by default.
    body = {"prompt": "Once", "max_tokens": 2, "echo": False, "presence_penalty": 0, "frequency_penalty": 0.0,
            "logit_bias": {}, "user": "u1", "best_of": 1, "temperature": 0, "repetition_penalty": 1, "min_p": 0}
    status, out = raw(server, json.dumps(body))
    assert status == 200, out


def test_logit_bias_and_penalties(server):
    c = client(server)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/tokenize", json.dumps({"content": " cat"}))
    cat = json.loads(conn.getresponse().read())["tokens"][-1]
    conn.request("POST", "/detokenize", json.dumps({"tokens": [cat] * 4}))
    cats = json.loads(conn.getresponse().read())["content"]
    # +100 all but forces a token, greedy or sampled; -100 bans the greedy choice.
    for temperature in (0, 1):
        r = c.completions.create(model="stories", prompt="Once", max_tokens=4, temperature=temperature, seed=3,
                                 logit_bias={str(cat): 100})
        assert r.choices[0].text == cats
    plain = c.completions.create(model="stories", prompt="Once", max_tokens=24, temperature=0)
    conn.request("POST", "/tokenize", json.dumps({"content": "Once" + plain.choices[0].text}))
    first = json.loads(conn.getresponse().read())["tokens"][1]  # the first token after "Once"
    banned = c.completions.create(model="stories", prompt="Once", max_tokens=24, temperature=0, logit_bias={str(first): -100})
    assert banned.choices[0].text != plain.choices[0].text
    # Greedy stories repeat words within 40 tokens: penalizing what was generated changes the text
    # (a negative frequency penalty makes it repeat a word), and every penalty and min_p is
    # accepted through the client (chat too).
    plain = c.completions.create(model="stories", prompt="Once", max_tokens=40, temperature=0)
    for extra in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0}, {"extra_body": {"repetition_penalty": 1.8}}):
        r = c.completions.create(model="stories", prompt="Once", max_tokens=40, temperature=0, **extra)
        assert r.choices[0].text != plain.choices[0].text, extra
    r = c.completions.create(model="stories", prompt="Once", max_tokens=40, temperature=0, frequency_penalty=-2)
    assert " a a a a a a" in r.choices[0].text
    r = c.chat.completions.create(model="stories", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                  temperature=0.8, seed=1, presence_penalty=0.5, frequency_penalty=0.5,
                                  logit_bias={str(cat): 100}, extra_body={"min_p": 0.1, "repetition_penalty": 1.1})
    assert r.choices[0].message.content == cats


def test_body_over_the_limit():
    s = Server("--max-body", "2048")
    try:
        status, out = raw(s, json.dumps({"prompt": "x" * 10000}))
        assert status == 413
        assert "error" in json.loads(out)
        status, _ = raw(s, json.dumps({"prompt": "Once", "max_tokens": 2}))
        assert status == 200
    finally:
        s.stop()


def test_cancellation_returns_every_block(server):
    """8 streams; 4 are closed after their first tokens. The other 4 finish with the right text,
    and the pool returns to idle: no active request, every block free (cached ones included)."""
    prompt = "Once upon a time"
    ref = generate_cli(prompt, 60, "--ignore-eos")["text"]
    results, errors = {}, []

    def stream(i):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            conn.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 60, "temperature": 0,
                                                                "stream": True, "ignore_eos": True}))
            res = conn.getresponse()
            text, got = "", 0
            while True:
                line = res.fp.readline().decode()
                if not line:
                    break
                if line.startswith("data: {"):
                    text += json.loads(line[6:])["choices"][0]["text"]
                    got += 1
                    if i % 2 == 1 and got >= 3:
                        conn.sock.close()  # the client goes away mid-stream
                        results[i] = None
                        return
                if line.startswith("data: [DONE]"):
                    break
            results[i] = text
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for i in range(0, 8, 2):
        assert results[i] == ref
    deadline = time.time() + 20
    while time.time() < deadline:
        kv = server.kv()
        if kv["active_requests"] == 0 and kv["blocks_free"] == kv["blocks_total"]:
            break
        time.sleep(0.1)
    kv = server.kv()
    assert kv["active_requests"] == 0 and kv["running"] == 0 and kv["waiting"] == 0
    assert kv["blocks_free"] == kv["blocks_total"]  # refcounts all zero: every block free or cached


@pytest.mark.parametrize("clients", [1, 4, 16])
def test_same_answer_under_load(server, clients):
    refs = {p: generate_cli(p, 20)["text"] for p in PROMPTS}
    c = client(server)

    def one(i):
        p = PROMPTS[i % len(PROMPTS)]
        return p, c.completions.create(model="stories", prompt=p, max_tokens=20, temperature=0).choices[0].text

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        for p, text in pool.map(one, range(clients)):
            assert text == refs[p]


def test_same_answer_under_kv_pressure():
    """A pool of 12 blocks for 8 concurrent 60-token sequences forces preemption; greedy output
    is still what `kvlm generate` gives."""
    s = Server("--kv-blocks", "12", "--block-size", "16")
    try:
        refs = {p: generate_cli(p, 60, "--ignore-eos")["text"] for p in PROMPTS}
        c = client(s)

        def one(i):
            p = PROMPTS[i % len(PROMPTS)]
            r = c.completions.create(model="stories", prompt=p, max_tokens=60, temperature=0, extra_body={"ignore_eos": True})
            return p, r.choices[0].text

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for p, text in pool.map(one, range(8)):
                assert text == refs[p]
        assert s.kv()["preemptions"] > 0
    finally:
        s.stop()


def test_a_new_request_joins_the_running_batch(server):
    """Continuous batching: a short request sent while a long one (4 samples of 500 tokens) streams
    finishes while the long one is still generating (it never waits for the batch to drain)."""
    state = {"chunks": 0, "done": False, "usage": None}
    started = threading.Event()

    def long_stream():
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        conn.request("POST", "/v1/completions", json.dumps({
            "prompt": "Once upon a time", "max_tokens": 500, "n": 4, "temperature": 0.8, "seed": 1, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}))
        res = conn.getresponse()
        while True:
            line = res.fp.readline().decode()
            if not line or line.startswith("data: [DONE]"):
                break
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    state["usage"] = chunk["usage"]
                state["chunks"] += 1
                if state["chunks"] == 2:
                    started.set()
        state["done"] = True

    t = threading.Thread(target=long_stream)
    t.start()
    assert started.wait(60)
    status, out = raw(server, json.dumps({"prompt": "The little dog", "max_tokens": 2, "temperature": 0}))
    long_still_running = not state["done"]
    t.join(timeout=120)
    assert status == 200 and json.loads(out)["usage"]["completion_tokens"] == 2
    assert long_still_running
    assert state["usage"]["completion_tokens"] == 4 * 500


def test_without_a_template_chat_is_a_400_and_completions_work():
    s = Server(template=None)
    try:
        status, out = raw(s, json.dumps({"messages": [{"role": "user", "content": "hi"}]}), "/v1/chat/completions")
        assert status == 400 and json.loads(out)["error"]["code"] == "no_chat_template"
        status, _ = raw(s, json.dumps({"prompt": "Once", "max_tokens": 2}))
        assert status == 200
    finally:
        s.stop()


def test_an_unrenderable_template_fails_at_startup(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content | frobnicate }}{% endfor %}")
    import subprocess
    from conftest import BIN, STORIES_HF, need_shared
    need_shared()
    r = subprocess.run([BIN, "serve", "--model", STORIES_HF, "--port", "0", "--chat-template", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "unsupported filter 'frobnicate'" in r.stderr
