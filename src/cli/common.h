// Shared pieces of the kvlm subcommands: model/tokenizer resolution and small parsers.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/read_file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::cli {

// Tokenizer path: the explicit one, else tokenizer.json in an HF folder, the GGUF itself, else tokenizer.bin or
// the only tok*.bin beside a llama2.c checkpoint.
std::string resolve_tokenizer(const std::string& model_path, const std::string& explicit_path);
std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_path, const std::string& explicit_path,
                                              const Model& m);

// The benchmarks' model: a real one (--model), or a built-in shape with synthetic weights, with
// its matrices converted to `weights` ("" = as stored). `name` describes it.
std::unique_ptr<Model> model_or_preset(const std::string& model, const std::string& preset, const std::string& weights,
                                       uint64_t seed, std::string& name, bool quiet = false);

// A --kv-dtype value: "auto" (the default) is f32 beside matrices given in f32 and f16 beside any
// other (auto_kv_dtype), and f32 with attention sinks (`sinks`: their cache moves and re-rotates
// f32 rows); any other value names a KV type, or is refused naming the flag.
DType kv_dtype_for(const std::string& name, DType source_format, bool sinks = false);  // Model::source_format
DType kv_dtype_for(const std::string& name, const Model& m, bool sinks = false);
// The same refusal before the (slow) model load.
void check_kv_dtype_name(const std::string& name);

// "1,2,3" -> {1,2,3}; throws on anything else.
std::vector<int> parse_ids(const std::string& s);
// KV pool capacity from "<N>tok" (or a bare number: tokens), "<N>KB|MB|GB|B": blocks of the pool.
// "512MB", "2GB", "64KiB", "1000" (bytes): a positive size; throws naming the flag.
size_t parse_bytes(const std::string& spec, const std::string& flag);
int parse_kv_capacity(const std::string& spec, size_t bytes_per_block, int block_size);
std::string json_escape_utf8(const std::string& s);

// Each subcommand registers itself and returns the function that runs it.
using Runner = std::function<int()>;
Runner add_generate(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_ppl(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_kv_plan(CLI::App& app);
Runner add_batch(CLI::App& app);
Runner add_bench_serving(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_quantize(CLI::App& app);

}  // namespace kvlm::cli
