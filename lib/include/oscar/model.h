// Reference decoder forward (Llama / Mistral / Qwen2 / Qwen3) in LibTorch, with attention hooks.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "oscar/config.h"

namespace oscar {

// What one attention layer saw and produced in a forward pass. All tensors are [B, T, H, d] in the
// compute dtype: q after q_norm (if any) and RoPE; k likewise; v as projected; `out` is the
// per-head attention output O = softmax(q k^T / sqrt(d) + causal mask) v, before o_proj. With GQA,
// query head h reads KV head h / (num_heads / num_kv_heads).
struct AttentionRecord {
  std::int64_t layer = 0;
  std::int64_t start_position = 0;  // absolute position of token 0 of this forward
  torch::Tensor q, k, v, out;
};

// Receives every layer's attention record during a forward, without the forward knowing who listens
// (calibration statistics, evaluation metrics). Called in layer order on the forward's thread.
class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  virtual void on_attention(const AttentionRecord& record) = 0;
};

// Replaces the attention computation of a layer (fake-quantized caches, INT2 kernels). Receives
// q [B, T, Hq, d], k and v [B, T, Hkv, d] post-RoPE and must return O [B, T, Hq, d] in q's dtype.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual torch::Tensor attend(std::int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale) = 0;
};

// Exact causal attention with GQA, the project's reference: q [B, T, Hq, d], k/v [B, T, Hkv, d] ->
// O [B, T, Hq, d]. Scores and softmax in fp32; blocked over queries so the masked half of the score
// matrix is never computed (and memory stays O(block x T)). Uses the fused SDPA kernel where
// LibTorch has one and the device is a GPU.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale);

struct LoadOptions {
  // Weight and compute dtype. nullopt: the checkpoint's stored dtype on CUDA; float32 on CPU, where
  // LibTorch has no fast half-precision matrix products.
  std::optional<torch::ScalarType> dtype;
  bool keep_stored_dtype = false;  // compute in the checkpoint's dtype (overrides `dtype`)
  torch::Device device = torch::kCPU;
  bool verbose = false;  // print what is loaded
};

struct ForwardOptions {
  AttentionObserver* observer = nullptr;  // notified per layer
  AttentionBackend* attention = nullptr;  // replaces causal_attention when set
  std::int64_t start_position = 0;        // RoPE position of the first token
  bool check_finite = true;               // raise oscar::Error on NaN/Inf activations
};

// Sum of next-token negative log-likelihoods and the number of predictions scored.
struct NllSum {
  double nll = 0.0;
  std::int64_t count = 0;
  double perplexity() const;
};

class Model {
 public:
  // Loads config.json and the safetensors weights of a Hugging Face model directory, validating
  // every tensor's presence, dtype and shape against the config.
  static Model load(const std::string& model_dir, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  torch::Device device() const { return device_; }
  torch::ScalarType dtype() const { return dtype_; }
  torch::ScalarType stored_dtype() const { return stored_dtype_; }
  const std::string& directory() const { return dir_; }
  std::int64_t parameter_count() const;

  // tokens: [B, T] integer ids (any integer dtype, any device). Returns float32 logits [B, T, V] on
  // the model's device.
  torch::Tensor forward(const torch::Tensor& tokens, const ForwardOptions& options = {}) const;

  // Final hidden states [B, T, hidden] (after the last RMSNorm), in the compute dtype.
  torch::Tensor hidden_states(const torch::Tensor& tokens,
                              const ForwardOptions& options = {}) const;

  // Scores next-token predictions of each row of `tokens` [B, T]: positions 0..T-2 predict 1..T-1.
  // Computed in fp32 from the logits, chunked so that B x T x V is never all held at once.
  NllSum score(const torch::Tensor& tokens, const ForwardOptions& options = {}) const;

 private:
  struct Layer {
    torch::Tensor input_norm, post_norm;
    torch::Tensor qkv_weight, qkv_bias;  // q, k, v projections fused: [(Hq + 2 Hkv) d, hidden]
    torch::Tensor o_weight, o_bias;
    torch::Tensor q_norm, k_norm;                // Qwen3
    torch::Tensor gate_up_weight, gate_up_bias;  // gate and up fused: [2 I, hidden]
    torch::Tensor down_weight, down_bias;
  };
  std::pair<torch::Tensor, torch::Tensor> rope_tables(std::int64_t start,
                                                      std::int64_t length) const;

  ModelConfig config_;
  std::string dir_;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::ScalarType stored_dtype_ = torch::kFloat32;
  torch::Tensor embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  torch::Tensor inv_freq_;  // float32 [d / 2] on the model's device
  double rope_attention_scale_ = 1.0;
};

// Inverse RoPE frequencies [head_dim / 2] (float32, computed exactly as transformers does for each
// rope type) and the cos/sin scale (yarn's attention factor; 1 otherwise).
std::pair<torch::Tensor, double> rope_inverse_frequencies(const ModelConfig& config);

class Checkpoint;

// Copies one F32/F16/BF16 tensor out of a checkpoint into an owned CPU tensor of its stored dtype;
// other dtypes raise an error naming the tensor, its file and its dtype.
torch::Tensor read_checkpoint_tensor(const Checkpoint& checkpoint, const std::string& name);

// Parses "f32" | "float32" | "bf16" | "bfloat16" | "f16" | "float16"; throws on anything else.
torch::ScalarType parse_dtype_name(const std::string& name);
std::string dtype_short_name(torch::ScalarType dtype);

// Parses "cpu", "cuda", "cuda:N"; throws with an actionable message when CUDA is not available.
torch::Device parse_device_name(const std::string& name);

}  // namespace oscar
