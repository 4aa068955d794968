#!/usr/bin/env python3
"""Records what the reference tokenizers produce on a few hundred hard strings.

    ~/kvlm-venv/bin/pip install sentencepiece tokenizers
    ~/kvlm-venv/bin/python tools/make_tokenizer_fixtures.py ../shared tests/fixtures/tokenizers

Writes:
  strings.json                  the test strings (Unicode, emoji, whitespace runs, digits, specials)
  llama2_sentencepiece.json     sentencepiece (Google's library) ids for Llama 2's tokenizer.model
  stories260k_hf_tokenizers.json  HF `tokenizers` ids for stories260K-hf/tokenizer.json
  gpt2_hf_tokenizers.json       HF `tokenizers` ids for GPT-2 (encoder.json + vocab.bpe)
  bytelevel_tiny/tokenizer.json a tiny byte-level BPE trained here with HF `tokenizers`,
  bytelevel_tiny_hf_tokenizers.json  and its ids (exercises kvlm's tokenizer.json ByteLevel path)
"""
import json
import os
import random
import sys

import sentencepiece as spm
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def test_strings():
    fixed = [
        "", " ", "  ", "   leading", "trailing   ", "a  b   c    d", "\t", "\t\ttabs\t", "\n", "\n\n", "line1\nline2",
        "line1\r\nline2", " \n \n ", "Hello world", "hello, WORLD!", "I'm you're they'll we've she'd it's",
        "12345", "3.14159", "1,000,000", "2024-11-29", "0x1F600", "caf\u00e9", "na\u00efve r\u00e9sum\u00e9",
        "e\u0301 combining", "\u00a0nbsp\u00a0", "\u4f60\u597d\uff0c\u4e16\u754c", "\u3053\u3093\u306b\u3061\u306f",
        "\uc548\ub155\ud558\uc138\uc694", "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440",
        "\u0645\u0631\u062d\u0628\u0627", "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947",
        "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1fa\U0001f1f8",
        "<s>", "</s>", "<unk>", "<s>hello</s>", "<|endoftext|>", "a<|endoftext|>b", "\u2581", "\u2581\u2581x",
        "def f(x):\n    return x ** 2\n", "{\"json\": [1, 2, 3]}", "<html><body>hi</body></html>", "C++ & Rust || Go",
        "\u00bfQu\u00e9 tal?", "\u00dcber Stra\u00dfe", "\u0127\u0131\u0142", "\u2603\u2764\ufe0f", "x" * 50,
        "ab" * 30, "Once upon a time, there was a little girl named Lily.", "   \t \n  mixed \t\n whitespace  ",
    ]
    rng = random.Random(1234)
    pool = [s for s in fixed if s] + ["the", "cat", " ", "  ", "\n", "\t", "42", "\u00e9", "\U0001f600", "\u4e2d",
                                      "'s", "!", "...", "\u0416", "ing", "\u200d"]
    extra = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 8))) for _ in range(240)]
    return fixed + extra


def main(shared, out):
    os.makedirs(out, exist_ok=True)
    strings = test_strings()
    with open(os.path.join(out, "strings.json"), "w") as f:
        json.dump(strings, f, ensure_ascii=True, indent=0)

    sp = spm.SentencePieceProcessor(model_file=os.path.join(shared, "tokenizers/llama2/tokenizer.model"))
    dump(out, "llama2_sentencepiece.json", "sentencepiece " + spm.__version__ + " on tokenizers/llama2/tokenizer.model, "
         "encode(text) with add_bos=True", [[1] + sp.encode(s) for s in strings])

    tk = Tokenizer.from_file(os.path.join(shared, "models/stories260K-hf/tokenizer.json"))
    dump(out, "stories260k_hf_tokenizers.json", "HF tokenizers on models/stories260K-hf/tokenizer.json, "
         "encode(text).ids (post-processor adds <s>)", [tk.encode(s).ids for s in strings])

    g = Tokenizer(models.BPE.from_file(os.path.join(shared, "tokenizers/gpt2/encoder.json"),
                                       os.path.join(shared, "tokenizers/gpt2/vocab.bpe")))
    g.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    g.decoder = decoders.ByteLevel()
    dump(out, "gpt2_hf_tokenizers.json", "HF tokenizers ByteLevel BPE over tokenizers/gpt2 encoder.json + vocab.bpe",
         [g.encode(s).ids for s in strings])

    tiny = Tokenizer(models.BPE())
    tiny.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tiny.decoder = decoders.ByteLevel()
    corpus = open(os.path.join(shared, "data/tinystories/tinystories_val_sample.txt"), encoding="utf-8").read()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tiny.train_from_iterator([corpus[i:i + 2000] for i in range(0, 40000, 2000)], trainer)
    os.makedirs(os.path.join(out, "bytelevel_tiny"), exist_ok=True)
    tiny.save(os.path.join(out, "bytelevel_tiny", "tokenizer.json"))
    dump(out, "bytelevel_tiny_hf_tokenizers.json", "HF tokenizers on bytelevel_tiny/tokenizer.json (trained here)",
         [tiny.encode(s).ids for s in strings])


def dump(out, name, what, ids):
    with open(os.path.join(out, name), "w") as f:
        json.dump({"oracle": what, "ids": ids}, f, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
