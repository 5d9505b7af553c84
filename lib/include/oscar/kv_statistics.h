// Streaming attention statistics per (layer, KV head): C_Q, C_S (two objectives), key means.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "oscar/model.h"

namespace oscar {

enum class ValueObjective {
  kAttn,       // C_S = E[o^T o], o = S V the per-head attention output (the paper's definition)
  kKeyWeight,  // C_S = sum_t w_t v_t^T v_t / sum_t w_t, w_t = k_t C_Q k_t^T (the released proxy)
};
ValueObjective parse_value_objective(const std::string& name);
const char* value_objective_name(ValueObjective objective);

// What the statistics were computed from; a resumed or merged run must agree on it.
struct StatsProvenance {
  std::string model_name;
  std::string config_sha256;
  std::string weights_header_sha256;
  std::string dataset_name;
  std::string dataset_sha256;
  std::int64_t seq_len = 0;
  std::uint64_t seed = 0;
  std::int64_t shard_index = 0, shard_count = 1;
  std::string compute_dtype;  // the model's compute dtype (statistics differ slightly across them)
};

// Sums (not means) in float64 on the model's device, so two accumulators merge by addition and a
// run can stop and resume at any batch boundary. The main pass accumulates, per layer and KV head:
//   q_sum  = sum over the group's query rows of q^T q          [Hkv, d, d]
//   o_sum  = sum over the group's attention-output rows o^T o  [Hkv, d, d]
//   k_sum, v_sum = sums of key and value rows                 [Hkv, d]
//   k_sq_sum = per-channel sums of squared keys                [Hkv, d]
// and the row counts. The key-weighted value proxy needs the final C_Q, so it takes a second pass
// (begin_keyweight_pass) that accumulates kw_sum = sum w_t v_t^T v_t [Hkv, d, d] and w_sum [Hkv].
class KvStatistics : public AttentionObserver {
 public:
  KvStatistics(std::int64_t num_layers, std::int64_t num_heads, std::int64_t num_kv_heads,
               std::int64_t head_dim, torch::Device device);

  void on_attention(const AttentionRecord& record) override;

  // Freezes C_Q (from the main pass) as the key weights and switches to the second pass.
  void begin_keyweight_pass();
  bool in_keyweight_pass() const { return keyweight_pass_; }

  // Counters of what has been consumed, kept by the driver so that a resumed run skips it.
  std::int64_t main_sequences = 0, keyweight_sequences = 0;
  std::int64_t main_tokens() const { return main_tokens_; }
  std::int64_t keyweight_tokens() const { return keyweight_tokens_; }

  // Means, float64 [Hkv, d, d] (or [Hkv, d]) on the accumulator's device.
  torch::Tensor query_covariance(std::int64_t layer) const;
  torch::Tensor output_covariance(std::int64_t layer) const;
  torch::Tensor keyweight_value_covariance(std::int64_t layer) const;
  torch::Tensor key_mean(std::int64_t layer) const;
  torch::Tensor value_mean(std::int64_t layer) const;
  // Per-channel key statistics [Hkv, d]: E[k_c^2] and Var[k_c] (for key smoothing).
  torch::Tensor key_channel_second_moment(std::int64_t layer) const;
  torch::Tensor key_channel_variance(std::int64_t layer) const;

  // Raises oscar::Error naming the first layer whose sums hold NaN or Inf (non-finite activations).
  void check_finite() const;

  // Adds `other` (same shapes) into this accumulator. Main-pass sums add up. Statistics in the
  // key-weighted pass merge only when both began it from the same main-pass statistics (equal main
  // sums and frozen C_Q, checked): then the key-weighted sums add up and the main sums are kept
  // once. A main-pass accumulator and a key-weighted one do not merge.
  void merge(const KvStatistics& other);

  // Saves to a safetensors file (float64 sums, a JSON manifest with the counts and `provenance`),
  // atomically; load() checks the format and version.
  void save(const std::string& path, const StatsProvenance& provenance) const;
  static KvStatistics load(const std::string& path, torch::Device device,
                           StatsProvenance* provenance = nullptr);

  std::int64_t num_layers() const { return num_layers_; }
  std::int64_t num_heads() const { return num_heads_; }
  std::int64_t num_kv_heads() const { return num_kv_heads_; }
  std::int64_t head_dim() const { return head_dim_; }
  torch::Device device() const { return device_; }

 private:
  struct Layer {
    torch::Tensor q_sum, o_sum, k_sum, k_sq_sum, v_sum, kw_sum, w_sum;
    torch::Tensor weight_cq;  // frozen C_Q for the key-weighted pass
  };
  std::int64_t num_layers_, num_heads_, num_kv_heads_, head_dim_;
  torch::Device device_;
  std::vector<Layer> layers_;
  std::int64_t main_tokens_ = 0, keyweight_tokens_ = 0;
  bool keyweight_pass_ = false;
};

}  // namespace oscar
