"""kvlm: LLM inference built around the KV cache, from Python.

    import kvlm
    llm = kvlm.LLM("stories260K.bin")
    out = llm.generate("Once upon a time", max_new_tokens=32)
    print(out.text, out.ttft_ms, out.tpot_ms)
    print(llm.generate("Once upon a time", max_new_tokens=32, use_cache=False).tpot_ms)

Compute runs in C++ with the GIL released, so threads with their own LLM objects run at once.
Every kvlm error (a bad file, a bad argument) is raised as kvlm.KvlmError with kvlm's message.
"""
from __future__ import annotations

import json
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _kvlm
from ._kvlm import KvlmError

__version__: str = _kvlm.__version__
__all__ = ["LLM", "Generation", "Token", "KvlmError", "bench", "__version__"]

Prompt = Union[str, Sequence[int]]


@dataclass
class Generation:
    """The result of one generation.

    text: the generated text (a matched stop string is cut off and not included).
    ids: the generated token ids.
    finish_reason: "stop" (EOS or a stop string) or "length" (max_new_tokens or the context).
    ttft_ms: time to first token, prompt in to first token out, in milliseconds.
    tpot_ms: mean time per output token after the first, in milliseconds.
    prompt_tokens: tokens in the prompt (BOS included when the model uses one).
    cached_tokens: prompt tokens served from the prefix cache (batch() only).
    kv_cache_bytes: bytes the KV cache held at the end (0 with use_cache=False).
    """

    text: str
    ids: List[int]
    finish_reason: str
    ttft_ms: float
    tpot_ms: float
    prompt_tokens: int
    cached_tokens: int = 0
    kv_cache_bytes: int = 0

    @classmethod
    def _from(cls, d: Dict[str, Any]) -> "Generation":
        return cls(text=d["text"], ids=list(d["ids"]), finish_reason=d["finish_reason"], ttft_ms=d["ttft_ms"],
                   tpot_ms=d["tpot_ms"], prompt_tokens=d["prompt_tokens"], cached_tokens=d.get("cached_tokens", 0),
                   kv_cache_bytes=d.get("kv_cache_bytes", 0))


@dataclass
class Token:
    """One streamed token: its id (-1 for text released only at the end) and the text it adds.
    The text may be "" while bytes are held back (half a UTF-8 character, a possible stop string)."""

    id: int
    text: str


@dataclass
class _Sampling:
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    ignore_eos: bool = False
    stop: List[str] = field(default_factory=list)

    def args(self) -> tuple:
        return (self.max_new_tokens, self.temperature, self.top_p, self.top_k, self.seed, self.ignore_eos, self.stop)


def _as_ids(ids: Sequence[int]) -> List[int]:
    """Token ids as a list of int; numpy integers are fine, anything else is a TypeError."""
    out = []
    for i in ids:
        if not isinstance(i, numbers.Integral) or isinstance(i, bool):
            raise TypeError(f"token ids must be integers, got {type(i).__name__} {i!r}")
        out.append(int(i))
    return out


