// INT2 KV-cache fidelity: quantization methods, mixed-precision teacher-forced attention, metrics.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/calibrate.h"
#include "oscar/int2.h"
#include "oscar/model.h"

namespace oscar {

// How a method stores the quantized part of the KV cache.
enum class MethodKind {
  kBF16,      // reference: K and V in bf16 (what the windows hold too)
  kNaive,     // per-token INT2 groups along head_dim, no rotation
  kHadamard,  // Walsh-Hadamard rotation (QuaRot-style) for K and V, then per-token INT2
  kKivi,      // keys per channel over blocks of tokens, values per token (no rotation)
  kRotation,  // per-(layer, head) rotations and clip ratios from a bundle or calibration (OSCAR)
};

// One method, fully specified: what evaluation and (later) kernels need per layer.
struct QuantMethod {
  std::string name;
  MethodKind kind = MethodKind::kBF16;
  std::int64_t group_size = 0;  // 0: head_dim
  int2::ScaleDType scale_dtype = int2::ScaleDType::kBF16;
  std::int64_t kivi_block = 128;      // KIVI: tokens per key channel group
  double k_clip = 1.0, v_clip = 1.0;  // uniform clip ratios (naive, hadamard, kivi)
  // kRotation / kHadamard: per layer [Hkv, d, d] float32 rotations (x_rot = x R), clip ratios
  // [Hkv] and, with centred keys, key means [Hkv, d], with smoothed keys the per-channel scales
  // [Hkv, d] (k' = (k - mean) / s is what gets rotated; queries see q * s); on the evaluation
  // device.
  std::vector<torch::Tensor> k_rotation, v_rotation, k_clips, v_clips, k_mean, v_mean, k_smooth;
  // Diagnostics: quantize only one of the two (the other stays bf16).
  bool quantize_keys = true, quantize_values = true;
  std::string description;

  // Bits per stored KV element at context `context` with `sink` + `recent` bf16 tokens.
  double bits_per_element(std::int64_t head_dim, std::int64_t context, std::int64_t sink,
                          std::int64_t recent) const;
};

// Methods from their names (bf16, naive, hadamard, kivi); rotation methods come from bundles.
QuantMethod make_baseline_method(const std::string& name, const ModelConfig& config,
                                 std::int64_t group_size, int2::ScaleDType scale_dtype,
                                 torch::Device device);
QuantMethod method_from_bundle(const std::string& name, const Bundle& bundle,
                               std::int64_t group_size, int2::ScaleDType scale_dtype,
                               torch::Device device);
QuantMethod method_from_rotations(const std::string& name, const RotationResult& rotations,
                                  const RotationOptions& options, std::int64_t group_size,
                                  int2::ScaleDType scale_dtype, torch::Device device);

// K and V [B, T, Hkv, d] as the method's cache would return them after dequantization, in the
// original (unrotated) basis, float32.
std::pair<torch::Tensor, torch::Tensor> reconstruct_kv(const QuantMethod& method,
                                                       std::int64_t layer, const torch::Tensor& k,
                                                       const torch::Tensor& v);

struct WindowParams {
  std::int64_t sink = 64;     // S0: keys j < S0 stay bf16
  std::int64_t recent = 256;  // W: keys j > t - W stay bf16 for the query at t
};

// Replaces the model's attention with mixed-precision attention over a cache quantized by
// `method`: for the query at t, key/value j is bf16 if j < S0 or j > t - W, else the method's
// dequantized value. Also measures, per layer, the relative error of the attention output against
// exact attention over the same bf16 K/V (same layer inputs), on positions with quantized keys.
class MixedPrecisionAttention : public AttentionBackend {
 public:
  MixedPrecisionAttention(const QuantMethod& method, WindowParams windows, std::int64_t num_layers);
  torch::Tensor attend(std::int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v, double scale) override;
  // Per layer: sqrt(sum |O - O_exact|^2 / sum |O_exact|^2) so far (0 where nothing was quantized).
  std::vector<double> layer_relative_errors() const;

 private:
  const QuantMethod& method_;
  WindowParams windows_;
  std::vector<double> err_sq_, ref_sq_;
};

// Mixed-precision attention for one layer (exposed for tests): returns O [B, T, Hq, d] and adds
// |O - O_exact|^2, |O_exact|^2 over queries t >= S0 + W to the two sums when they are non-null.
torch::Tensor mixed_precision_attention(const torch::Tensor& q, const torch::Tensor& k_full,
                                        const torch::Tensor& v_full, const torch::Tensor& k_quant,
                                        const torch::Tensor& v_quant, double scale,
                                        WindowParams windows, double* err_sq = nullptr,
                                        double* ref_sq = nullptr);

// Passkey retrieval built from evaluation text: a marker and a random number planted early (in
// the quantized part of the cache), filler text, and the marker again at the end; the trial
// succeeds when the model's greedy prediction of every token of the number is right.
struct PasskeyTrial {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> answer_positions;  // positions whose next token is an answer token
};
std::vector<PasskeyTrial> make_passkey_trials(const std::vector<std::int32_t>& filler,
                                              const std::vector<std::int32_t>& marker,
                                              const std::vector<std::vector<std::int32_t>>& keys,
                                              std::int64_t seq_len, std::int64_t plant_position,
                                              std::int32_t bos_token);

}  // namespace oscar

namespace oscar {

// Per-(layer, KV head) clip-ratio search on held-back calibration tokens. Keeps the post-RoPE
// q, k, v of a few sequences (the held-back part, never used for the covariances) and, for every
// candidate ratio, measures the error attention actually sees:
//   keys:   sum_t sum_j p_tj (q_t . e_j)^2   (logit error, weighted by the attention p_tj)
//   values: sum_t |sum_j p_tj e_j|^2         (attention-output error)
// with e the reconstruction error of the rotated, INT2-quantized keys / values and p the exact
// attention probabilities. Only keys that would be quantized count (S0 <= j <= t - W).
class ClipSearch : public AttentionObserver {
 public:
  ClipSearch(std::int64_t num_layers, std::int64_t num_heads, std::int64_t num_kv_heads,
             WindowParams windows, std::int64_t group_size, int2::ScaleDType scale_dtype);
  void on_attention(const AttentionRecord& record) override;
  // Chooses ratios from `grid` for every layer and head of `rotations` (writes HeadSummary clips).
  void search(RotationResult& rotations, const RotationOptions& options,
              const std::vector<double>& grid) const;
  bool empty() const { return layers_.front().empty(); }

 private:
  std::int64_t num_heads_, num_kv_heads_;
  WindowParams windows_;
  std::int64_t group_size_;
  int2::ScaleDType scale_dtype_;
  std::vector<std::vector<AttentionRecord>> layers_;
};

// 0.80, 0.82, ..., 1.00.
std::vector<double> default_clip_grid();

}  // namespace oscar
