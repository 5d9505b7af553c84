// Attention-aware clip-ratio search per (layer, KV head) on held-back calibration tokens.
#include <cmath>
#include <limits>

#include "oscar/error.h"
#include "oscar/evaluation.h"
#include "oscar/fake_quant.h"

namespace oscar {

std::vector<double> default_clip_grid() {
  std::vector<double> grid;
  for (int i = 80; i <= 100; i += 2) grid.push_back(i / 100.0);
  return grid;
}

ClipSearch::ClipSearch(std::int64_t num_layers, std::int64_t num_heads, std::int64_t num_kv_heads,
                       WindowParams windows, std::int64_t group_size, int2::ScaleDType scale_dtype)
    : num_heads_(num_heads),
      num_kv_heads_(num_kv_heads),
      windows_(windows),
      group_size_(group_size),
      scale_dtype_(scale_dtype),
      layers_(static_cast<std::size_t>(num_layers)) {}

void ClipSearch::on_attention(const AttentionRecord& record) {
  AttentionRecord kept;
  kept.layer = record.layer;
  kept.q = record.q.to(torch::kFloat32).clone();
  kept.k = record.k.to(torch::kFloat32).to(torch::kBFloat16).to(torch::kFloat32);
  kept.v = record.v.to(torch::kFloat32).to(torch::kBFloat16).to(torch::kFloat32);
  layers_.at(static_cast<std::size_t>(record.layer)).push_back(std::move(kept));
}

void ClipSearch::search(RotationResult& rotations, const RotationOptions& options,
                        const std::vector<double>& grid) const {
  OSCAR_CHECK(!empty(), "clip search: no held-back tokens were captured");
  const std::int64_t group = num_heads_ / num_kv_heads_;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const auto& rk_all = rotations.k_rotation[l];
    const auto& rv_all = rotations.v_rotation[l];
    for (std::int64_t h = 0; h < num_kv_heads_; ++h) {
      const auto rk = rk_all[h].to(torch::kFloat32), rv = rv_all[h].to(torch::kFloat32);
      torch::Tensor mean;
      if (options.center_keys) mean = rotations.k_mean[l][h].to(torch::kFloat32);
      torch::Tensor smooth;  // keys divided, queries multiplied: logits unchanged
      if (options.smooth_keys > 0.0) smooth = rotations.k_smooth[l][h].to(torch::kFloat32);
      std::vector<double> key_loss(grid.size(), 0.0), value_loss(grid.size(), 0.0);
      for (const AttentionRecord& rec : layers_[l]) {
        const auto dev = rec.q.device();
        for (std::int64_t b = 0; b < rec.q.size(0); ++b) {
          const auto k = rec.k[b].select(1, h);  // [T, d]
          const auto v = rec.v[b].select(1, h);
          const std::int64_t T = k.size(0), d = k.size(1);
          const auto q =
              rec.q[b].slice(1, h * group, (h + 1) * group).permute({1, 0, 2});  // [g,T,d]
          // Exact attention probabilities and the mask of quantized keys.
          const auto rows =
              torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(dev));
          const auto causal = rows.view({1, -1}) <= rows.view({-1, 1});
          auto scores = torch::matmul(q, k.t()) / std::sqrt(static_cast<double>(d));
          const auto p = torch::softmax(scores.masked_fill(causal.logical_not(), -INFINITY), -1);
          const auto qmask = ((rows.view({1, -1}) >= windows_.sink) &
                              (rows.view({1, -1}) <= rows.view({-1, 1}) - windows_.recent))
                                 .to(torch::kFloat32);
          const auto pq = p * qmask;  // [g, T, T]: attention on quantized keys only
          auto k_src = mean.defined() ? k - mean : k;
          if (smooth.defined()) k_src = k_src / smooth;
          const auto k_rot = torch::matmul(k_src, rk), v_rot = torch::matmul(v, rv);
          // Logits are invariant: (q S) R . ((k - mu) S^-1) R = q . k - q . mu.
          const auto q_rot = torch::matmul(smooth.defined() ? q * smooth : q, rk);
          for (std::size_t i = 0; i < grid.size(); ++i) {
            int2::QuantParams params;
            params.group_size = group_size_ > 0 ? group_size_ : d;
            params.scale_dtype = scale_dtype_;
            params.clip_ratio = grid[i];
            const auto ek = fake_quantize_rows(k_rot, params) - k_rot;  // [T, d]
            const auto logit_err = torch::matmul(q_rot, ek.t());        // [g, T, T]
            key_loss[i] += (pq * logit_err.pow(2)).sum().item<double>();
            const auto ev = fake_quantize_rows(v_rot, params) - v_rot;
            value_loss[i] += torch::matmul(pq, ev).pow(2).sum().item<double>();
          }
        }
      }
      std::size_t best_k = 0, best_v = 0;
      for (std::size_t i = 1; i < grid.size(); ++i) {
        if (key_loss[i] < key_loss[best_k]) best_k = i;
        if (value_loss[i] < value_loss[best_v]) best_v = i;
      }
      for (HeadSummary& s : rotations.heads) {
        if (s.layer == static_cast<std::int64_t>(l) && s.head == h) {
          s.k_clip = grid[best_k];
          s.v_clip = grid[best_v];
        }
      }
    }
  }
}

}  // namespace oscar
