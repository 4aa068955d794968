#include "model/rope.h"

#include <cmath>

#include "kernels/ops.h"

namespace kvlm {

RopeTable RopeTable::for_config(const ModelConfig& cfg) {
  RopeTable r;
  r.kind = cfg.rope;
  r.head_dim = cfg.head_dim;
  r.rot_dims = cfg.rotary_dims();
  if (cfg.rope == RopeKind::None) return r;
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < r.rot_dims / 2; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(cfg.rope_theta), (2.0 * i) / r.rot_dims);
    if (cfg.rope_scaling == "linear") {
      f /= cfg.rope_factor;
    } else if (cfg.rope_scaling == "llama3") {
      // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
      double low_wavelen = cfg.rope_original_max_pos / cfg.rope_low_freq_factor;
      double high_wavelen = cfg.rope_original_max_pos / cfg.rope_high_freq_factor;
      double wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f /= cfg.rope_factor;
      } else if (wavelen >= high_wavelen) {
        double smooth = (cfg.rope_original_max_pos / wavelen - cfg.rope_low_freq_factor) /
                        (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor);
        f = (1 - smooth) * f / cfg.rope_factor + smooth * f;
      }
    }
    if (!cfg.rope_freq_divisors.empty()) f /= cfg.rope_freq_divisors[i];
    r.inv_freq.push_back(static_cast<float>(f));
  }
  return r;
}

void RopeTable::rotate_heads(float* heads, int n_heads, int pos) const {
  if (kind != RopeKind::None) rope_heads(spec(), heads, n_heads, pos);
}

}  // namespace kvlm
