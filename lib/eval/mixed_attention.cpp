// Teacher-forced attention over a mixed-precision KV cache: bf16 sink and recent window, INT2
// middle.
#include <cmath>

#include "oscar/error.h"
#include "oscar/evaluation.h"

namespace oscar {
namespace {

// Queries per block: bounds the score matrix at B x H x block x T floats.
constexpr std::int64_t kQueryBlock = 256;

torch::Tensor bf16_round(const torch::Tensor& x) {
  return x.to(torch::kBFloat16).to(torch::kFloat32);
}

// [B, T, Hkv, d] -> [B, Hq, T, d] (GQA: each KV head serves `group` query heads).
torch::Tensor expand_heads(const torch::Tensor& x, std::int64_t group) {
  auto t = x.permute({0, 2, 1, 3});
  return group == 1 ? t : t.repeat_interleave(group, 1);
}

}  // namespace

torch::Tensor mixed_precision_attention(const torch::Tensor& q_in, const torch::Tensor& k_full,
                                        const torch::Tensor& v_full, const torch::Tensor& k_quant,
                                        const torch::Tensor& v_quant, double scale,
                                        WindowParams windows, double* err_sq, double* ref_sq) {
  const std::int64_t batch = q_in.size(0), length = q_in.size(1), hq = q_in.size(2);
  const std::int64_t group = hq / k_full.size(2);
  const auto q = q_in.to(torch::kFloat32).permute({0, 2, 1, 3});  // [B, Hq, T, d]
  const auto kf = expand_heads(k_full, group), vf = expand_heads(v_full, group);
  const auto kq = expand_heads(k_quant, group), vq = expand_heads(v_quant, group);
  const auto opts = torch::TensorOptions().device(q.device());
  std::vector<torch::Tensor> outputs;
  double err = 0.0, ref = 0.0;
  for (std::int64_t t0 = 0; t0 < length; t0 += kQueryBlock) {
    const std::int64_t t1 = std::min(length, t0 + kQueryBlock);
    const auto qb = q.slice(2, t0, t1);
    const auto kf_b = kf.slice(2, 0, t1), vf_b = vf.slice(2, 0, t1);
    const auto rows = torch::arange(t0, t1, opts.dtype(torch::kLong)).view({-1, 1});
    const auto cols = torch::arange(0, t1, opts.dtype(torch::kLong)).view({1, -1});
    const auto causal = cols <= rows;
    auto s_full = torch::matmul(qb, kf_b.transpose(2, 3)) * scale;
    s_full = s_full.masked_fill(causal.logical_not(), -INFINITY);
    // Keys in the quantized part for the query at t: S0 <= j <= t - W.
    const bool any_quantized = t1 - 1 - windows.recent >= windows.sink;
    if (!any_quantized) {
      outputs.push_back(torch::matmul(torch::softmax(s_full, -1), vf_b));
      continue;
    }
    const auto quant_mask = (cols >= windows.sink) & (cols <= rows - windows.recent);
    const auto kq_b = kq.slice(2, 0, t1), vq_b = vq.slice(2, 0, t1);
    const auto s_quant = torch::matmul(qb, kq_b.transpose(2, 3)) * scale;
    const auto s_mixed = torch::where(quant_mask, s_quant, s_full);
    const auto p = torch::softmax(s_mixed, -1);
    const auto qm = quant_mask.to(torch::kFloat32);
    const auto o = torch::matmul(p * (1.0 - qm), vf_b) + torch::matmul(p * qm, vq_b);
    outputs.push_back(o);
    if (err_sq != nullptr || ref_sq != nullptr) {
      const auto o_exact = torch::matmul(torch::softmax(s_full, -1), vf_b);
      const std::int64_t first = std::max<std::int64_t>(t0, windows.sink + windows.recent);
      if (first < t1) {
        const auto sel_o = o.slice(2, first - t0, t1 - t0);
        const auto sel_e = o_exact.slice(2, first - t0, t1 - t0);
        err += (sel_o - sel_e).pow(2).sum().item<double>();
        ref += sel_e.pow(2).sum().item<double>();
      }
    }
  }
  if (err_sq != nullptr) *err_sq += err;
  if (ref_sq != nullptr) *ref_sq += ref;
  (void)batch;
  return torch::cat(outputs, 2).permute({0, 2, 1, 3}).contiguous();  // [B, T, Hq, d]
}

MixedPrecisionAttention::MixedPrecisionAttention(const QuantMethod& method, WindowParams windows,
                                                 std::int64_t num_layers)
    : method_(method),
      windows_(windows),
      err_sq_(static_cast<std::size_t>(num_layers), 0.0),
      ref_sq_(static_cast<std::size_t>(num_layers), 0.0) {
  OSCAR_CHECK(windows.sink >= 0 && windows.recent >= 1,
              "windows need sink >= 0 and recent >= 1 (the current token is always bf16)");
}

torch::Tensor MixedPrecisionAttention::attend(std::int64_t layer, const torch::Tensor& q,
                                              const torch::Tensor& k, const torch::Tensor& v,
                                              double scale) {
  const auto k16 = bf16_round(k.to(torch::kFloat32)), v16 = bf16_round(v.to(torch::kFloat32));
  auto& e = err_sq_.at(static_cast<std::size_t>(layer));
  auto& r = ref_sq_.at(static_cast<std::size_t>(layer));
  if (method_.kind == MethodKind::kBF16) {
    // Everything in bf16: the windows cover the whole sequence.
    const WindowParams all{0, q.size(1) + 1};
    return mixed_precision_attention(q, k16, v16, k16, v16, scale, all, &e, &r).to(q.dtype());
  }
  // The cache quantizes what it would hold: the bf16 K and V.
  const auto [kq, vq] = reconstruct_kv(method_, layer, k16, v16);
  return mixed_precision_attention(q, k16, v16, kq, vq, scale, windows_, &e, &r).to(q.dtype());
}

std::vector<double> MixedPrecisionAttention::layer_relative_errors() const {
  std::vector<double> out;
  for (std::size_t i = 0; i < err_sq_.size(); ++i) {
    out.push_back(ref_sq_[i] > 0.0 ? std::sqrt(err_sq_[i] / ref_sq_[i]) : 0.0);
  }
  return out;
}

}  // namespace oscar
