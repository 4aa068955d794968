// kvlm quantize IN OUT TYPE: a GGUF F32/F16/BF16 file into a llama.cpp file type, byte for byte
// what llama-quantize writes without an importance matrix (model/quantize_file.h). A progress bar
// on a terminal; one line per file otherwise.
#include <chrono>
#include <cstdio>
#include <map>
#include <unistd.h>

#include "cli/common.h"
#include "core/error.h"
#include "model/quantize_file.h"

namespace kvlm::cli {

namespace {

struct QuantizeArgs {
  std::string in, out, type;
  bool list = false;
};

void draw_bar(const QuantizeProgress& p) {
  const double f = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
  const int width = 30, filled = static_cast<int>(f * width);
  std::fprintf(stderr, "\r[%.*s%*s] %3d%%  %zu/%zu %-40.40s", filled, "##############################", width - filled, "",
               static_cast<int>(f * 100), p.tensor, p.tensors, p.name ? p.name->c_str() : "done");
  std::fflush(stderr);
}

int run_quantize(const QuantizeArgs& a) {
  if (a.list) {
    for (const QuantFileType& f : quant_file_types()) std::printf("%-10s %s\n", f.name, f.about);
    return 0;
  }
  if (a.in.empty() || a.out.empty() || a.type.empty()) fail("quantize needs IN OUT TYPE (kvlm quantize --list names the types)");
  const QuantFileType& ft = parse_quant_file_type(a.type);
  const bool tty = isatty(fileno(stderr));
  const auto t0 = std::chrono::steady_clock::now();
  QuantizeReport r = quantize_gguf_file(a.in, a.out, ft, tty ? draw_bar : std::function<void(const QuantizeProgress&)>{});
  if (tty) std::fprintf(stderr, "\n");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::map<std::string, int> by_type;
  for (const TensorPlan& t : r.plan) ++by_type[dtype_name(t.to)];
  std::string types;
  for (const auto& [name, n] : by_type) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  std::printf("%s: %s, %.1f MiB -> %.1f MiB in %.1f s (tensors: %s)\n", a.out.c_str(), ft.name, r.in_bytes / 1048576.0,
              r.out_bytes / 1048576.0, s, types.c_str());
  if (r.fell_back)
    std::printf("%d tensor(s) had rows %s blocks do not divide; they took the next type that fits, as llama-quantize does\n",
                r.fell_back, ft.name);
  return 0;
}

}  // namespace

Runner add_quantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* sub = app.add_subcommand("quantize", "write a GGUF file in another type, as llama-quantize does (e.g. Q4_K_M)");
  sub->add_option("in", a->in, "GGUF file of F32/F16/BF16 tensors");
  sub->add_option("out", a->out, "GGUF file to write");
  sub->add_option("type", a->type, "file type: Q4_K_M, Q5_K_M, Q6_K, Q8_0, IQ4_XS, ... (--list)");
  sub->add_flag("--list", a->list, "list the file types and exit");
  return [a] { return run_quantize(*a); };
}

}  // namespace kvlm::cli
