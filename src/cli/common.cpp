#include "cli/common.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/read_file.h"
#include "model/synthetic.h"

namespace kvlm::cli {

namespace fs = std::filesystem;

std::string resolve_tokenizer(const std::string& model_path, const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  fs::path p(model_path);
  if (fs::is_directory(p) || p.extension() == ".gguf") return p.string();
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (fs::exists(dir / "tokenizer.bin")) return (dir / "tokenizer.bin").string();
  std::vector<fs::path> found;
  for (auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind("tok", 0) == 0 && e.path().extension() == ".bin") found.push_back(e.path());
  }
  if (found.size() == 1) return found[0].string();
  fail(model_path, ": cannot find its tokenizer (no tokenizer.bin or single tok*.bin beside it); pass --tokenizer");
}

std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_path, const std::string& explicit_path,
                                              const Model& m) {
  auto tok = load_tokenizer(resolve_tokenizer(model_path, explicit_path));
  if (tok->vocab_size() > m.cfg.vocab_size)
    fail("tokenizer has ", tok->vocab_size(), " tokens but the model only ", m.cfg.vocab_size);
  return tok;
}

std::unique_ptr<Model> model_or_preset(const std::string& model, const std::string& preset, const std::string& weights,
                                       uint64_t seed, std::string& name, bool quiet) {
  if (!model.empty()) {
    name = model;
    return load_model(model, weights);
  }
  if (!quiet)
    std::fprintf(stderr, "[kvlm] building %s with synthetic weights (seed %llu)\n", preset.c_str(),
                 static_cast<unsigned long long>(seed));
  auto m = synthetic_model(preset_config(preset), seed);
  if (!weights.empty()) m->convert_weights(parse_dtype(weights, kAsWeights, "weight type"));
  name = preset + " (synthetic weights)";
  return m;
}

void check_kv_dtype_name(const std::string& name) { kv_dtype_for(name, DType::F32); }

DType kv_dtype_for(const std::string& name, DType source_format, bool sinks) {
  if (name == "auto") return sinks ? DType::F32 : auto_kv_dtype(source_format);
  try {
    return parse_dtype(name, kInKvPages, "KV dtype");
  } catch (const KvlmError&) {  // its one refusal, retold with "auto" among the names
    fail("unknown KV dtype '", name, "' (known: auto, ", dtype_names(kInKvPages), ")");
  }
}

DType kv_dtype_for(const std::string& name, const Model& m, bool sinks) {
  return kv_dtype_for(name, m.source_format, sinks);
}

std::vector<int> parse_ids(const std::string& s) {
  std::vector<int> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX) fail("--ids: '", item, "' is not a token id");
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) fail("--ids: no token ids given");
  return ids;
}

namespace {
// "2.5GB" -> 2.5 and "GB"; false when it does not start with a number.
bool number_and_unit(const std::string& spec, double& v, std::string& unit) {
  size_t used = 0;
  try {
    v = std::stod(spec, &used);
  } catch (...) {
    return false;
  }
  unit = spec.substr(used);
  return true;
}
// Bytes per unit of size (B, KB, MB, GB, KiB, MiB, GiB; "" = bytes), 0 for any other unit.
double bytes_per_unit(const std::string& u) {
  return u.empty() || u == "B" ? 1 : u == "KB" ? 1e3 : u == "MB" ? 1e6 : u == "GB" ? 1e9
         : u == "KiB" ? 1024.0 : u == "MiB" ? 1048576.0 : u == "GiB" ? 1073741824.0 : 0;
}
}  // namespace

size_t parse_bytes(const std::string& spec, const std::string& flag) {
  double v = 0, mult = 0;
  std::string unit;
  if (number_and_unit(spec, v, unit)) mult = bytes_per_unit(unit);
  if (mult == 0 || !(v > 0) || v * mult >= 1e15)
    fail(flag, " '", spec, "': expected a size such as 512MB or 2GB (B, KB, MB, GB, KiB, MiB, GiB)");
  return static_cast<size_t>(v * mult);
}

int parse_kv_capacity(const std::string& spec, size_t bytes_per_block, int block_size) {
  double v = 0;
  std::string unit;
  if (!number_and_unit(spec, v, unit) || !(v > 0))
    fail("--kv-capacity '", spec, "': expected a positive number with tok, B, KB, MB or GB");
  double blocks;
  if (unit.empty() || unit == "tok" || unit == "tokens") {
    blocks = std::ceil(v / block_size);
  } else {
    const double mult = bytes_per_unit(unit);
    if (mult == 0) fail("--kv-capacity '", spec, "': unknown unit '", unit, "' (tok, B, KB, MB, GB, KiB, MiB, GiB)");
    blocks = std::floor(v * mult / bytes_per_block);
  }
  if (blocks < 1 || blocks > (1 << 24)) fail("--kv-capacity '", spec, "' gives ", blocks, " blocks (1..16M allowed)");
  return static_cast<int>(blocks);
}

}  // namespace kvlm::cli
