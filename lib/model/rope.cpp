// RoPE inverse frequencies for the default, linear, llama3 and yarn types, as transformers computes
// them.
#include <cmath>

#include "oscar/error.h"
#include "oscar/model.h"

namespace oscar {

namespace {

// All arithmetic on frequencies is float32 tensors, in the same order of operations as
// transformers' modeling_rope_utils, so that cos/sin tables agree to the last bit.
torch::Tensor default_inv_freq(double theta, std::int64_t dim) {
  auto exponents =
      torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(dim);
  return 1.0 / torch::pow(theta, exponents);
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

std::pair<torch::Tensor, double> rope_inverse_frequencies(const ModelConfig& config) {
  const RopeConfig& rope = config.rope;
  const std::int64_t dim = config.head_dim;
  torch::Tensor inv_freq = default_inv_freq(rope.theta, dim);
  double attention_scale = 1.0;
  if (rope.type == "default") {
    return {inv_freq, attention_scale};
  }
  if (rope.type == "linear") {
    return {inv_freq / rope.factor, attention_scale};
  }
  if (rope.type == "llama3") {
    const double old_context = static_cast<double>(rope.original_max_position_embeddings);
    const double low_wavelen = old_context / rope.low_freq_factor;
    const double high_wavelen = old_context / rope.high_freq_factor;
    auto wavelen = 2 * M_PI / inv_freq;
    auto scaled = torch::where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq);
    auto smooth = (old_context / wavelen - rope.low_freq_factor) /
                  (rope.high_freq_factor - rope.low_freq_factor);
    auto smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
    auto medium =
        torch::logical_not(wavelen < high_wavelen) * torch::logical_not(wavelen > low_wavelen);
    return {torch::where(medium, smoothed, scaled), attention_scale};
  }
  if (rope.type == "yarn") {
    const double factor = rope.factor;
    const double original_context = static_cast<double>(rope.original_max_position_embeddings > 0
                                                            ? rope.original_max_position_embeddings
                                                            : config.max_position_embeddings);
    if (rope.attention_factor) {
      attention_scale = *rope.attention_factor;
    } else if (rope.mscale && rope.mscale_all_dim && *rope.mscale != 0 &&
               *rope.mscale_all_dim != 0) {
      attention_scale =
          yarn_mscale(factor, *rope.mscale) / yarn_mscale(factor, *rope.mscale_all_dim);
    } else {
      attention_scale = yarn_mscale(factor, 1.0);
    }
    auto correction_dim = [&](double rotations) {
      return (static_cast<double>(dim) * std::log(original_context / (rotations * 2 * M_PI))) /
             (2 * std::log(rope.theta));
    };
    double low = correction_dim(rope.beta_fast);
    double high = correction_dim(rope.beta_slow);
    if (rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // avoid a zero-width ramp
    auto pos_freqs = torch::pow(
        rope.theta, torch::arange(0, dim, 2).to(torch::kFloat32) / static_cast<double>(dim));
    auto extrapolation = 1.0 / pos_freqs;
    auto interpolation = 1.0 / (factor * pos_freqs);
    auto ramp = torch::clamp((torch::arange(dim / 2, torch::kFloat32) - low) / (high - low), 0, 1);
    auto extrapolation_weight = 1 - ramp;
    inv_freq = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight;
    return {inv_freq, attention_scale};
  }
  fail("unsupported RoPE type '{}'", rope.type);
}

}  // namespace oscar
