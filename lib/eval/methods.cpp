// KV quantization methods for evaluation: construction and K/V reconstruction through INT2.
#include <cmath>

#include "oscar/error.h"
#include "oscar/evaluation.h"
#include "oscar/fake_quant.h"
#include "oscar/rotation.h"

namespace oscar {
namespace {

int scale_bits(int2::ScaleDType dtype) { return dtype == int2::ScaleDType::kF32 ? 32 : 16; }

torch::Tensor bf16_round(const torch::Tensor& x) {
  return x.to(torch::kBFloat16).to(torch::kFloat32);
}

// x [B, T, H, d] -> x R per head (R [H, d, d]).
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& r) {
  return torch::einsum("bthd,hde->bthe", {x, r});
}
torch::Tensor rotate_back(const torch::Tensor& x, const torch::Tensor& r) {
  return torch::einsum("bthe,hde->bthd", {x, r});
}

// Per-token INT2 of x [B, T, H, d] with per-head clip ratios [H].
torch::Tensor quantize_rows(const torch::Tensor& x, const torch::Tensor& clips, std::int64_t group,
                            int2::ScaleDType dtype) {
  int2::QuantParams p;
  p.group_size = group;
  p.scale_dtype = dtype;
  return fake_quantize_rows(
      x, p, clips.to(x.device()).view({1, 1, -1}).expand({x.size(0), x.size(1), x.size(2)}));
}

}  // namespace

double QuantMethod::bits_per_element(std::int64_t head_dim, std::int64_t context, std::int64_t sink,
                                     std::int64_t recent) const {
  if (kind == MethodKind::kBF16) return 16.0;
  const std::int64_t g = group_size > 0 ? group_size : head_dim;
  const double per_token_bits = 2.0 + 2.0 * scale_bits(scale_dtype) / static_cast<double>(g);
  double key_bits = per_token_bits, value_bits = per_token_bits;
  if (kind == MethodKind::kKivi) {
    key_bits = 2.0 + 2.0 * scale_bits(scale_dtype) / static_cast<double>(kivi_block);
  }
  if (kind == MethodKind::kRotation && !k_mean.empty() && k_mean.front().defined()) {
    // One float32 mean vector per head, amortised over the context (negligible at long context).
    key_bits += 32.0 / static_cast<double>(std::max<std::int64_t>(context, 1));
  }
  if (kind == MethodKind::kRotation && !k_smooth.empty() && k_smooth.front().defined()) {
    key_bits += 32.0 / static_cast<double>(std::max<std::int64_t>(context, 1));
  }
  if (!quantize_keys) key_bits = 16.0;
  if (!quantize_values) value_bits = 16.0;
  const std::int64_t full = std::min(context, sink + recent);
  const std::int64_t quant = context - full;
  const double stored =
      static_cast<double>(full) * 16.0 * 2.0 + static_cast<double>(quant) * (key_bits + value_bits);
  return stored / (2.0 * static_cast<double>(context));
}

QuantMethod make_baseline_method(const std::string& name, const ModelConfig& config,
                                 std::int64_t group_size, int2::ScaleDType scale_dtype,
                                 torch::Device device) {
  QuantMethod m;
  m.name = name;
  m.group_size = group_size;
  m.scale_dtype = scale_dtype;
  if (name == "bf16") {
    m.kind = MethodKind::kBF16;
    m.description = "K and V in bf16 (reference)";
  } else if (name == "naive") {
    m.kind = MethodKind::kNaive;
    m.description = "per-token INT2 min/max, no rotation, no clip";
  } else if (name == "hadamard") {
    m.kind = MethodKind::kHadamard;
    m.description = "Walsh-Hadamard rotation of K and V, per-token INT2, no clip";
    const auto h = hadamard_matrix(config.head_dim)
                       .to(torch::kFloat32)
                       .to(device)
                       .expand({config.num_kv_heads, config.head_dim, config.head_dim})
                       .contiguous();
    for (std::int64_t i = 0; i < config.num_layers; ++i) {
      m.k_rotation.push_back(h);
      m.v_rotation.push_back(h);
    }
  } else if (name == "kivi") {
    m.kind = MethodKind::kKivi;
    m.description = "KIVI: keys per channel over token blocks, values per token, no rotation";
  } else {
    fail("unknown method '{}' (baselines: bf16, naive, hadamard, kivi; rotation methods: oscar...)",
         name);
  }
  return m;
}

