// The model runtime decoding over the paged INT2 KV cache on the GPU: an attention backend that
// keeps each layer's keys and values in the kernels' page pools (BF16 sink and recent window, INT2
// history) and attends with the INT2 decode kernel.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "oscar/evaluation.h"
#include "oscar/kernels/int2_cache.h"
#include "oscar/model.h"

namespace oscar {

struct PagedCacheOptions {
  std::int64_t sink = 64;          // S0: first tokens kept in BF16
  std::int64_t recent = 256;       // W: the recent window keeps at least the last W tokens in BF16
  int page_size = 16;              // tokens per page (8 or 16)
  std::int64_t max_tokens = 4096;  // capacity per sequence
  kernels::DecodePath path = kernels::DecodePath::kAuto;
};

// How the tokens of a sequence of `length` tokens are split between the BF16 sink, the INT2
// history and the BF16 recent window under the demotion policy of PagedInt2Attention: the recent
// window grows to W + page_size - 1 tokens and then its oldest (full) page is quantized, so the
// history is always whole pages and the window holds W .. W + page_size - 1 tokens.
struct PagedSplit {
  std::int64_t sink = 0, int2 = 0, recent = 0;
};
PagedSplit paged_split(std::int64_t length, const PagedCacheOptions& options);

// Decoding backend: every call of attend() receives one new token per sequence (q [B, 1, Hq, d],
// k and v [B, 1, Hkv, d], post-RoPE, sequences advancing in lockstep), stores its key and value
// through the kernels (centred, smoothed and rotated by the method's per-head parameters, INT2 rows
// quantized with its clip ratios), demotes the oldest recent page when the policy says so, and
// returns the decode attention output rotated back to the model's basis. The method must be a
// rotation method (OSCAR or Hadamard) with one scale group per row and bf16 scales: the kernels'
// row format. Needs a CUDA device.
class PagedInt2Attention : public AttentionBackend {
 public:
  PagedInt2Attention(const QuantMethod& method, const ModelConfig& config, std::int64_t batch,
                     PagedCacheOptions options, torch::Device device);
  torch::Tensor attend(std::int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v, double scale) override;
  // Tokens stored per sequence so far (equal for every layer after a full forward).
  std::int64_t length() const { return length_; }

 private:
  struct LayerCache {
    torch::Tensor k_bf16, v_bf16, k_codes, v_codes, k_scale_zero, v_scale_zero;
    torch::Tensor k_rotation, v_rotation, k_rotation_t, v_rotation_t, k_mean, v_mean, k_smooth;
    torch::Tensor k_clip, v_clip;
    torch::Tensor store_prepared;  // the store's rotation prepared once (head_dim 64 / 128)
    std::vector<std::vector<std::int32_t>> sink_pages, recent_pages, int2_pages;  // per sequence
    std::vector<std::int32_t> free_bf16, free_int2;
    std::int64_t length = 0;
  };
  void store(LayerCache& cache, const torch::Tensor& k, const torch::Tensor& v);

  const QuantMethod& method_;
  PagedCacheOptions options_;
  std::int64_t batch_, num_heads_, num_kv_heads_, head_dim_;
  torch::Device device_;
  std::vector<LayerCache> layers_;
  std::int64_t length_ = 0;
  // The decode kernels' workspace, kept across calls: its merge counters are zeroed when it is
  // allocated and every call leaves them zero.
  torch::Tensor workspace_;
};

}  // namespace oscar
