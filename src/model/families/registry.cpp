// The one table of model families. A family is a file in this folder plus a row here.
#include <string>

#include "core/error.h"
#include "model/family.h"

namespace kvlm {

extern const Family kLlamaFamily, kMistralFamily, kQwen2Family, kQwen3Family, kSmolLm3Family, kGraniteFamily,
    kOlmo2Family, kOlmo3Family, kGemma2Family, kGemma3Family, kPhi3Family, kPhi2Family, kStableLmFamily, kGpt2Family,
    kGptNeoFamily, kMixtralFamily, kQwen3MoeFamily, kGptOssFamily, kDeepseekV2Family, kDeepseekV3Family;

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> table = {
      &kLlamaFamily,    &kMistralFamily,    &kMixtralFamily,    &kQwen2Family, &kQwen3Family,
      &kQwen3MoeFamily, &kSmolLm3Family,    &kGraniteFamily,    &kOlmo2Family, &kOlmo3Family,
      &kGemma2Family,   &kGemma3Family,     &kPhi3Family,       &kPhi2Family,  &kStableLmFamily,
      &kGptOssFamily,   &kDeepseekV2Family, &kDeepseekV3Family, &kGpt2Family,  &kGptNeoFamily};
  return table;
}

namespace {

// "a, b, c": the values of one field over the families that have it.
std::string known(const char* Family::*field) {
  std::string out;
  for (const Family* f : families())
    if (f->*field) out += (out.empty() ? "" : ", ") + std::string(f->*field);
  return out;
}

const Family* find(const char* Family::*field, const std::string& value) {
  for (const Family* f : families())
    if (f->*field && value == f->*field) return f;
  return nullptr;
}

}  // namespace

const Family& family_named(const std::string& arch, const std::string& source) {
  if (const Family* f = find(&Family::name, arch)) return *f;
  fail(source, ": unknown model architecture '", arch, "' (known: ", known(&Family::name), ")");
}

const Family& family_for_hf_type(const std::string& model_type, const std::string& source) {
  if (const Family* f = find(&Family::hf_model_type, model_type)) return *f;
  fail(source, ": unsupported model_type '", model_type, "' (supported: ", known(&Family::hf_model_type), ")");
}

const Family& family_for_gguf_arch(const std::string& gguf_arch, const std::string& source) {
  if (const Family* f = find(&Family::gguf_arch, gguf_arch)) return *f;
  fail(source, ": unsupported GGUF architecture '", gguf_arch, "' (supported: ", known(&Family::gguf_arch), ")");
}

}  // namespace kvlm
