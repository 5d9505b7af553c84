// Hugging Face checkpoint loading and the reference decoder forward pass.
#include "oscar/model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "oscar/error.h"
#include "oscar/safetensors.h"

namespace oscar {

namespace {

torch::ScalarType to_torch_dtype(DType dtype, const std::string& tensor, const std::string& file) {
  switch (dtype) {
    case DType::F32:
      return torch::kFloat32;
    case DType::F16:
      return torch::kFloat16;
    case DType::BF16:
      return torch::kBFloat16;
    default:
      fail("{}: tensor '{}' has dtype {}; model weights must be F32, F16 or BF16", file, tensor,
           dtype_name(dtype));
  }
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Reads named tensors out of a checkpoint into owned tensors of the requested dtype and device,
// checking each shape against what the config implies.
class WeightReader {
 public:
  WeightReader(const Checkpoint& checkpoint, torch::ScalarType dtype, torch::Device device)
      : checkpoint_(checkpoint), dtype_(dtype), device_(device) {}

  torch::Tensor get(const std::string& name, const std::vector<std::int64_t>& expected) {
    OSCAR_CHECK(checkpoint_.contains(name), "checkpoint '{}' has no tensor '{}'",
                checkpoint_.directory(), name);
    const TensorInfo& info = checkpoint_.info(name);
    const std::string& file = checkpoint_.file_of(name).path();
    OSCAR_CHECK(info.shape == expected,
                "{}: tensor '{}' has shape {} but config.json implies {} (model and config do not "
                "match)",
                file, name, shape_string(info.shape), shape_string(expected));
    bytes_ += info.nbytes();
    return read_checkpoint_tensor(checkpoint_, name).to(device_, dtype_);
  }

  std::optional<torch::Tensor> get_optional(const std::string& name,
                                            const std::vector<std::int64_t>& expected) {
    if (!checkpoint_.contains(name)) return std::nullopt;
    return get(name, expected);
  }

  std::uint64_t bytes() const { return bytes_; }

 private:
  const Checkpoint& checkpoint_;
  torch::ScalarType dtype_;
  torch::Device device_;
  std::uint64_t bytes_ = 0;
};

// RMSNorm exactly as transformers: normalize in fp32, cast back, then scale by the weight.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto xf = x.to(torch::kFloat32);
  auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

// x [B, T, H, d]; cos/sin [T, d] (already in x's dtype). rotate_half layout: (x1, x2) -> (-x2, x1).
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin) {
  const auto half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  auto c = cos.unsqueeze(1);  // [T, 1, d] broadcasts over batch and heads
  auto s = sin.unsqueeze(1);
  return x * c + rotated * s;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return b.defined() ? torch::linear(x, w, b) : torch::linear(x, w);
}

}  // namespace

torch::Tensor read_checkpoint_tensor(const Checkpoint& checkpoint, const std::string& name) {
  const TensorInfo& info = checkpoint.info(name);
  auto dtype = to_torch_dtype(info.dtype, name, checkpoint.file_of(name).path());
  // Copied out of the read-only mapping: the tensor must own its memory, and mmap offsets need not
  // be aligned for the element type.
  auto host = torch::empty(info.shape, torch::TensorOptions().dtype(dtype));
  std::memcpy(host.data_ptr(), checkpoint.data(name), info.nbytes());
  return host;
}

double NllSum::perplexity() const {
  return count > 0 ? std::exp(nll / static_cast<double>(count)) : std::nan("");
}

torch::ScalarType parse_dtype_name(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "fp32") return torch::kFloat32;
  if (name == "bf16" || name == "bfloat16") return torch::kBFloat16;
  if (name == "f16" || name == "float16" || name == "fp16") return torch::kFloat16;
  fail("unknown dtype '{}' (expected f32, bf16 or f16)", name);
}

std::string dtype_short_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return "f32";
    case torch::kBFloat16:
      return "bf16";
    case torch::kFloat16:
      return "f16";
    default:
      return c10::toString(dtype);
  }
}

torch::Device parse_device_name(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name.rfind("cuda", 0) == 0) {
    OSCAR_CHECK(torch::cuda::is_available(),
                "device '{}' requested but CUDA is not available (no GPU, or LibTorch built "
                "without CUDA); use --device cpu",
                name);
    torch::Device device(name);
    OSCAR_CHECK(
        !device.has_index() || device.index() < static_cast<int>(torch::cuda::device_count()),
        "device '{}' does not exist ({} CUDA devices)", name, torch::cuda::device_count());
    return device;
  }
  fail("unknown device '{}' (expected cpu, cuda or cuda:N)", name);
}

