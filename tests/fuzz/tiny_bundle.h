// A tiny valid rotation bundle, shared by the seed generator and the manifest fuzz target.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "oscar/bundle.h"

namespace oscar::fuzz {

// A rotation by `angle` in each 2x2 block of a d x d matrix (orthogonal, deterministic).
inline std::vector<float> block_rotations(std::int64_t heads, std::int64_t d, double angle) {
  std::vector<float> r(static_cast<std::size_t>(heads * d * d), 0.0f);
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i + 1 < d; i += 2) {
      const double a = angle * static_cast<double>(h + 1);
      float* m = r.data() + h * d * d;
      m[i * d + i] = static_cast<float>(std::cos(a));
      m[i * d + i + 1] = static_cast<float>(-std::sin(a));
      m[(i + 1) * d + i] = static_cast<float>(std::sin(a));
      m[(i + 1) * d + i + 1] = static_cast<float>(std::cos(a));
    }
  }
  return r;
}

inline oscar::Bundle tiny_bundle(std::int64_t layers, std::int64_t kv_heads, std::int64_t d,
                                 bool centred, double smooth) {
  oscar::Bundle b;
  b.model.architecture = "LlamaForCausalLM";
  b.model.model_type = "llama";
  b.model.name = "tiny";
  b.model.num_layers = layers;
  b.model.num_heads = kv_heads * 2;
  b.model.num_kv_heads = kv_heads;
  b.model.head_dim = d;
  b.model.config_sha256 = std::string(64, 'a');
  b.model.weights_header_sha256 = std::string(64, 'b');
  b.calibration.dataset_name = "seed.txt";
  b.calibration.tokens = 64;
  b.calibration.seq_len = 16;
  b.calibration.center_keys = centred;
  b.calibration.center_values = centred;
  b.calibration.smooth_keys = smooth;
  b.calibration.eigen_backend = "lapack";
  b.calibration.device = "cpu";
  b.tool_version = "0.1.0";
  b.git_commit = "seed";
  b.created = "2025-01-01T00:00:00Z";
  const auto hd = static_cast<std::size_t>(kv_heads * d);
  for (std::int64_t l = 0; l < layers; ++l) {
    oscar::LayerRotations r;
    r.k_rotation = block_rotations(kv_heads, d, 0.1 * static_cast<double>(l + 1));
    r.v_rotation = block_rotations(kv_heads, d, 0.2 * static_cast<double>(l + 1));
    r.k_eigenvalues.assign(hd, 1.0f);
    r.v_eigenvalues.assign(hd, 0.5f);
    r.k_clip.assign(static_cast<std::size_t>(kv_heads), 0.9f);
    r.v_clip.assign(static_cast<std::size_t>(kv_heads), 1.0f);
    if (centred) {
      r.k_mean.assign(hd, 0.25f);
      r.v_mean.assign(hd, -0.25f);
    }
    if (smooth > 0.0) r.k_smooth.assign(hd, 2.0f);
    b.layers.push_back(std::move(r));
  }
  return b;
}

}  // namespace oscar::fuzz
