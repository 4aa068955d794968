#include "cli/common.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kvlm::cli
