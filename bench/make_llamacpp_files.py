#!/usr/bin/env python3
"""GGUF files made by llama.cpp's own tools, for side-by-side benchmarks (issue 16).

Random Hugging Face models at TinyLlama-1.1B and GPT-2 shapes (every parameter random, norms
included, seed 0; the Llama-2 / GPT-2 tokenizers from ../shared) are saved in f16, converted by
llama.cpp's convert_hf_to_gguf.py to F16 and Q8_0, and the F16 file is quantized to Q4_0 by
llama.cpp's quantizer (llama_model_quantize, as llama-quantize does; it keeps the output matrix
in Q6_K, as llama-quantize does). Nothing here is written by kvlm or the gguf package's writer.

Setup (outside the repo): llama.cpp's source comes with llama-cpp-python's sdist:
    ~/kvlm-venv/bin/pip download llama-cpp-python==0.3.36 --no-binary :all: --no-deps -d /work/llcpp
    tar -xzf /work/llcpp/llama_cpp_python-0.3.36.tar.gz -C /work/llcpp
Run:
    ~/kvlm-venv/bin/python bench/make_llamacpp_files.py \
        --llama-cpp /work/llcpp/llama_cpp_python-0.3.36/vendor/llama.cpp --out /work/llcpp/files
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_hf(shape, out, shared):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if shape == "tinyllama":
        cfg = tf.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
        model = tf.LlamaForCausalLM(cfg)
        tok = None  # the SentencePiece model itself (convert_hf_to_gguf reads tokenizer.model)
    else:
        cfg = tf.GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024, n_ctx=1024)
        model = tf.GPT2LMHeadModel(cfg)
        import tokenizers as tk  # GPT-2's byte-level BPE, built from the original vocabulary files
        bpe = tk.Tokenizer(tk.models.BPE.from_file(os.path.join(shared, "tokenizers/gpt2/encoder.json"),
                                                   os.path.join(shared, "tokenizers/gpt2/vocab.bpe")))
        bpe.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = tk.decoders.ByteLevel()
        tok = tf.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                         unk_token="<|endoftext|>")
    with torch.no_grad():  # HF's defaults (norm weights 1, biases 0) would hide bugs
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p) if "weight" in name else 0.02 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.02)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    if tok is None:
        import json
        import shutil
        shutil.copy(os.path.join(shared, "tokenizers/llama2/tokenizer.model"), os.path.join(out, "tokenizer.model"))
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                   "add_bos_token": True}, open(os.path.join(out, "tokenizer_config.json"), "w"))
    else:
        tok.save_pretrained(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source folder (has convert_hf_to_gguf.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="tinyllama,gpt2")
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(args.llama_cpp, "gguf-py"), NO_LOCAL_GGUF="")
    for shape in args.shape.split(","):
        hf = os.path.join(args.out, shape + "-hf")
        if not os.path.exists(os.path.join(hf, "config.json")):
            make_hf(shape, hf, args.shared)
        for outtype in ("f16", "q8_0"):
            dst = os.path.join(args.out, f"{shape}-{outtype}.gguf")
            if not os.path.exists(dst):
                subprocess.run([sys.executable, os.path.join(args.llama_cpp, "convert_hf_to_gguf.py"), hf,
                                "--outtype", outtype, "--outfile", dst], check=True, env=env)
        dst = os.path.join(args.out, f"{shape}-q4_0.gguf")
        if not os.path.exists(dst):
            import llama_cpp
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
            params.nthread = os.cpu_count()
            rc = llama_cpp.llama_model_quantize(os.path.join(args.out, f"{shape}-f16.gguf").encode(), dst.encode(),
                                                params)
            if rc != 0:
                sys.exit(f"llama_model_quantize failed: {rc}")
        print(shape, "done")


if __name__ == "__main__":
    main()
