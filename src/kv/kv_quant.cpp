#include "kv/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace kvlm {

KvDtype parse_kv_dtype(const std::string& s) {
  if (s == "f32") return KvDtype::F32;
  if (s == "bf16") return KvDtype::BF16;
  if (s == "int8") return KvDtype::INT8;
  if (s == "int4") return KvDtype::INT4;
  fail("unknown KV dtype '", s, "' (known: f32, bf16, int8, int4)");
}

const char* kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::F32: return "f32";
    case KvDtype::BF16: return "bf16";
    case KvDtype::INT8: return "int8";
    case KvDtype::INT4: return "int4";
  }
  return "?";
}

bool kv_dtype_fits(KvDtype t, int kv_dim) { return t != KvDtype::INT4 || kv_dim % 32 == 0; }

size_t KvRowCodec::data_bytes() const {
  switch (dtype) {
    case KvDtype::F32: return kv_dim * 4;
    case KvDtype::BF16: return kv_dim * 2;
    case KvDtype::INT8: return kv_dim;
    case KvDtype::INT4: return kv_dim / 2;
  }
  return 0;
}

int KvRowCodec::n_params() const {
  switch (dtype) {
    case KvDtype::INT8: return kv_dim / head_dim;
    case KvDtype::INT4: return 2 * (kv_dim / 32);
    default: return 0;
  }
}

void KvRowCodec::encode(const float* x, uint8_t* data, float* params) const {
  switch (dtype) {
    case KvDtype::F32:
      std::memcpy(data, x, kv_dim * 4);
      return;
    case KvDtype::BF16:
      for (int i = 0; i < kv_dim; ++i) {
        uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(data + 2 * i, &h, 2);
      }
      return;
    case KvDtype::INT8:
      for (int h = 0; h < kv_dim / head_dim; ++h) {
        const float* xh = x + h * head_dim;
        float amax = 0.0f;
        for (int i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(xh[i]));
        float s = amax / 127.0f, inv = s ? 1.0f / s : 0.0f;
        params[h] = s;
        for (int i = 0; i < head_dim; ++i)
          data[h * head_dim + i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(xh[i] * inv)));
      }
      return;
    case KvDtype::INT4:
      for (int g = 0; g < kv_dim / 32; ++g) {
        const float* xg = x + g * 32;
        float lo = *std::min_element(xg, xg + 32), hi = *std::max_element(xg, xg + 32);
        float s = (hi - lo) / 15.0f, inv = s ? 1.0f / s : 0.0f;
        params[2 * g] = s;
        params[2 * g + 1] = lo;
        for (int i = 0; i < 16; ++i) {
          int a = std::clamp(static_cast<int>(std::nearbyint((xg[2 * i] - lo) * inv)), 0, 15);
          int b = std::clamp(static_cast<int>(std::nearbyint((xg[2 * i + 1] - lo) * inv)), 0, 15);
          data[g * 16 + i] = static_cast<uint8_t>(a | (b << 4));
        }
      }
      return;
  }
}

void KvRowCodec::decode_head(const uint8_t* data, const float* params, int h, float* out) const {
  const int base = h * head_dim;
  switch (dtype) {
    case KvDtype::F32:
      std::memcpy(out, data + base * 4, head_dim * 4);
      return;
    case KvDtype::BF16:
      for (int i = 0; i < head_dim; ++i) {
        uint16_t v;
        std::memcpy(&v, data + 2 * (base + i), 2);
        out[i] = bf16_to_f32(v);
      }
      return;
    case KvDtype::INT8: {
      float s = params[h];
      const int8_t* q = reinterpret_cast<const int8_t*>(data) + base;
      for (int i = 0; i < head_dim; ++i) out[i] = s * q[i];
      return;
    }
    case KvDtype::INT4:
      if (head_dim % 32 == 0) {  // whole groups: unpack nibble pairs without per-element arithmetic
        for (int g0 = base / 32, gi = 0; gi < head_dim / 32; ++gi) {
          const float s = params[2 * (g0 + gi)], z = params[2 * (g0 + gi) + 1];
          const uint8_t* q = data + (g0 + gi) * 16;
          float* o = out + gi * 32;
          for (int i = 0; i < 16; ++i) {
            o[2 * i] = z + s * (q[i] & 0xF);
            o[2 * i + 1] = z + s * (q[i] >> 4);
          }
        }
        return;
      }
      for (int i = 0; i < head_dim; ++i) {
        int e = base + i, g = e / 32;
        uint8_t byte = data[e / 2];
        int q = (e & 1) ? byte >> 4 : byte & 0xF;
        out[i] = params[2 * g + 1] + params[2 * g] * q;
      }
      return;
  }
}

}  // namespace kvlm
