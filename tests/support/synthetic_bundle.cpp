// Synthetic rotation bundles: Gram-Schmidt orthogonalised Gaussian rotations and random statistics.
#include "synthetic_bundle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "oscar/sha256.h"

namespace oscar::test {

namespace {

// Appends a random orthogonal d x d matrix (row-major): the rows of a Gaussian matrix made
// orthonormal by modified Gram-Schmidt in float64.
void append_orthogonal(std::int64_t d, std::mt19937_64& rng, std::vector<float>& out) {
  std::normal_distribution<double> normal;
  std::vector<double> m(static_cast<std::size_t>(d * d));
  for (double& v : m) v = normal(rng);
  for (std::int64_t i = 0; i < d; ++i) {
    double* row = m.data() + i * d;
    for (std::int64_t k = 0; k < i; ++k) {
      const double* prev = m.data() + k * d;
      double dot = 0.0;
      for (std::int64_t j = 0; j < d; ++j) dot += row[j] * prev[j];
      for (std::int64_t j = 0; j < d; ++j) row[j] -= dot * prev[j];
    }
    double norm = 0.0;
    for (std::int64_t j = 0; j < d; ++j) norm += row[j] * row[j];
    norm = std::sqrt(norm);
    for (std::int64_t j = 0; j < d; ++j) row[j] /= norm;
  }
  for (double v : m) out.push_back(static_cast<float>(v));
}

}  // namespace

std::string synthetic_config_json(const SyntheticBundleOptions& o) {
  const std::int64_t hidden = o.heads * o.head_dim;
  return fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": {}, )"
      R"("intermediate_size": {}, "num_hidden_layers": {}, "num_attention_heads": {}, )"
      R"("num_key_value_heads": {}, "vocab_size": 32, "max_position_embeddings": 2048, )"
      R"("rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false}})"
      "\n",
      hidden, 2 * hidden, o.layers, o.heads, o.kv_heads);
}

Bundle synthetic_bundle(const SyntheticBundleOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::int64_t h = o.kv_heads, d = o.head_dim;

  Bundle b;
  b.model.architecture = "LlamaForCausalLM";
  b.model.model_type = "llama";
  b.model.name = "synthetic";
  b.model.num_layers = o.layers;
  b.model.num_heads = o.heads;
  b.model.num_kv_heads = h;
  b.model.head_dim = d;
  b.model.rope.theta = 10000.0;
  b.model.config_sha256 = sha256_hex(synthetic_config_json(o));
  b.model.weights_header_sha256 = sha256_hex("synthetic weights header");
  b.calibration.dataset_name = "synthetic.txt";
  b.calibration.dataset_sha256 = sha256_hex("synthetic data");
  b.calibration.tokens = 4096;
  b.calibration.seq_len = 256;
  b.calibration.seed = o.seed;
  b.calibration.center_keys = o.center_keys;
  b.calibration.center_values = o.center_values;
  b.calibration.smooth_keys = o.smooth_keys;
  b.calibration.eigen_backend = "lapack";
  b.calibration.device = "cpu";
  b.tool_version = "0.1.0";
  b.git_commit = "synthetic";
  b.created = "2026-01-01T00:00:00Z";

  for (std::int64_t layer = 0; layer < o.layers; ++layer) {
    LayerRotations l;
    for (std::int64_t head = 0; head < h; ++head) {
      append_orthogonal(d, rng, l.k_rotation);
      append_orthogonal(d, rng, l.v_rotation);
      for (auto* eig : {&l.k_eigenvalues, &l.v_eigenvalues}) {
        std::vector<float> values;
        for (std::int64_t i = 0; i < d; ++i) {
          values.push_back(static_cast<float>(10.0 * std::exp(-0.3 * i) * (1.0 + uniform(rng))));
        }
        std::sort(values.begin(), values.end(), std::greater<float>());
        eig->insert(eig->end(), values.begin(), values.end());
      }
      l.k_clip.push_back(static_cast<float>(0.9 + 0.1 * uniform(rng)));
      l.v_clip.push_back(static_cast<float>(0.85 + 0.15 * uniform(rng)));
      if (o.center_keys) {
        for (std::int64_t i = 0; i < d; ++i) l.k_mean.push_back(static_cast<float>(normal(rng)));
      }
      if (o.center_values) {
        for (std::int64_t i = 0; i < d; ++i) l.v_mean.push_back(static_cast<float>(normal(rng)));
      }
      if (o.smooth_keys > 0.0) {
        std::vector<double> logs;
        double mean_log = 0.0;
        for (std::int64_t i = 0; i < d; ++i) {
          logs.push_back(0.5 * normal(rng));
          mean_log += logs.back() / static_cast<double>(d);
        }
        for (double v : logs) l.k_smooth.push_back(static_cast<float>(std::exp(v - mean_log)));
      }
    }
    b.layers.push_back(std::move(l));
  }
  return b;
}

}  // namespace oscar::test
