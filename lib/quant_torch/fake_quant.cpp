// Vectorized INT2 fake quantization, bit-exact on the CPU with the oscar::int2 reference.
#include "oscar/fake_quant.h"

#include <tuple>
#include <vector>

#include "oscar/error.h"

namespace oscar {
namespace {

// The clip position of every group: one for all (index) or one per group (per_group [N, 1] int64).
struct ClipIndex {
  std::int64_t index = 0;
  torch::Tensor per_group;
};

torch::Tensor round_scale(const torch::Tensor& v, int2::ScaleDType dtype) {
  switch (dtype) {
    case int2::ScaleDType::kBF16:
      return v.to(torch::kBFloat16).to(torch::kFloat32);
    case int2::ScaleDType::kF16:
      return v.to(torch::kHalf).to(torch::kFloat32);
    case int2::ScaleDType::kF32:
      return v;
  }
  fail("invalid INT2 scale dtype {}", static_cast<int>(dtype));
}

// Quantizes and dequantizes every row of `groups` [N, n] (float32, contiguous) as one group, with
// the operations of int2::quantize_group in the same order. Divisions always take full-size
// tensor operands: a scalar divisor may be turned into a multiplication by its reciprocal (CUDA
// does this), which is not bit-identical.
torch::Tensor fake_quantize_groups(const torch::Tensor& groups, const ClipIndex& clip,
                                   int2::ScaleDType dtype) {
  const std::int64_t n = groups.size(1);
  torch::Tensor x = groups;
  torch::Tensor threshold;
  if (clip.per_group.defined()) {
    const torch::Tensor sorted = std::get<0>(groups.abs().sort(1));
    threshold = sorted.gather(1, clip.per_group);
  } else if (clip.index < n - 1) {
    threshold = std::get<0>(torch::kthvalue(groups.abs(), clip.index + 1, 1, /*keepdim=*/true));
  }
  // At position n - 1 the threshold is max |x| and clamping to it is the identity: skipped.
  if (threshold.defined()) x = torch::minimum(torch::maximum(x, threshold.neg()), threshold);

  const torch::Tensor lo = x.amin(1, /*keepdim=*/true);
  const torch::Tensor hi = x.amax(1, /*keepdim=*/true);
  const torch::Tensor range = hi - lo;
  const torch::Tensor one = torch::ones_like(range);
  torch::Tensor scale = round_scale(torch::div(range, torch::full_like(range, 3.0)), dtype);
  // Degenerate groups (constant, or a range the scale dtype cannot hold): scale 1, see int2.h.
  scale = torch::where((scale <= 0) | torch::isinf(scale), one, scale);
  const torch::Tensor neg_lo = lo.neg();
  torch::Tensor zero = round_scale(torch::div(neg_lo, scale), dtype);
  const torch::Tensor overflow = torch::isinf(zero);
  scale = torch::where(overflow, one, scale);
  zero = torch::where(overflow, round_scale(neg_lo, dtype), zero);

  const torch::Tensor s = scale.expand_as(x).contiguous();
  const torch::Tensor z = zero.expand_as(x).contiguous();
  const torch::Tensor codes = torch::floor(torch::div(x, s) + z + 0.5).clamp(0, 3);
  return (codes - z) * s;
}

torch::Tensor as_float(const torch::Tensor& x) {
  OSCAR_CHECK(x.defined(), "INT2 fake quantization: undefined tensor");
  OSCAR_CHECK(x.is_floating_point(), "INT2 fake quantization needs a floating tensor, got {}",
              std::string(c10::toString(x.scalar_type())));
  return x.to(torch::kFloat32).contiguous();
}

torch::Tensor rows_impl(const torch::Tensor& x, const int2::QuantParams& params,
                        const torch::Tensor* clip_ratio) {
  OSCAR_CHECK(x.defined() && x.dim() >= 1, "INT2 fake quantization needs a tensor [..., d]");
  const std::int64_t d = x.size(-1);
  int2::QuantParams checked = params;
  if (clip_ratio != nullptr) checked.clip_ratio = 1.0;  // the tensor's ratios are checked below
  int2::check_row_params(d, checked);
  const torch::Tensor xf = as_float(x);
  if (xf.numel() == 0) return xf.clone();

  const std::int64_t g = params.group_size;
  const std::int64_t rows = xf.numel() / d;
  const std::int64_t per_row = d / g;
  ClipIndex clip;
  if (clip_ratio == nullptr) {
    clip.index = int2::clip_index(g, params.clip_ratio);
  } else {
    OSCAR_CHECK(clip_ratio->defined(), "INT2 clip ratio tensor is undefined");
    const std::vector<std::int64_t> lead(x.sizes().begin(), x.sizes().end() - 1);
    torch::Tensor r;
    try {
      r = clip_ratio->to(xf.device(), torch::kFloat64).expand(lead).reshape({rows, 1});
    } catch (const c10::Error&) {
      fail("INT2 clip ratio of shape {} does not broadcast to the rows' shape {}",
           std::string(c10::str(clip_ratio->sizes())),
           std::string(c10::str(x.sizes().slice(0, x.dim() - 1))));
    }
    OSCAR_CHECK(torch::all(r > 0).item<bool>(),
                "INT2 clip ratios must all be > 0 (1 = no clipping)");
    // min(floor(ratio * n), n - 1) in float64, as int2::clip_index.
    const torch::Tensor index =
        torch::floor(r * static_cast<double>(g)).clamp_max(static_cast<double>(g - 1));
    if (torch::all(index == static_cast<double>(g - 1)).item<bool>()) {
      clip.index = g - 1;
    } else {
      clip.per_group = index.to(torch::kInt64).expand({rows, per_row}).reshape({rows * per_row, 1});
    }
  }
  return fake_quantize_groups(xf.view({rows * per_row, g}), clip, params.scale_dtype)
      .view(x.sizes());
}

// Fake-quantizes tokens [nb * len, H, d] in blocks of `len` tokens per channel.
torch::Tensor channel_blocks(const torch::Tensor& part, std::int64_t len,
                             const int2::QuantParams& params) {
  const std::int64_t nb = part.size(0) / len;
  const std::int64_t h = part.size(1);
  const std::int64_t d = part.size(2);
  const torch::Tensor groups =
      part.reshape({nb, len, h, d}).permute({0, 2, 3, 1}).contiguous().view({nb * h * d, len});
  ClipIndex clip;
  clip.index = int2::clip_index(len, params.clip_ratio);
  return fake_quantize_groups(groups, clip, params.scale_dtype)
      .view({nb, h, d, len})
      .permute({0, 3, 1, 2})
      .reshape({nb * len, h, d});
}

}  // namespace

torch::Tensor fake_quantize_rows(const torch::Tensor& x, const int2::QuantParams& params) {
  return rows_impl(x, params, nullptr);
}

torch::Tensor fake_quantize_rows(const torch::Tensor& x, const int2::QuantParams& params,
                                 const torch::Tensor& clip_ratio) {
  return rows_impl(x, params, &clip_ratio);
}

torch::Tensor fake_quantize_channels(const torch::Tensor& x, std::int64_t token_block,
                                     const int2::QuantParams& params) {
  OSCAR_CHECK(x.defined() && x.dim() == 3,
              "INT2 channel quantization needs keys [T, H, d], got {} dimensions",
              x.defined() ? x.dim() : 0);
  OSCAR_CHECK(token_block > 0, "INT2 channel quantization: token block must be > 0, got {}",
              token_block);
  OSCAR_CHECK(params.clip_ratio > 0, "INT2 clip ratio must be > 0 (1 = no clipping), got {}",
              params.clip_ratio);
  (void)int2::scale_dtype_bits(params.scale_dtype);
  const torch::Tensor xf = as_float(x);
  if (xf.numel() == 0) return xf.clone();

  const std::int64_t t = xf.size(0);
  const std::int64_t full = t / token_block * token_block;
  std::vector<torch::Tensor> parts;
  if (full > 0) parts.push_back(channel_blocks(xf.narrow(0, 0, full), token_block, params));
  if (full < t) parts.push_back(channel_blocks(xf.narrow(0, full, t - full), t - full, params));
  return parts.size() == 1 ? parts.front() : torch::cat(parts, 0);
}

}  // namespace oscar