Model Model::load(const std::string& model_dir, const LoadOptions& options) {
  Model m;
  m.dir_ = model_dir;
  m.config_ = load_model_config(model_dir);
  const ModelConfig& c = m.config_;
  Checkpoint checkpoint = Checkpoint::open(model_dir);

  OSCAR_CHECK(checkpoint.contains("model.embed_tokens.weight"),
              "checkpoint '{}' has no 'model.embed_tokens.weight' (not a Llama-style model?)",
              model_dir);
  const TensorInfo& embed_info = checkpoint.info("model.embed_tokens.weight");
  m.stored_dtype_ =
      to_torch_dtype(embed_info.dtype, embed_info.name, checkpoint.file_of(embed_info.name).path());
  m.device_ = options.device;
  if (options.keep_stored_dtype) {
    m.dtype_ = m.stored_dtype_;
  } else if (options.dtype) {
    m.dtype_ = *options.dtype;
  } else {
    m.dtype_ = m.device_.is_cpu() ? torch::kFloat32 : m.stored_dtype_;
  }
  WeightReader reader(checkpoint, m.dtype_, m.device_);

  const auto H = c.hidden_size, d = c.head_dim, Hq = c.num_heads, Hkv = c.num_kv_heads;
  const auto I = c.intermediate_size;
  m.embed_ = reader.get("model.embed_tokens.weight", {c.vocab_size, H});
  m.final_norm_ = reader.get("model.norm.weight", {H});
  if (c.tie_word_embeddings) {
    m.lm_head_ = m.embed_;
  } else {
    OSCAR_CHECK(checkpoint.contains("lm_head.weight"),
                "checkpoint '{}' has no 'lm_head.weight' and config.json does not tie it to the "
                "embeddings (tie_word_embeddings is false)",
                model_dir);
    m.lm_head_ = reader.get("lm_head.weight", {c.vocab_size, H});
  }
  m.layers_.resize(static_cast<std::size_t>(c.num_layers));
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    Layer& L = m.layers_[static_cast<std::size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    L.input_norm = reader.get(p + "input_layernorm.weight", {H});
    L.post_norm = reader.get(p + "post_attention_layernorm.weight", {H});
    auto q = reader.get(p + "self_attn.q_proj.weight", {Hq * d, H});
    auto k = reader.get(p + "self_attn.k_proj.weight", {Hkv * d, H});
    auto v = reader.get(p + "self_attn.v_proj.weight", {Hkv * d, H});
    L.qkv_weight = torch::cat({q, k, v}, 0);
    if (c.attention_bias) {
      L.qkv_bias = torch::cat({reader.get(p + "self_attn.q_proj.bias", {Hq * d}),
                               reader.get(p + "self_attn.k_proj.bias", {Hkv * d}),
                               reader.get(p + "self_attn.v_proj.bias", {Hkv * d})});
    }
    L.o_weight = reader.get(p + "self_attn.o_proj.weight", {H, Hq * d});
    if (c.attention_output_bias) L.o_bias = reader.get(p + "self_attn.o_proj.bias", {H});
    if (c.qk_norm) {
      L.q_norm = reader.get(p + "self_attn.q_norm.weight", {d});
      L.k_norm = reader.get(p + "self_attn.k_norm.weight", {d});
    }
    L.gate_up_weight = torch::cat({reader.get(p + "mlp.gate_proj.weight", {I, H}),
                                   reader.get(p + "mlp.up_proj.weight", {I, H})});
    L.down_weight = reader.get(p + "mlp.down_proj.weight", {H, I});
    if (c.mlp_bias) {
      L.gate_up_bias = torch::cat(
          {reader.get(p + "mlp.gate_proj.bias", {I}), reader.get(p + "mlp.up_proj.bias", {I})});
      L.down_bias = reader.get(p + "mlp.down_proj.bias", {H});
    }
  }
  auto [inv_freq, scale] = rope_inverse_frequencies(c);
  m.inv_freq_ = inv_freq.to(m.device_);
  m.rope_attention_scale_ = scale;
  if (options.verbose) {
    fmt::print(stderr, "loaded {}: {}, {:.1f} M parameters, {} -> {} on {}\n", model_dir,
               describe(c), static_cast<double>(m.parameter_count()) / 1e6,
               dtype_short_name(m.stored_dtype_), dtype_short_name(m.dtype_), m.device_.str());
  }
  return m;
}

std::int64_t Model::parameter_count() const {
  std::int64_t n = embed_.numel() + final_norm_.numel();
  if (!config_.tie_word_embeddings) n += lm_head_.numel();
  for (const Layer& L : layers_) {
    for (const torch::Tensor* t :
         {&L.input_norm, &L.post_norm, &L.qkv_weight, &L.qkv_bias, &L.o_weight, &L.o_bias,
          &L.q_norm, &L.k_norm, &L.gate_up_weight, &L.gate_up_bias, &L.down_weight, &L.down_bias}) {
      if (t->defined()) n += t->numel();
    }
  }
  return n;
}

