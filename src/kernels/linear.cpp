#include "kernels/linear.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <functional>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/context.h"
#include "kernels/dot.h"
#include "kernels/half_dot.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
#include "kernels/qgemm_amx.h"
#include "kernels/row_dot.h"
#include "kernels/row_tiles.h"

namespace kvlm {


namespace {
constexpr size_t kMinParallelWork = 1 << 16;  // multiply-adds below which one thread does it all
}  // namespace

bool Linear::convert(DType f) {
  if (f == fmt) return true;
  if (fmt == DType::BF16 || fmt == DType::F16) {  // widen exactly, then on
    w.resize(static_cast<size_t>(out) * in);
    for (size_t i = 0; i < w.size(); ++i) w[i] = fmt == DType::F16 ? f16_to_f32(w16[i]) : bf16_to_f32(w16[i]);
    w16.clear();
    fmt = DType::F32;
    if (f == DType::F32) return true;
  }
  if (fmt != DType::F32) {  // back to the f32 values the blocks stand for, then on
    w.resize(static_cast<size_t>(out) * in);
    if (is_row_quant(fmt))  // rows in the file layout, not our packed groups
      dequantize(fmt, packed.data(), w.data(), w.size());
    else
      unpack_to_f32(fmt, packed.data(), out, in, w.data());
    packed.clear();
    fmt = DType::F32;
    if (f == DType::F32) return true;
  }
  if ((f == DType::Q8_0 || f == DType::Q4_0) && in % 32 != 0) return false;
  const size_t n = static_cast<size_t>(out) * in;
  if (f == DType::BF16 || f == DType::F16) {
    w16.resize(n);
    for (size_t i = 0; i < n; ++i) w16[i] = f == DType::F16 ? f32_to_f16(w[i]) : f32_to_bf16(w[i]);
  } else {
    packed = pack_quantized(f, w.data(), out, in);
  }
  fmt = f;
  w.clear();
  return true;
}

size_t Linear::bytes() const {
  return (w.size() + b.size()) * sizeof(float) + w16.size() * 2 + packed.size();
}

void Linear::forward(const float* x, int n, float* y) const { forward(x, n, y, Context::this_thread()); }

void Linear::forward(const float* x, int n, float* y, Context& ctx) const {
  ThreadPool& pool = ctx.pool();
  const float* B = b.empty() ? nullptr : b.data();
  if (fmt == DType::F32) {
    matmul(w.data(), B, out, in, x, n, y, &pool);
    return;
  }
  // The pool takes the call unless it is too little work to share; each thread's slice goes in
  // about eight pieces, so that a thread done early takes a slowed one's last pieces.
  const bool share = static_cast<size_t>(out) * in * n >= kMinParallelWork;
  auto run = [&](size_t items, const std::function<void(size_t, size_t)>& body) {
    if (share)
      pool.parallel_for_stealing(items, std::max<size_t>(1, items / (8 * static_cast<size_t>(pool.size()))), body);
    else
      body(0, items);
  };
  if (fmt == DType::BF16 || fmt == DType::F16) {  // tiles of rows and tokens, threads splitting the rows
    run(out, [&](size_t r0, size_t r1) {
      half_rows_times_tokens(fmt, w16.data(), B, in, static_cast<int>(r0), static_cast<int>(r1), x, n, y, out);
    });
    return;
  }
  QuantizedActs& acts = ctx.quantized_acts();  // activations to int8 once per call, as llama.cpp does
  if (is_row_quant(fmt) && n >= kTileTokens && row_tiles_usable(fmt)) {
    // Prefill: 16 rows unpacked once into tiles, then every 16 tokens (the last ones padded).
    acts.quantize(x, n, in, &pool, static_cast<int>(dtype_block(fmt)), kTileTokens);
    if (acts.block == 32) {  // the 32-value types' min term
      acts.sub_sums.resize(static_cast<size_t>(acts.n_padded) * acts.nb);
      row_tile_act_sums(acts, acts.sub_sums.data());
    }
    const size_t row_bytes = dtype_row_bytes(fmt, in, "matrix row");
    run((out + kTileRows - 1) / kTileRows, [&](size_t p0, size_t p1) {
      RowQuants u(fmt, in);
      RowTiles tiles;
      Buffer<float> dots(static_cast<size_t>(acts.n_padded) * kTileRows);
      for (size_t p = p0; p < p1; ++p) {
        const size_t r0 = p * kTileRows;
        const int rows = std::min(kTileRows, out - static_cast<int>(r0));
        tiles.pack(packed.data() + r0 * row_bytes, rows, row_bytes, u);
        row_tile_multiply(tiles, acts, acts.sub_sums.data(), dots.data());
        for (int t = 0; t < n; ++t)
          for (int i = 0; i < rows; ++i)
            y[static_cast<size_t>(t) * out + r0 + i] = dots[static_cast<size_t>(t) * kTileRows + i] + (B ? B[r0 + i] : 0.0f);
      }
      row_tiles_release();
    });
    return;
  }
  if (is_row_quant(fmt)) {  // rows as stored in the file: each unpacked once, then every token
    acts.quantize(x, n, in, &pool, static_cast<int>(dtype_block(fmt)));
    const size_t row_bytes = dtype_row_bytes(fmt, in, "matrix row");
    run(out, [&](size_t r0, size_t r1) {
      // Decode: straight from the stored rows where a kernel does that (it does for every row or
      // for none: the type and CPU decide).
      float dot;
      size_t r = r0;
      for (; n == 1 && r < r1 && row_dot_stored(fmt, packed.data() + r * row_bytes, in, acts, 0, &dot); ++r)
        y[r] = dot + (B ? B[r] : 0.0f);
      if (r == r1) return;
      RowQuants u(fmt, in);
      float dots[4];
      for (; r < r1; ++r) {
        unpack_row(packed.data() + r * row_bytes, u);
        for (int t0 = 0; t0 < n; t0 += 4) {
          const int nt = std::min(4, n - t0);
          row_dot(u, acts, t0, nt, dots);
          for (int t = 0; t < nt; ++t) y[static_cast<size_t>(t0 + t) * out + r] = dots[t] + (B ? B[r] : 0.0f);
        }
      }
    });
    return;
  }
  acts.quantize(x, n, in, &pool);
  const size_t gbytes = q_group_bytes(fmt, in / 32);
  const int groups = (out + kGroupRows - 1) / kGroupRows;
  // A tile of nt tokens from t0 x the rows from r0, plus the bias, into y.
  auto put = [&](const float* tile, int tile_cols, int t0, int nt, size_t r0, int rows) {
    for (int t = 0; t < nt; ++t)
      for (int i = 0; i < rows; ++i)
        y[static_cast<size_t>(t0 + t) * out + r0 + i] = tile[t * tile_cols + i] + (B ? B[r0 + i] : 0.0f);
  };
  // Tokens [t_begin, n) of groups [g, g + count) through the 1-4 token kernels, each group of 8
  // weight rows staying in L1 while every token tile passes over it.
  auto vector_tiles = [&](int g_begin, int count, int t_begin) {
    float tile[4][kGroupRows];
    for (int g = g_begin; g < g_begin + count; ++g) {
      const int rows = std::min(kGroupRows, out - g * kGroupRows);
      for (int t0 = t_begin; t0 < n; t0 += 4) {
        const int nt = std::min(4, n - t0);
        qgemm_group(fmt, packed.data() + g * gbytes, acts, t0, nt, tile);
        put(&tile[0][0], kGroupRows, t0, nt, static_cast<size_t>(g) * kGroupRows, rows);
      }
    }
  };
  if (n < kAmxTokens || !amx_usable()) {
    run(groups, [&](size_t g0, size_t g1) { vector_tiles(static_cast<int>(g0), static_cast<int>(g1 - g0), 0); });
    return;
  }
  // AMX: 16-token tiles over pairs of groups (16 rows); the last n % 16 tokens as above. Both give
  // the scalar twin's values bit for bit, so a token's outputs do not depend on its batch.
  const int full = n / kAmxTokens * kAmxTokens;
  run((groups + 1) / 2, [&](size_t p0, size_t p1) {
    float tile[kAmxTokens][kAmxRows];
    for (size_t p = p0; p < p1; ++p) {
      const int g = static_cast<int>(2 * p), count = std::min(2, groups - g);
      const int rows = std::min(kAmxRows, out - g * kGroupRows);
      {
        AmxGroupPair pair(fmt, packed.data() + g * gbytes, count, in / 32);
        for (int t0 = 0; t0 < full; t0 += kAmxTokens) {
          pair.multiply(acts, t0, tile);
          put(&tile[0][0], kAmxRows, t0, kAmxTokens, static_cast<size_t>(g) * kGroupRows, rows);
        }
      }
      vector_tiles(g, count, full);
    }
  });
}

}  // namespace kvlm