def _stops(stop: Union[None, str, Sequence[str]]) -> List[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    return [str(s) for s in stop]


class LLM:
    """A model loaded for generation: a llama2.c checkpoint, a GGUF file or a Hugging Face folder.

    Args:
        path: the model file or folder (whatever `kvlm generate --model` takes).
        tokenizer: the tokenizer, when it is not found beside the model.
        weights: run the matrices as "f32", "f16", "bf16", "q8_0" or "q4_0" (default: as stored).
        kv_dtype: KV cache element type: "auto" (default: "f32" beside f32 matrices, else "f16"),
            "f32", "f16", "bf16", "int8" or "int4". `info["kv_dtype"]` says which one runs.
        kv_residual: with a quantized KV, the newest positions also kept at f32 (default 128).
        kv_capacity: KV pool size in tokens for batch() (default: sized by the batch's need).
        threads: compute threads of this object's own pool (default: physical cores).
        context: the context length (default: the model's).
        chat_template: a Jinja chat template, as a file's path or as text (default: the model's own).
    """

    def __init__(self, path: str, *, tokenizer: Optional[str] = None, weights: Optional[str] = None,
                 kv_dtype: str = "auto", kv_residual: int = 128, kv_capacity: Optional[int] = None,
                 threads: Optional[int] = None, context: Optional[int] = None,
                 chat_template: Optional[str] = None, _preset: str = "", _seed: int = 0) -> None:
        if chat_template is not None and os.path.isfile(chat_template):
            with open(chat_template, encoding="utf-8") as f:
                chat_template = f.read()
        self._llm = _kvlm._LLM(str(path), tokenizer or "", weights or "", kv_dtype, kv_residual, kv_capacity or 0,
                               threads or 0, context or 0, chat_template or "", _preset, _seed)
        self.path = str(path)

    @classmethod
    def from_preset(cls, name: str, *, seed: int = 0, tokenizer: Optional[str] = None, **kwargs: Any) -> "LLM":
        """A built-in shape with synthetic (random) weights, as `kvlm bench --preset` uses:
        "distilgpt2", "gpt2", "gpt-neo-1.3B" or "tinyllama-1.1b". Its text is noise; its speed and
        KV memory are the real model's. Without tokenizer= it takes token ids only
        (info["preset_prompt_ids"] is the bench's prompt)."""
        obj = cls.__new__(cls)
        LLM.__init__(obj, "preset:" + name, tokenizer=tokenizer, _preset=name, _seed=seed, **kwargs)
        return obj

    @property
    def info(self) -> Dict[str, Any]:
        """The model's shape, context, threads, KV type, and KV bytes per token in that type (its page
        rows: values and any scales; the f32 window of the newest positions is apart)."""
        return self._llm.info()

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids for text; BOS in front when the model uses one and add_bos is set.
        special=True turns special-token strings (e.g. "<|im_start|>") into their ids."""
        return self._llm.tokenize(text, add_bos, special)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of token ids."""
        return self._llm.detokenize(_as_ids(ids))

    def apply_chat_template(self, messages: List[Dict[str, Any]], *, add_generation_prompt: bool = True,
                            tokenize: bool = False, **template_vars: Any) -> Union[str, List[int]]:
        """Renders messages ([{"role": ..., "content": ...}]) with the model's chat template, as
        transformers' apply_chat_template does; further keyword arguments (tools=, documents=,
        date_string=, ...) become template variables. tokenize=True returns the ids instead."""
        text = self._llm.apply_chat_template(json.dumps(messages), add_generation_prompt, json.dumps(template_vars))
        return self._llm.tokenize(text, False, True) if tokenize else text

    def _ids(self, prompt: Prompt) -> List[int]:
        if isinstance(prompt, str):
            return self._llm.tokenize(prompt, True, False)
        return _as_ids(prompt)

    def generate(self, prompt: Prompt, *, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
                 top_k: int = 0, seed: int = 0, stop: Union[None, str, Sequence[str]] = None,
                 ignore_eos: bool = False, use_cache: bool = True) -> Generation:
        """Generates from a prompt (text, or token ids used as given).

        temperature 0 is greedy. stop: strings that end generation (never included in the text).
        use_cache=False recomputes every position at every step, like Hugging Face's
        generate(use_cache=False): the KV-cache experiment's other arm.
        """
        s = _Sampling(max_new_tokens, temperature, top_p, top_k, seed, ignore_eos, _stops(stop))
        return Generation._from(self._llm.generate(self._ids(prompt), *s.args(), use_cache))

    def stream(self, prompt: Prompt, *, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
               top_k: int = 0, seed: int = 0, stop: Union[None, str, Sequence[str]] = None,
               ignore_eos: bool = False, use_cache: bool = True) -> "Stream":
        """Like generate(), as an iterator of Token; the Stream's .result is the Generation once it
        is exhausted. The tokens are exactly generate()'s."""
        s = _Sampling(max_new_tokens, temperature, top_p, top_k, seed, ignore_eos, _stops(stop))
        return Stream(_kvlm._Stream(self._llm, self._ids(prompt), *s.args(), use_cache))

    def batch(self, prompts: Sequence[Prompt], *, max_new_tokens: int = 128, temperature: float = 0.0,
              top_p: float = 1.0, top_k: int = 0, seed: int = 0, stop: Union[None, str, Sequence[str]] = None,
              ignore_eos: bool = False, max_seqs: int = 0) -> List[Generation]:
        """Runs many prompts through the batched engine over one paged KV pool: each step is one
        forward for all of them, and prompts that share a prefix share its KV blocks. Prompt i
        samples with seed + i. max_seqs bounds the sequences decoded together (0: as many as fit)."""
        s = _Sampling(max_new_tokens, temperature, top_p, top_k, seed, ignore_eos, _stops(stop))
        out = self._llm.batch([self._ids(p) for p in prompts], *s.args(), max_seqs)
        return [Generation._from(d) for d in out]

    def logits(self, ids: Sequence[int]):
        """Logits for every position of ids, one prefill from an empty cache: a float32 NumPy
        array [len(ids), vocab] that owns kvlm's buffer (no copy)."""
        return self._llm.logits(_as_ids(ids))

    def kv_stats(self) -> Dict[str, Any]:
        """The KV ledger of the last generate() / stream() / batch(): layout, element type, bytes,
        and for batch() the paged pool's blocks, shared and private bytes per sequence."""
        return self._llm.kv_stats()

    def __repr__(self) -> str:
        i = self.info
        return f"kvlm.LLM({self.path!r}, arch={i['arch']}, layers={i['layers']}, context={i['context']})"


class Stream:
    """An iterator of Token from LLM.stream(); .result holds the Generation at the end."""

    def __init__(self, impl: Any) -> None:
        self._impl = impl
        self.result: Optional[Generation] = None

    def __iter__(self) -> Iterator[Token]:
        return self

    def __next__(self) -> Token:
        nxt = self._impl.next()
        if nxt is None:
            if self.result is None:
                self.result = Generation._from(self._impl.result())
            raise StopIteration
        text, token = nxt
        return Token(id=token, text=text)


def bench(*, preset: Optional[str] = None, model: Optional[str] = None, **kwargs: Any) -> Dict[str, Any]:
    """The KV-cache experiment, as `kvlm bench --json` prints it: TTFT and TPOT with the cache on
    and off, KV bytes, the bandwidth roofline.

    preset: a built-in shape with synthetic weights ("distilgpt2" by default, "gpt2",
    "gpt-neo-1.3B", "tinyllama-1.1b"), or model: a real model's path. Other arguments are the
    CLI's, by their Python names: prompt, prompt_ids, prompt_tokens, new_tokens (list), runs,
    warmup, seed, cache_on_only, kv_dtype, kv_residual, decode_at (list), kv_dtypes (list),
    decode_steps, roofline (bool), weights, tokenizer, threads.
    """
    args = dict(kwargs)
    if preset is not None:
        args["preset"] = preset
    if model is not None:
        args["model"] = str(model)
    return _kvlm.bench(json.dumps(args))
