#include "model/quantize_file.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/buffer.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/gguf_write.h"
#include "kernels/ggml_quantize.h"

namespace kvlm {

namespace {

// Rows per slab: about 64 MiB of f32 values at a time.
constexpr uint64_t kSlabValues = 16u << 20;

// The input's metadata as llama-quantize writes it: every key in order, less the two it sets
// (moved to the end, as ggml's gguf_set_val_* does) and a split file's keys.
GgufMeta output_meta(const GgufFile& g, const QuantFileType& ft) {
  GgufMeta meta;
  for (const std::string& key : g.key_order) {
    if (key == "general.quantization_version" || key == "general.file_type" || key == "split.no" ||
        key == "split.count" || key == "split.tensors.count")
      continue;
    meta.emplace_back(key, g.meta.at(key));
  }
  auto u32 = [](uint32_t v) {
    GgufValue x;
    x.type = GgufType::U32;
    x.scalar = static_cast<uint64_t>(v);
    return x;
  };
  meta.emplace_back("general.quantization_version", u32(2));  // ggml's GGML_QNT_VERSION
  meta.emplace_back("general.file_type", u32(static_cast<uint32_t>(ft.ftype)));
  return meta;
}

// llama-quantize refuses a tensor holding NaN or Inf (its loader checks every row): a block's
// scale would carry it into every value.
void check_finite(const TensorInfo& t, const float* x, uint64_t n, uint64_t row) {
  for (uint64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) fail(t.file, ": tensor ", t.name, " row ", row, " holds ", x[i], " at column ", i);
}

// Writes rows of `from` as `to`, a slab at a time, the rows of a slab split among the threads;
// `to` == t.dtype copies them (after the same check).
void convert_rows(const TensorInfo& t, DType to, std::ofstream& out) {
  const uint64_t per_row = static_cast<uint64_t>(t.shape.back());
  const uint64_t rows = static_cast<uint64_t>(t.numel()) / per_row;
  const uint64_t in_row = dtype_row_bytes(t.dtype, per_row, t.name), out_row = dtype_row_bytes(to, per_row, t.name);
  const uint64_t slab_rows = std::max<uint64_t>(1, kSlabValues / per_row);
  Buffer<float> f32(static_cast<size_t>(std::min(rows, slab_rows) * per_row));
  Buffer<uint8_t> bytes(static_cast<size_t>(std::min(rows, slab_rows) * out_row));
  for (uint64_t r0 = 0; r0 < rows; r0 += slab_rows) {
    const uint64_t n = std::min(slab_rows, rows - r0);
    ThreadPool::global().parallel_for(static_cast<size_t>(n), [&](size_t a, size_t b) {
      for (size_t r = a; r < b; ++r) {
        float* x = f32.data() + r * per_row;
        const uint8_t* src = t.data + (r0 + r) * in_row;
        dequantize(t.dtype, src, x, per_row);
        check_finite(t, x, per_row, r0 + r);
        uint8_t* y = bytes.data() + r * out_row;
        if (to == t.dtype) std::memcpy(y, src, out_row);
        else if (can_quantize_blocks(to)) quantize_blocks(to, x, y, per_row);
        else dtype_traits(to).from_float(x, y, per_row);
      }
    });
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n * out_row));
  }
}

}  // namespace

QuantizeReport quantize_gguf_file(const std::string& in, const std::string& out, const QuantFileType& ft,
                                  const std::function<void(const QuantizeProgress&)>& progress) {
  if (!looks_like_gguf(in))
    fail(in, ": not a GGUF file (kvlm quantize reads GGUF F32/F16/BF16 files, such as llama.cpp's "
             "convert_hf_to_gguf.py writes)");
  auto g = read_gguf(in);
  QuantizeReport report;
  report.plan = plan_quantization(*g, ft);
  std::vector<GgufTensorSpec> specs;
  QuantizeProgress p;
  p.tensors = report.plan.size();
  for (const TensorPlan& t : report.plan) {
    const TensorInfo& info = g->tensors.get(t.name);
    specs.push_back({t.name, t.to, info.shape});
    p.bytes_total += info.nbytes;
    report.fell_back += t.fell_back;
  }
  const uint64_t align = g->alignment;
  const std::string header = gguf_header(output_meta(*g, ft), specs, align);
  const std::string tmp = out + "." + std::to_string(getpid()) + ".tmp";
  try {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail(out, ": cannot write (", tmp, ")");
    f.exceptions(std::ofstream::failbit | std::ofstream::badbit);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    static const char kZeros[64] = {};
    for (size_t i = 0; i < report.plan.size(); ++i) {
      const TensorPlan& t = report.plan[i];
      const TensorInfo& info = g->tensors.get(t.name);
      p.tensor = i;
      p.name = &t.name;
      if (progress) progress(p);
      convert_rows(info, t.to, f);
      f.write(kZeros, static_cast<std::streamsize>(gguf_padding(gguf_data_bytes(specs[i]), align)));
      g->tensors.drop_pages(info);
      p.bytes_done += info.nbytes;
    }
    p.tensor = p.tensors;
    p.name = nullptr;
    if (progress) progress(p);
    f.close();
    std::filesystem::rename(tmp, out);
  } catch (const std::ios_base::failure&) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    fail(out, ": write failed (disk full?)");
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  report.in_bytes = std::filesystem::file_size(in);
  report.out_bytes = std::filesystem::file_size(out);
  return report;
}

}  // namespace kvlm
