#include "model/rope.h"

#include <algorithm>
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
  // YaRN's band, as transformers computes it: the pair indices where the original context makes
  // beta_fast and beta_slow rotations, rounded outward when truncating, clamped to the head.
  double yarn_low = 0, yarn_high = 0;
  if (cfg.rope_scaling == "yarn") {
    const int dim = r.rot_dims;
    auto correction = [&](double rotations) {
      return dim * std::log(cfg.rope_original_max_pos / (rotations * 2 * pi)) / (2 * std::log(cfg.rope_theta));
    };
    yarn_low = correction(cfg.rope_beta_fast);
    yarn_high = correction(cfg.rope_beta_slow);
    if (cfg.rope_yarn_truncate) yarn_low = std::floor(yarn_low), yarn_high = std::ceil(yarn_high);
    yarn_low = std::max(yarn_low, 0.0);
    yarn_high = std::min(yarn_high, dim - 1.0);
    if (yarn_low == yarn_high) yarn_high += 0.001;
  }
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
    } else if (cfg.rope_scaling == "yarn") {
      // Pairs below the band keep their frequency, pairs above it are interpolated by the factor.
      const double ramp = std::clamp((i - yarn_low) / (yarn_high - yarn_low), 0.0, 1.0);
      f = f / cfg.rope_factor * ramp + f * (1 - ramp);
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