std::pair<torch::Tensor, torch::Tensor> Model::rope_tables(std::int64_t start,
                                                           std::int64_t length) const {
  // Angles in fp32 as transformers computes them (position x inv_freq, one rounding), then cos/sin
  // scaled and cast to the compute dtype.
  auto positions = torch::arange(start, start + length,
                                 torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  auto freqs = torch::outer(positions, inv_freq_);
  auto angles = torch::cat({freqs, freqs}, -1);
  auto cos = angles.cos();
  auto sin = angles.sin();
  if (rope_attention_scale_ != 1.0) {
    cos = cos * rope_attention_scale_;
    sin = sin * rope_attention_scale_;
  }
  return {cos.to(dtype_), sin.to(dtype_)};
}

torch::Tensor Model::hidden_states(const torch::Tensor& tokens,
                                   const ForwardOptions& options) const {
  OSCAR_CHECK(tokens.dim() == 2, "forward: tokens must be [batch, time], got {} dims",
              tokens.dim());
  OSCAR_CHECK(!tokens.is_floating_point(), "forward: tokens must be integer ids");
  const ModelConfig& c = config_;
  const auto B = tokens.size(0), T = tokens.size(1);
  OSCAR_CHECK(T > 0, "forward: empty sequence");
  auto ids = tokens.to(device_, torch::kInt64);
  {
    auto lo = ids.min().item<std::int64_t>(), hi = ids.max().item<std::int64_t>();
    OSCAR_CHECK(lo >= 0 && hi < c.vocab_size,
                "forward: token id out of range [{}, {}] for vocabulary of {}", lo, hi,
                c.vocab_size);
  }
  const auto Hq = c.num_heads, Hkv = c.num_kv_heads, d = c.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto [cos, sin] = rope_tables(options.start_position, T);

  torch::NoGradGuard no_grad;
  auto x = torch::embedding(embed_, ids);  // [B, T, H]
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    const auto layer = static_cast<std::int64_t>(li);
    auto h = rms_norm(x, L.input_norm, c.rms_norm_eps);
    auto qkv = linear(h, L.qkv_weight, L.qkv_bias);
    auto q = qkv.narrow(-1, 0, Hq * d).view({B, T, Hq, d});
    auto k = qkv.narrow(-1, Hq * d, Hkv * d).view({B, T, Hkv, d});
    auto v = qkv.narrow(-1, (Hq + Hkv) * d, Hkv * d).view({B, T, Hkv, d});
    if (c.qk_norm) {
      q = rms_norm(q, L.q_norm, c.rms_norm_eps);
      k = rms_norm(k, L.k_norm, c.rms_norm_eps);
    }
    q = apply_rope(q, cos, sin);
    k = apply_rope(k, cos, sin);
    v = v.contiguous();
    torch::Tensor out = options.attention != nullptr
                            ? options.attention->attend(layer, q, k, v, scale)
                            : causal_attention(q, k, v, scale);
    OSCAR_CHECK(out.sizes() == q.sizes(),
                "attention backend returned shape {} for layer {}, expected {}",
                shape_string(out.sizes().vec()), layer, shape_string(q.sizes().vec()));
    if (options.observer != nullptr) {
      options.observer->on_attention(AttentionRecord{layer, options.start_position, q, k, v, out});
    }
    x = x + linear(out.reshape({B, T, Hq * d}), L.o_weight, L.o_bias);
    h = rms_norm(x, L.post_norm, c.rms_norm_eps);
    auto gate_up = linear(h, L.gate_up_weight, L.gate_up_bias);
    auto act = torch::silu(gate_up.narrow(-1, 0, c.intermediate_size)) *
               gate_up.narrow(-1, c.intermediate_size, c.intermediate_size);
    x = x + linear(act, L.down_weight, L.down_bias);
    if (options.check_finite && (li + 1 == layers_.size())) {
      // One check at the end is enough to catch NaN/Inf anywhere (they propagate); find the layer
      // only when it fails.
      if (!torch::isfinite(x).all().item<bool>()) {
        fail(
            "non-finite activations (NaN or Inf) after the last layer of '{}' in {}; the "
            "checkpoint may be corrupt, or try --dtype f32",
            dir_, dtype_short_name(dtype_));
      }
    }
  }
  return rms_norm(x, final_norm_, c.rms_norm_eps);
}

torch::Tensor Model::forward(const torch::Tensor& tokens, const ForwardOptions& options) const {
  torch::NoGradGuard no_grad;
  auto h = hidden_states(tokens, options);
  return torch::matmul(h, lm_head_.t()).to(torch::kFloat32);
}

NllSum Model::score(const torch::Tensor& tokens, const ForwardOptions& options) const {
  torch::NoGradGuard no_grad;
  NllSum result;
  if (tokens.size(1) < 2) return result;
  auto h = hidden_states(tokens, options);
  auto targets = tokens.to(device_, torch::kInt64);
  const auto T = tokens.size(1);
  // Logits for 512 positions at a time keep memory at B x 512 x V floats.
  constexpr std::int64_t kChunk = 512;
  for (std::int64_t t0 = 0; t0 < T - 1; t0 += kChunk) {
    const auto n = std::min(kChunk, T - 1 - t0);
    auto logits = torch::matmul(h.narrow(1, t0, n), lm_head_.t()).to(torch::kFloat32);
    auto logp = torch::log_softmax(logits, -1);
    auto tgt = targets.narrow(1, t0 + 1, n).unsqueeze(-1);
    auto nll = -logp.gather(-1, tgt);
    result.nll += nll.to(torch::kFloat64).sum().item<double>();
    result.count += nll.numel();
  }
  return result;
}

}  // namespace oscar
