"""The Python package against independent references: llama2.c's goldens, the CLI, the
transformers fixtures, transformers' chat-template renders. Runs against whatever `import kvlm`
finds: build/python in ctest, the pip-installed package in .ci/run.
"""
import glob
import json
import os
import subprocess
import threading
import time

import numpy as np
import pytest

import kvlm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("KVLM_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
BIN = os.environ.get("KVLM_BIN", os.path.join(ROOT, "build", "kvlm"))
STORIES = os.path.join(SHARED, "models", "stories260K", "stories260K.bin")
STORIES_HF = os.path.join(SHARED, "models", "stories260K-hf")
GOLDENS = ["greedy_once_upon_a_time.json", "greedy_long_prompt_mia.json", "greedy_empty_prompt.json"]
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def need_shared():
    if not os.path.exists(STORIES):
        msg = f"SKIPPED: {STORIES} is missing; NOT CHECKED: the Python package against the goldens"
        if os.environ.get("KVLM_REQUIRE_SHARED") == "1":
            pytest.fail("KVLM_REQUIRE_SHARED=1 but " + msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def llm():
    need_shared()
    return kvlm.LLM(STORIES, threads=2)


def golden(name):
    with open(os.path.join(SHARED, "golden", "stories260K", name)) as f:
        return json.load(f)


def test_version_matches_the_cli():
    assert kvlm.__version__.count(".") == 2
    if not os.path.exists(BIN):
        msg = f"SKIPPED: {BIN} is missing (set KVLM_BIN); NOT CHECKED: the package's version against the CLI's"
        if os.environ.get("KVLM_REQUIRE_SHARED") == "1":
            pytest.fail("KVLM_REQUIRE_SHARED=1 but " + msg)
        pytest.skip(msg)
    out = subprocess.run([BIN, "--version"], capture_output=True, text=True, timeout=30).stdout
    assert out.strip() == "kvlm " + kvlm.__version__


@pytest.mark.parametrize("name", GOLDENS)
@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_equals_the_goldens(llm, name, use_cache):
    g = golden(name)
    assert llm.tokenize(g["prompt"]) == g["prompt_ids"]
    out = llm.generate(g["prompt_ids"], max_new_tokens=200, ignore_eos=True, use_cache=use_cache)
    assert out.ids == g["generated_ids"]
    assert out.text == g["text"]
    assert out.finish_reason == "length" and out.prompt_tokens == len(g["prompt_ids"])
    assert out.ttft_ms > 0 and out.tpot_ms > 0
    assert (out.kv_cache_bytes > 0) == use_cache


def test_generate_equals_the_cli(llm):
    need_shared()
    prompt = "Once upon a time, there was a dog"
    cli = json.loads(subprocess.run([BIN, "generate", "--model", STORIES, "--prompt", prompt, "--max-new-tokens", "80",
                                     "--json"], check=True, capture_output=True, text=True, timeout=120).stdout)
    out = llm.generate(prompt, max_new_tokens=80)
    assert out.text == cli["text"]
    assert out.finish_reason == cli["finish_reason"]
    # Sampling with a seed: the CLI and the package draw the same tokens.
    cli_s = json.loads(subprocess.run([BIN, "generate", "--model", STORIES, "--prompt", prompt, "--max-new-tokens", "40",
                                       "--temperature", "0.9", "--top-p", "0.9", "--seed", "7", "--json"],
                                      check=True, capture_output=True, text=True, timeout=120).stdout)
    assert llm.generate(prompt, max_new_tokens=40, temperature=0.9, top_p=0.9, seed=7).text == cli_s["text"]


def test_stream_yields_generates_tokens(llm):
    for kw in ({}, {"temperature": 0.8, "seed": 3}, {"stop": ["Lily"]}, {"use_cache": False}):
        ref = llm.generate("Once upon a time", max_new_tokens=60, **kw)
        s = llm.stream("Once upon a time", max_new_tokens=60, **kw)
        toks = list(s)
        assert "".join(t.text for t in toks) == ref.text
        assert [t.id for t in toks if t.id >= 0] == ref.ids[:len([t for t in toks if t.id >= 0])]
        assert s.result is not None and s.result.ids == ref.ids and s.result.finish_reason == ref.finish_reason


def test_stop_strings(llm):
    full = llm.generate("Once upon a time", max_new_tokens=60).text
    cut = llm.generate("Once upon a time", max_new_tokens=60, stop=["Lily"])
    assert cut.finish_reason == "stop" and "Lily" not in cut.text
    assert full.startswith(cut.text) and full[len(cut.text):].startswith("Lily")


def test_batch_equals_one_by_one_and_shares_prefixes(llm):
    g = golden("greedy_long_prompt_mia.json")
    prompts = [g["prompt"], g["prompt"] + " She", "Once upon a time", g["prompt"]]
    outs = llm.batch(prompts, max_new_tokens=30)
    stats = llm.kv_stats()  # the ledger at the batch's peak
    assert stats["layout"] == "paged" and stats["bytes_per_block"] > 0 and len(stats["sequences"]) >= 1
    assert stats["shared_bytes"] > 0  # the long prompt's blocks were shared
    assert outs[3].cached_tokens > 0 or outs[1].cached_tokens > 0
    for p, o in zip(prompts, outs):
        assert o.ids == llm.generate(p, max_new_tokens=30).ids
    assert llm.kv_stats()["layout"] == "contiguous"  # now the last generate()'s


def test_logits_match_the_transformers_fixtures():
    checked = 0
    for exp in sorted(glob.glob(os.path.join(FIXTURES, "*_tiny", "expected.json"))):
        d = os.path.dirname(exp)
        with open(exp) as f:
            e = json.load(f)
        seq = e["prompt_ids"] + e["greedy_ids"]
        want = np.fromfile(os.path.join(d, e["logits_file"]), dtype=np.float32).reshape(len(seq), -1)
        m = kvlm.LLM(d, threads=1)  # no tokenizer beside the fixture: ids and logits only
        got = m.logits(seq)
        assert got.shape == want.shape and got.dtype == np.float32
        assert float(np.max(np.abs(got - want))) <= 1e-4, d
        for use_cache in (True, False):  # greedy ids, with no tokenizer: ids in, ids out
            out = m.generate(e["prompt_ids"], max_new_tokens=len(e["greedy_ids"]), ignore_eos=True, use_cache=use_cache)
            assert out.ids == e["greedy_ids"] and out.text == "", d
        checked += 1
    assert checked >= 4


def test_logits_do_not_copy(llm):
    a = llm.logits([1, 403, 407])
    assert a.shape == (3, 512) and not a.flags["OWNDATA"]  # the array views kvlm's buffer
    assert a.base is not None
    assert np.argmax(a[-1]) == llm.generate([1, 403, 407], max_new_tokens=1).ids[0]


def test_tokenize_detokenize(llm):
    ids = llm.tokenize("Hello world")
    assert ids[0] == llm.info["bos_id"]
    assert llm.detokenize(ids[1:]).strip() == "Hello world"
    assert llm.tokenize("Hello world", add_bos=False) == ids[1:]


def test_apply_chat_template_equals_transformers():
    need_shared()
    with open(os.path.join(FIXTURES, "chat_templates.json")) as f:
        cases = json.load(f)
    done = 0
    for c in cases:
        if c["template"] != "Qwen-Qwen2.5-7B-Instruct.jinja" or c.get("expected") is None:
            continue
        m = kvlm.LLM(STORIES_HF, threads=1, chat_template=os.path.join(SHARED, "chat-templates", c["template"]))
        got = m.apply_chat_template(c["messages"], add_generation_prompt=c["add_generation_prompt"], **c["extra"])
        # the fixture's BOS/EOS strings are placeholders; the Qwen template does not use them
        assert got == c["expected"], c["conversation"]
        done += 1
    assert done >= 5


def test_bench_has_the_clis_figures():
    need_shared()
    r = kvlm.bench(runs=1, warmup=0, new_tokens=[4], roofline=False)
    cli = json.loads(subprocess.run([BIN, "bench", "--runs", "1", "--warmup", "0", "--new-tokens", "4", "--no-roofline",
                                     "--json"], check=True, capture_output=True, text=True, timeout=300).stdout)
    assert set(r) == set(cli)
    assert set(r["results"]) == {"cache_on", "cache_off"}
    assert r["kv"]["bytes_per_token_formula"] == cli["kv"]["bytes_per_token_formula"]
    assert r["results"]["cache_on"]["tpot_ms"]["4"]["mean"] > 0


@pytest.mark.parametrize("kv_dtype, row_bytes", [
    # stories260K: 5 layers, a K or V row of 4 heads x 8 = 32 values
    ("f32", 32 * 4), ("f16", 32 * 2), ("bf16", 32 * 2),
    ("int8", 32 + 4 * 4),      # + one f32 scale per head
    ("int4", 16 + 2 * 4),      # + one f32 scale and zero point per 32 values
])
def test_info_counts_kv_bytes_in_its_kv_type(kv_dtype, row_bytes):
    need_shared()
    m = kvlm.LLM(STORIES, threads=1, kv_dtype=kv_dtype)
    assert m.info["kv_dtype"] == kv_dtype
    assert m.info["kv_bytes_per_token"] == 2 * 5 * row_bytes


@pytest.mark.parametrize("weights, want", [(None, "f32"), ("f32", "f32"), ("q8_0", "f16"), ("bf16", "f16")])
def test_kv_dtype_auto_follows_the_matrices(weights, want):
    # The default KV type: f32 beside f32 matrices (stories260K as stored), f16 beside any other.
    need_shared()
    m = kvlm.LLM(STORIES, threads=1, weights=weights)
    assert m.info["kv_dtype"] == want
    assert m.info["kv_bytes_per_token"] == 2 * 5 * 32 * (4 if want == "f32" else 2)
    assert kvlm.LLM(STORIES, threads=1, weights=weights, kv_dtype="int8").info["kv_dtype"] == "int8"


@pytest.mark.parametrize("call, exc", [
    (lambda: kvlm.LLM("/nonexistent/model.bin"), kvlm.KvlmError),
    (lambda: kvlm.LLM(__file__), kvlm.KvlmError),  # not a model file
    (lambda: kvlm.LLM(STORIES, kv_dtype="int3"), kvlm.KvlmError),
    (lambda: kvlm.LLM(STORIES, threads=-1), kvlm.KvlmError),
    (lambda: kvlm.LLM(STORIES, tokenizer="/nonexistent/tok.bin"), kvlm.KvlmError),
    (lambda: kvlm.bench(bogus=1), kvlm.KvlmError),
    (lambda: kvlm.bench(runs="ten"), kvlm.KvlmError),
    (lambda: kvlm.bench(runs=0), kvlm.KvlmError),
])
def test_bad_files_and_arguments_raise(call, exc):
    need_shared()
    with pytest.raises(exc) as e:
        call()
    assert str(e.value)


@pytest.mark.parametrize("kw", [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(max_new_tokens=-1),
                                dict(top_k=-2), dict(stop=[""])])
def test_bad_sampling_raises(llm, kw):
    with pytest.raises(kvlm.KvlmError):
        llm.generate("Once", **kw)


def test_bad_ids_and_types_raise(llm):
    for ids in ([99999], [-1], []):
        with pytest.raises(kvlm.KvlmError):
            llm.generate(ids)
        with pytest.raises(kvlm.KvlmError):
            llm.logits(ids)
    with pytest.raises(kvlm.KvlmError):
        llm.detokenize([512])
    with pytest.raises(kvlm.KvlmError):
        llm.generate(list(range(1, 400)) * 2)  # longer than the context
    with pytest.raises(TypeError):
        llm.generate(["a", "b"])
    with pytest.raises(kvlm.KvlmError):
        llm.apply_chat_template([{"role": "user", "content": "hi"}])  # stories260K has no template
    assert llm.generate("Once upon a time", max_new_tokens=5).ids  # still fine afterwards


def test_gil_is_released_two_threads_two_models():
    """Two LLM objects generate in two threads at once, each getting its single-threaded answer;
    meanwhile this thread keeps running Python (a held GIL would stall it for a whole call)."""
    need_shared()
    a, b = kvlm.LLM(STORIES, threads=1), kvlm.LLM(STORIES, threads=1)
    g = golden("greedy_long_prompt_mia.json")
    ref = a.generate(g["prompt_ids"], max_new_tokens=200, ignore_eos=True, use_cache=False)
    results, running = {}, threading.Event()

    def work(name, m):
        running.set()
        results[name] = m.generate(g["prompt_ids"], max_new_tokens=200, ignore_eos=True, use_cache=False)

    threads = [threading.Thread(target=work, args=(n, m)) for n, m in (("a", a), ("b", b))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    running.wait()
    last, max_gap = time.perf_counter(), 0.0
    while any(t.is_alive() for t in threads):
        now = time.perf_counter()
        max_gap, last = max(max_gap, now - last), now
    wall = time.perf_counter() - t0
    for t in threads:
        t.join()
    assert results["a"].ids == ref.ids and results["b"].ids == ref.ids
    assert wall > 0.2, "the calls were too short to show anything"
    assert max_gap < wall / 2, (max_gap, wall)


def test_rss_stays_bounded_over_100_generates(llm):
    def rss():
        with open("/proc/self/status") as f:
            return int([l for l in f if l.startswith("VmRSS:")][0].split()[1]) * 1024

    for _ in range(10):
        llm.generate("Once upon a time", max_new_tokens=40)
        list(llm.stream("Once upon a time", max_new_tokens=10))
    before = rss()
    for i in range(100):
        llm.generate("Once upon a time", max_new_tokens=40, temperature=0.8, seed=i)
        list(llm.stream("Once upon a time", max_new_tokens=10))
        llm.logits([1, 2, 3])
    grown = rss() - before
    assert grown < 8 << 20, f"RSS grew {grown / 2**20:.1f} MiB over 100 calls"