QuantMethod method_from_bundle(const std::string& name, const Bundle& bundle,
                               std::int64_t group_size, int2::ScaleDType scale_dtype,
                               torch::Device device) {
  QuantMethod m;
  m.name = name;
  m.kind = MethodKind::kRotation;
  m.group_size = group_size;
  m.scale_dtype = scale_dtype;
  const std::int64_t h = bundle.n_kv_heads(), d = bundle.d();
  auto tensor = [&](const std::vector<float>& v, std::vector<std::int64_t> shape) {
    return torch::from_blob(const_cast<float*>(v.data()), shape, torch::kFloat32)
        .clone()
        .to(device);
  };
  for (const LayerRotations& l : bundle.layers) {
    m.k_rotation.push_back(tensor(l.k_rotation, {h, d, d}));
    m.v_rotation.push_back(tensor(l.v_rotation, {h, d, d}));
    m.k_clips.push_back(tensor(l.k_clip, {h}));
    m.v_clips.push_back(tensor(l.v_clip, {h}));
    m.k_mean.push_back(l.k_mean.empty() ? torch::Tensor() : tensor(l.k_mean, {h, d}));
    m.v_mean.push_back(l.v_mean.empty() ? torch::Tensor() : tensor(l.v_mean, {h, d}));
    m.k_smooth.push_back(l.k_smooth.empty() ? torch::Tensor() : tensor(l.k_smooth, {h, d}));
  }
  const auto& c = bundle.calibration;
  m.description =
      fmt::format("bundle: grouping {}, values {}, {}{}{}{}, clip {}", c.grouping,
                  c.value_objective, c.composition, c.center_keys ? ", centred keys" : "",
                  c.center_values ? ", centred values" : "",
                  c.smooth_keys > 0.0 ? fmt::format(", keys smoothed ({:.2f})", c.smooth_keys) : "",
                  c.clip_method);
  return m;
}

QuantMethod method_from_rotations(const std::string& name, const RotationResult& rotations,
                                  const RotationOptions& options, std::int64_t group_size,
                                  int2::ScaleDType scale_dtype, torch::Device device) {
  QuantMethod m;
  m.name = name;
  m.kind = MethodKind::kRotation;
  m.group_size = group_size;
  m.scale_dtype = scale_dtype;
  const std::int64_t heads = rotations.k_rotation.front().size(0);
  for (std::size_t i = 0; i < rotations.k_rotation.size(); ++i) {
    m.k_rotation.push_back(rotations.k_rotation[i].to(device, torch::kFloat32));
    m.v_rotation.push_back(rotations.v_rotation[i].to(device, torch::kFloat32));
    auto kc = torch::full({heads}, options.clip_k, torch::kFloat32);
    auto vc = torch::full({heads}, options.clip_v, torch::kFloat32);
    for (const HeadSummary& s : rotations.heads) {
      if (s.layer == static_cast<std::int64_t>(i)) {
        kc[s.head] = s.k_clip;
        vc[s.head] = s.v_clip;
      }
    }
    m.k_clips.push_back(kc.to(device));
    m.v_clips.push_back(vc.to(device));
    m.k_mean.push_back(options.center_keys ? rotations.k_mean[i].to(device, torch::kFloat32)
                                           : torch::Tensor());
    m.v_mean.push_back(options.center_values ? rotations.v_mean[i].to(device, torch::kFloat32)
                                             : torch::Tensor());
    m.k_smooth.push_back(options.smooth_keys > 0.0
                             ? rotations.k_smooth.at(i).to(device, torch::kFloat32)
                             : torch::Tensor());
  }
  m.description = fmt::format(
      "grouping {}, values {}, {}{}, clip K {:.2f} V {:.2f}", grouping_name(options.grouping),
      value_objective_name(options.value_objective), composition_name(options.composition),
      std::string(options.center_keys ? ", centred keys" : "") +
          (options.center_values ? ", centred values" : "") +
          (options.smooth_keys > 0.0 ? fmt::format(", keys smoothed ({:.2f})", options.smooth_keys)
                                     : ""),
      options.clip_k, options.clip_v);
  return m;
}

