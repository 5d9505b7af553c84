// Synthetic rotation bundles for Torch-free tests: random orthogonal rotations, plausible values.
#pragma once

#include <cstdint>
#include <string>

#include "oscar/bundle.h"

namespace oscar::test {

struct SyntheticBundleOptions {
  std::int64_t layers = 2;
  std::int64_t heads = 4;     // query heads
  std::int64_t kv_heads = 2;  // KV heads
  std::int64_t head_dim = 16;
  bool center_keys = true;
  bool center_values = true;
  double smooth_keys = 0.5;  // 0: no key smoothing (a format-1 bundle)
  std::uint64_t seed = 1;
};

// The config.json text of a Llama model with these dimensions.
std::string synthetic_config_json(const SyntheticBundleOptions& options);

// A bundle that passes validate_bundle, computed "for" the model of synthetic_config_json (its
// config_sha256 is that text's hash; the weights-header hash is a fixed made-up one). Rotations are
// orthogonal to float32 rounding, eigenvalues descending, clip ratios in (0, 1], smoothing scales
// with geometric mean 1 per head.
Bundle synthetic_bundle(const SyntheticBundleOptions& options = {});

}  // namespace oscar::test
