// Plain C++ reference of the paged mixed-precision KV cache kernels.
#include "oscar/int2_cache_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace oscar::int2 {

std::uint16_t to_bf16_bits(float v) {
  const float r = round_scale(v, ScaleDType::kBF16);  // exactly representable in bf16
  std::uint32_t bits = 0;
  std::memcpy(&bits, &r, sizeof(bits));
  return static_cast<std::uint16_t>(bits >> 16);
}

float from_bf16_bits(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float v = 0.0f;
  std::memcpy(&v, &wide, sizeof(v));
  return v;
}

void rotate_row(const float* x, const float* mean, const float* smooth, const float* rotation,
                std::int64_t d, float* out) {
  std::vector<float> centred(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < d; ++i) {
    float v = x[i];
    if (mean != nullptr) v -= mean[i];
    if (smooth != nullptr) v /= smooth[i];
    centred[static_cast<std::size_t>(i)] = v;
  }
  for (std::int64_t j = 0; j < d; ++j) {
    float acc = 0.0f;
    for (std::int64_t i = 0; i < d; ++i)
      acc += centred[static_cast<std::size_t>(i)] * rotation[i * d + j];
    out[j] = round_scale(acc, ScaleDType::kBF16);
  }
}

void quantize_cache_row(const float* row, std::int64_t d, float clip_ratio, std::uint8_t* packed,
                        std::uint16_t* scale_zero) {
  QuantParams params;
  params.group_size = d;
  params.clip_ratio = static_cast<double>(clip_ratio);
  params.scale_dtype = ScaleDType::kBF16;
  float scale = 0.0f, zero = 0.0f;
  quantize_row(row, d, params, packed, &scale, &zero);
  scale_zero[0] = to_bf16_bits(scale);
  scale_zero[1] = to_bf16_bits(zero);
}

void dequantize_cache_row(const std::uint8_t* packed, const std::uint16_t* scale_zero,
                          std::int64_t d, float* out) {
  const float scale = from_bf16_bits(scale_zero[0]), zero = from_bf16_bits(scale_zero[1]);
  dequantize_row(packed, &scale, &zero, d, d, out);
}

void attention_reference(const float* q, std::int64_t group, const float* keys, const float* values,
                         std::int64_t tokens, std::int64_t d, double scale, double* out) {
  std::vector<double> logits(static_cast<std::size_t>(tokens));
  for (std::int64_t g = 0; g < group; ++g) {
    double* o = out + g * d;
    std::fill(o, o + d, 0.0);
    if (tokens == 0) continue;
    double mx = -INFINITY;
    for (std::int64_t t = 0; t < tokens; ++t) {
      double dot = 0.0;
      for (std::int64_t e = 0; e < d; ++e) {
        dot += static_cast<double>(q[g * d + e]) * static_cast<double>(keys[t * d + e]);
      }
      logits[static_cast<std::size_t>(t)] = dot * scale;
      mx = std::max(mx, dot * scale);
    }
    double sum = 0.0;
    for (std::int64_t t = 0; t < tokens; ++t) {
      const double p = std::exp(logits[static_cast<std::size_t>(t)] - mx);
      sum += p;
      for (std::int64_t e = 0; e < d; ++e) o[e] += p * static_cast<double>(values[t * d + e]);
    }
    for (std::int64_t e = 0; e < d; ++e) o[e] /= sum;
  }
}

}  // namespace oscar::int2