namespace {
std::pair<torch::Tensor, torch::Tensor> reconstruct_both(const QuantMethod& m, std::int64_t layer,
                                                         const torch::Tensor& k_in,
                                                         const torch::Tensor& v_in);
}  // namespace

std::pair<torch::Tensor, torch::Tensor> reconstruct_kv(const QuantMethod& m, std::int64_t layer,
                                                       const torch::Tensor& k_in,
                                                       const torch::Tensor& v_in) {
  auto [k, v] = reconstruct_both(m, layer, k_in, v_in);
  if (!m.quantize_keys) k = bf16_round(k_in.to(torch::kFloat32));
  if (!m.quantize_values) v = bf16_round(v_in.to(torch::kFloat32));
  return {k, v};
}

namespace {
std::pair<torch::Tensor, torch::Tensor> reconstruct_both(const QuantMethod& m, std::int64_t layer,
                                                         const torch::Tensor& k_in,
                                                         const torch::Tensor& v_in) {
  const auto k = k_in.to(torch::kFloat32), v = v_in.to(torch::kFloat32);
  const std::int64_t heads = k.size(2), d = k.size(3);
  const std::int64_t group = m.group_size > 0 ? m.group_size : d;
  const auto uniform = [&](double ratio) {
    return torch::full({heads}, ratio, torch::TensorOptions().dtype(torch::kFloat32));
  };
  switch (m.kind) {
    case MethodKind::kBF16:
      return {bf16_round(k), bf16_round(v)};
    case MethodKind::kNaive:
      return {quantize_rows(k, uniform(m.k_clip), group, m.scale_dtype),
              quantize_rows(v, uniform(m.v_clip), group, m.scale_dtype)};
    case MethodKind::kKivi: {
      int2::QuantParams p;
      p.group_size = group;
      p.scale_dtype = m.scale_dtype;
      p.clip_ratio = m.k_clip;
      std::vector<torch::Tensor> keys;
      for (std::int64_t b = 0; b < k.size(0); ++b) {
        keys.push_back(fake_quantize_channels(k[b], m.kivi_block, p));
      }
      return {torch::stack(keys), quantize_rows(v, uniform(m.v_clip), group, m.scale_dtype)};
    }
    case MethodKind::kHadamard:
    case MethodKind::kRotation: {
      const auto& rk = m.k_rotation.at(static_cast<std::size_t>(layer));
      const auto& rv = m.v_rotation.at(static_cast<std::size_t>(layer));
      const auto kc = m.k_clips.empty() ? uniform(m.k_clip) : m.k_clips[layer];
      const auto vc = m.v_clips.empty() ? uniform(m.v_clip) : m.v_clips[layer];
      torch::Tensor mean;
      if (!m.k_mean.empty() && m.k_mean[layer].defined())
        mean = m.k_mean[layer].view({1, 1, heads, d});
      torch::Tensor smooth;
      if (!m.k_smooth.empty() && m.k_smooth[layer].defined())
        smooth = m.k_smooth[layer].view({1, 1, heads, d});
      auto k_centred = mean.defined() ? k - mean : k;
      if (smooth.defined()) k_centred = k_centred / smooth;
      auto k_hat = rotate_back(quantize_rows(rotate(k_centred, rk), kc, group, m.scale_dtype), rk);
      if (smooth.defined()) k_hat = k_hat * smooth;
      if (mean.defined()) k_hat = k_hat + mean;
      torch::Tensor v_mean;
      if (!m.v_mean.empty() && m.v_mean[layer].defined()) {
        v_mean = m.v_mean[layer].view({1, 1, heads, d});
      }
      const auto v_centred = v_mean.defined() ? v - v_mean : v;
      auto v_hat = rotate_back(quantize_rows(rotate(v_centred, rv), vc, group, m.scale_dtype), rv);
      if (v_mean.defined()) v_hat = v_hat + v_mean;
      return {k_hat, v_hat};
    }
  }
  fail("unknown method kind");
}

}  // namespace

}  // namespace oscar
