// Reference causal GQA attention: blocked over queries on CPU, fused SDPA on GPU where available.
#include <torch/version.h>

#include <algorithm>

#include "oscar/error.h"
#include "oscar/model.h"

namespace oscar {

namespace {

// Query rows per block on the explicit path: big enough for efficient GEMMs, small enough that a
// block's fp32 scores (g x block x T) stay in cache-friendly sizes at long context.
constexpr std::int64_t kQueryBlock = 256;

torch::Tensor blocked_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, double scale) {
  const auto B = q.size(0), T = q.size(1), Hq = q.size(2), d = q.size(3);
  const auto Hkv = k.size(2), Tk = k.size(1);
  const auto g = Hq / Hkv;
  const auto offset = Tk - T;  // queries are the last T positions of the keys
  // [B, Hkv, g, T, d]: query head h = kv * g + j reads KV head kv (transformers' repeat_kv order).
  auto qg = q.view({B, T, Hkv, g, d}).permute({0, 2, 3, 1, 4});
  auto kt = k.permute({0, 2, 3, 1}).to(torch::kFloat32);  // [B, Hkv, d, Tk]
  auto vt = v.permute({0, 2, 1, 3}).to(torch::kFloat32);  // [B, Hkv, Tk, d]
  auto out = torch::empty({B, Hkv, g, T, d}, q.options().dtype(torch::kFloat32));
  for (std::int64_t t0 = 0; t0 < T; t0 += kQueryBlock) {
    const std::int64_t tb = std::min(kQueryBlock, T - t0);
    const std::int64_t keys = offset + t0 + tb;  // keys visible to the last query of the block
    auto qb = qg.narrow(3, t0, tb).to(torch::kFloat32).reshape({B, Hkv, g * tb, d});
    auto scores = torch::matmul(qb, kt.narrow(3, 0, keys)).mul_(scale).view({B, Hkv, g, tb, keys});
    // Causal mask within the block: query t0+i sees keys j <= offset + t0 + i.
    auto qi = torch::arange(tb, q.options().dtype(torch::kInt64)).unsqueeze(1) + (offset + t0);
    auto kj = torch::arange(keys, q.options().dtype(torch::kInt64)).unsqueeze(0);
    scores.masked_fill_(kj > qi, -std::numeric_limits<float>::infinity());
    auto probs = torch::softmax(scores, -1).view({B, Hkv, g * tb, keys});
    out.narrow(3, t0, tb).copy_(
        torch::matmul(probs, vt.narrow(2, 0, keys)).view({B, Hkv, g, tb, d}));
  }
  // [B, Hkv, g, T, d] -> [B, T, Hq, d]
  return out.permute({0, 3, 1, 2, 4}).reshape({B, T, Hq, d}).to(q.scalar_type());
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale) {
  OSCAR_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "causal_attention: expected [B, T, H, d] tensors");
  OSCAR_CHECK(k.sizes() == v.sizes(), "causal_attention: k and v shapes differ");
  OSCAR_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3) && q.size(1) <= k.size(1),
              "causal_attention: q and k shapes are incompatible");
  OSCAR_CHECK(q.size(2) % k.size(2) == 0,
              "causal_attention: {} query heads are not a multiple of {} KV heads", q.size(2),
              k.size(2));
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  if (q.is_cuda() && q.size(1) == k.size(1)) {
    // Fused flash/memory-efficient kernel; KV heads are expanded to the query heads it expects.
    const auto g = q.size(2) / k.size(2);
    auto expand = [g](const torch::Tensor& x) {
      auto xt = x.transpose(1, 2);  // [B, Hkv, T, d]
      if (g == 1) return xt;
      return xt.unsqueeze(2)
          .expand({xt.size(0), xt.size(1), g, xt.size(2), xt.size(3)})
          .reshape({xt.size(0), xt.size(1) * g, xt.size(2), xt.size(3)});
    };
    auto out = at::scaled_dot_product_attention(q.transpose(1, 2), expand(k), expand(v), {}, 0.0,
                                                /*is_causal=*/true, scale);
    return out.transpose(1, 2);
  }
#endif
  return blocked_causal_attention(q, k, v, scale);
}

}  // namespace oscar
