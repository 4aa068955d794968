// Attention over spans of keys/values with an online softmax: the cache is read once, span by
// span (a paged block, a ring segment, the new chunk), for all query heads that share a KV head.
#pragma once
#include <cstddef>

namespace kvlm {

// Running softmax state of g query heads: max m[g], denominator l[g], numerator acc[g][hd].
struct AttnState {
  int g, hd;
  float* m;
  float* l;
  float* acc;
  void reset();
};

// Folds n keys/values (rows `stride` floats apart) into the state. q is [g][hd]; scratch holds
// at least g * n floats.
void attend_span(const float* q, float scale, const float* k, const float* v, size_t stride, int n, AttnState& st,
                 float* scratch);
// out[g][hd] = acc / l
void attend_finish(const AttnState& st, float* out, size_t out_stride);

namespace scalar {
void attend_span(const float* q, float scale, const float* k, const float* v, size_t stride, int n, AttnState& st,
                 float* scratch);
}

}  // namespace kvlm
