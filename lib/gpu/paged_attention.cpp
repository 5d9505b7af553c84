// PagedInt2Attention: the model's attention over the kernels' paged mixed-precision KV cache.
#include "oscar/paged_attention.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "oscar/error.h"
#include "oscar/kernels/cuda_check.h"

namespace oscar {
namespace {

using kernels::bf16_bits;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

template <typename T>
T* bits_of(const torch::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

void check_status(kernels::Status status, const char* what) {
  OSCAR_CHECK(status == kernels::Status::kOk, "paged INT2 attention: {} failed ({}): {}", what,
              kernels::status_name(status), kernels::last_error_message());
}

torch::Tensor int32_on(const std::vector<std::int32_t>& values, torch::Device device) {
  auto host = torch::empty({static_cast<std::int64_t>(values.size())}, torch::kInt32);
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * 4);
  return host.to(device);
}

}  // namespace

PagedSplit paged_split(std::int64_t length, const PagedCacheOptions& options) {
  PagedSplit split;
  split.sink = std::min(length, options.sink);
  const std::int64_t rest = length - split.sink;
  split.int2 =
      options.page_size * std::max<std::int64_t>(0, (rest - options.recent) / options.page_size);
  split.recent = rest - split.int2;
  return split;
}

PagedInt2Attention::PagedInt2Attention(const QuantMethod& method, const ModelConfig& config,
                                       std::int64_t batch, PagedCacheOptions options,
                                       torch::Device device)
    : method_(method),
      options_(options),
      batch_(batch),
      num_heads_(config.num_heads),
      num_kv_heads_(config.num_kv_heads),
      head_dim_(config.head_dim),
      device_(device) {
  OSCAR_CHECK(device.is_cuda(), "paged INT2 attention needs a CUDA device");
  OSCAR_CHECK(method.kind == MethodKind::kRotation || method.kind == MethodKind::kHadamard,
              "paged INT2 attention: method '{}' is not a rotation method", method.name);
  OSCAR_CHECK(method.group_size == 0 || method.group_size == head_dim_,
              "paged INT2 attention: the kernels quantize whole rows (group {}, head_dim {})",
              method.group_size, head_dim_);
  OSCAR_CHECK(method.scale_dtype == int2::ScaleDType::kBF16,
              "paged INT2 attention: the kernels store bf16 scales");
  OSCAR_CHECK(options.page_size == 8 || options.page_size == 16,
              "paged INT2 attention: page size {} (8 or 16)", options.page_size);
  OSCAR_CHECK(options.sink >= 0 && options.recent >= 1 && options.max_tokens >= 1 && batch >= 1,
              "paged INT2 attention: bad windows or capacity");
  OSCAR_CHECK(static_cast<std::int64_t>(method.k_rotation.size()) == config.num_layers,
              "paged INT2 attention: method has {} layers, model {}", method.k_rotation.size(),
              config.num_layers);
  const std::int64_t P = options.page_size, H = num_kv_heads_, d = head_dim_;
  const std::int64_t bf16_per_seq = ceil_div(options.sink, P) + ceil_div(options.recent + P, P) + 1;
  const std::int64_t int2_per_seq = ceil_div(options.max_tokens, P);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  const auto u8 = torch::TensorOptions().dtype(torch::kUInt8).device(device);
  layers_.resize(static_cast<std::size_t>(config.num_layers));
  for (std::int64_t l = 0; l < config.num_layers; ++l) {
    LayerCache& c = layers_[static_cast<std::size_t>(l)];
    const std::int64_t nb = bf16_per_seq * batch, ni = int2_per_seq * batch;
    c.k_bf16 = torch::empty({nb, H, P, d}, bf16);
    c.v_bf16 = torch::empty({nb, H, P, d}, bf16);
    c.k_codes = torch::empty({ni, H, P, d / 4}, u8);
    c.v_codes = torch::empty({ni, H, P, d / 4}, u8);
    c.k_scale_zero = torch::empty({ni, H, P, 2}, bf16);
    c.v_scale_zero = torch::empty({ni, H, P, 2}, bf16);
    const auto layer = static_cast<std::size_t>(l);
    c.k_rotation = method.k_rotation[layer].to(f32).contiguous();
    c.v_rotation = method.v_rotation[layer].to(f32).contiguous();
    const auto clip = [&](const std::vector<torch::Tensor>& per_layer, double uniform) {
      return per_layer.empty() ? torch::full({H}, uniform, f32)
                               : per_layer[layer].to(f32).reshape({H}).contiguous();
    };
    c.k_clip = clip(method.k_clips, method.k_clip);
    c.v_clip = clip(method.v_clips, method.v_clip);
    const auto optional = [&](const std::vector<torch::Tensor>& per_layer) {
      return per_layer.size() > layer && per_layer[layer].defined()
                 ? per_layer[layer].to(f32).reshape({H, d}).contiguous()
                 : torch::Tensor();
    };
    c.k_mean = optional(method.k_mean);
    c.v_mean = optional(method.v_mean);
    c.k_smooth = optional(method.k_smooth);
    // The store's R'^T terms and b, built once here instead of by every block of every decode
    // step's store (most of a few-token store's time).
    if (const std::size_t bytes =
            kernels::store_kv_prepared_bytes(static_cast<int>(H), static_cast<int>(d));
        bytes > 0) {
      c.store_prepared = torch::empty({static_cast<std::int64_t>(bytes)}, u8);
      kernels::StoreKvParams s;
      s.num_kv_heads = static_cast<int>(H);
      s.head_dim = static_cast<int>(d);
      s.k_rotation = c.k_rotation.data_ptr<float>();
      s.v_rotation = c.v_rotation.data_ptr<float>();
      s.k_mean = c.k_mean.defined() ? c.k_mean.data_ptr<float>() : nullptr;
      s.k_smooth = c.k_smooth.defined() ? c.k_smooth.data_ptr<float>() : nullptr;
      s.v_mean = c.v_mean.defined() ? c.v_mean.data_ptr<float>() : nullptr;
      const kernels::Status status = kernels::prepare_store_kv(s, c.store_prepared.data_ptr());
      if (status == kernels::Status::kUnsupported) {
        c.store_prepared = torch::Tensor();  // a device without the shared memory: float32 store
      } else {
        check_status(status, "prepare_store_kv");
      }
    }
    c.sink_pages.resize(static_cast<std::size_t>(batch));
    c.recent_pages.resize(static_cast<std::size_t>(batch));
    c.int2_pages.resize(static_cast<std::size_t>(batch));
    // Free lists hand out the highest ids first, so table order and pool order differ.
    for (std::int64_t i = 0; i < nb; ++i) c.free_bf16.push_back(static_cast<std::int32_t>(i));
    for (std::int64_t i = 0; i < ni; ++i) c.free_int2.push_back(static_cast<std::int32_t>(i));
  }
}

void PagedInt2Attention::store(LayerCache& c, const torch::Tensor& k, const torch::Tensor& v) {
  const std::int64_t P = options_.page_size, position = c.length;
  const PagedSplit before = paged_split(position, options_);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(batch_));
  for (std::int64_t b = 0; b < batch_; ++b) {
    const auto sb = static_cast<std::size_t>(b);
    const bool in_sink = position < options_.sink;
    auto& pages = in_sink ? c.sink_pages[sb] : c.recent_pages[sb];
    const std::int64_t offset = in_sink ? position % P : before.recent % P;
    if (offset == 0) {
      OSCAR_CHECK(!c.free_bf16.empty(), "paged INT2 attention: BF16 pool exhausted");
      pages.push_back(c.free_bf16.back());
      c.free_bf16.pop_back();
    }
    slots[sb] = pages.back() * P + offset;
  }
  const auto kb = k.reshape({batch_, num_kv_heads_, head_dim_}).to(torch::kBFloat16).contiguous();
  const auto vb = v.reshape({batch_, num_kv_heads_, head_dim_}).to(torch::kBFloat16).contiguous();
  const auto slot_tensor =
      torch::from_blob(slots.data(), {batch_}, torch::kInt64).to(device_).contiguous();
  kernels::StoreKvParams s;
  s.num_tokens = batch_;
  s.num_kv_heads = static_cast<int>(num_kv_heads_);
  s.head_dim = static_cast<int>(head_dim_);
  s.page_size = static_cast<int>(P);
  s.k = bits_of<const bf16_bits>(kb);
  s.v = bits_of<const bf16_bits>(vb);
  s.k_rotation = c.k_rotation.data_ptr<float>();
  s.v_rotation = c.v_rotation.data_ptr<float>();
  s.k_mean = c.k_mean.defined() ? c.k_mean.data_ptr<float>() : nullptr;
  s.k_smooth = c.k_smooth.defined() ? c.k_smooth.data_ptr<float>() : nullptr;
  s.v_mean = c.v_mean.defined() ? c.v_mean.data_ptr<float>() : nullptr;
  s.k_clip = c.k_clip.data_ptr<float>();
  s.v_clip = c.v_clip.data_ptr<float>();
  s.prepared = c.store_prepared.defined() ? c.store_prepared.data_ptr() : nullptr;
  s.bf16_slot = slot_tensor.data_ptr<std::int64_t>();
  s.k_bf16 = bits_of<bf16_bits>(c.k_bf16);
  s.v_bf16 = bits_of<bf16_bits>(c.v_bf16);
  check_status(kernels::store_kv(s), "store_kv");
  c.length = position + 1;

  // Demotion: the recent window reached W + page_size tokens, its oldest page goes to INT2.
  const PagedSplit after = paged_split(c.length, options_);
  if (after.int2 > before.int2) {
    std::vector<std::int32_t> pairs;
    for (std::int64_t b = 0; b < batch_; ++b) {
      const auto sb = static_cast<std::size_t>(b);
      OSCAR_CHECK(!c.free_int2.empty(), "paged INT2 attention: INT2 pool exhausted (max_tokens)");
      const std::int32_t src = c.recent_pages[sb].front(), dst = c.free_int2.back();
      c.free_int2.pop_back();
      c.recent_pages[sb].erase(c.recent_pages[sb].begin());
      c.int2_pages[sb].push_back(dst);
      c.free_bf16.push_back(src);  // reused only by later work on the same stream
      pairs.push_back(src);
      pairs.push_back(dst);
    }
    const auto pair_tensor = int32_on(pairs, device_);
    kernels::DemotePagesParams dp;
    dp.num_pages = static_cast<int>(batch_);
    dp.num_kv_heads = static_cast<int>(num_kv_heads_);
    dp.head_dim = static_cast<int>(head_dim_);
    dp.page_size = static_cast<int>(P);
    dp.page_pairs = pair_tensor.data_ptr<std::int32_t>();
    dp.k_bf16 = bits_of<const bf16_bits>(c.k_bf16);
    dp.v_bf16 = bits_of<const bf16_bits>(c.v_bf16);
    dp.k_clip = c.k_clip.data_ptr<float>();
    dp.v_clip = c.v_clip.data_ptr<float>();
    dp.k_codes = c.k_codes.data_ptr<std::uint8_t>();
    dp.v_codes = c.v_codes.data_ptr<std::uint8_t>();
    dp.k_scale_zero = bits_of<bf16_bits>(c.k_scale_zero);
    dp.v_scale_zero = bits_of<bf16_bits>(c.v_scale_zero);
    check_status(kernels::demote_pages(dp), "demote_pages");
  }
}

torch::Tensor PagedInt2Attention::attend(std::int64_t layer, const torch::Tensor& q,
                                         const torch::Tensor& k, const torch::Tensor& v,
                                         double scale) {
  OSCAR_CHECK(layer >= 0 && layer < static_cast<std::int64_t>(layers_.size()),
              "paged INT2 attention: layer {} out of range", layer);
  OSCAR_CHECK(q.dim() == 4 && q.size(0) == batch_ && q.size(1) == 1 && k.size(1) == 1,
              "paged INT2 attention decodes one token per sequence per call (got q {})",
              fmt::join(q.sizes(), "x"));
  OSCAR_CHECK(q.device() == device_, "paged INT2 attention: activations on {}, cache on {}",
              q.device().str(), device_.str());
  LayerCache& c = layers_[static_cast<std::size_t>(layer)];
  OSCAR_CHECK(c.length < options_.max_tokens, "paged INT2 attention: capacity of {} tokens reached",
              options_.max_tokens);
  store(c, k, v);

  const std::int64_t P = options_.page_size, G = num_heads_ / num_kv_heads_;
  const PagedSplit split = paged_split(c.length, options_);
  const std::int64_t bstride = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(c.sink_pages[0].size() + c.recent_pages[0].size()));
  const std::int64_t istride =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(c.int2_pages[0].size()));
  std::vector<std::int32_t> btab, itab, lens;
  for (std::int64_t b = 0; b < batch_; ++b) {
    const auto sb = static_cast<std::size_t>(b);
    std::vector<std::int32_t> row = c.sink_pages[sb];
    row.insert(row.end(), c.recent_pages[sb].begin(), c.recent_pages[sb].end());
    row.resize(static_cast<std::size_t>(bstride), 0);
    btab.insert(btab.end(), row.begin(), row.end());
    row = c.int2_pages[sb];
    row.resize(static_cast<std::size_t>(istride), 0);
    itab.insert(itab.end(), row.begin(), row.end());
  }
  for (std::int64_t part : {split.sink, split.int2, split.recent}) {
    lens.insert(lens.end(), static_cast<std::size_t>(batch_), static_cast<std::int32_t>(part));
  }
  const auto btab_d = int32_on(btab, device_), itab_d = int32_on(itab, device_),
             lens_d = int32_on(lens, device_);

  // Queries into the rotated key basis: (q * s) R_K per KV head.
  auto qf = q.reshape({batch_, num_kv_heads_, G, head_dim_}).to(torch::kFloat32);
  if (c.k_smooth.defined()) qf = qf * c.k_smooth.view({1, num_kv_heads_, 1, head_dim_});
  const auto q_rot = torch::einsum("bhgd,hde->bhge", {qf, c.k_rotation})
                         .reshape({batch_, num_heads_, head_dim_})
                         .to(torch::kBFloat16)
                         .contiguous();
  auto out = torch::empty({batch_, num_heads_, head_dim_},
                          torch::TensorOptions().dtype(torch::kBFloat16).device(device_));

  kernels::DecodeParams p;
  p.batch = static_cast<int>(batch_);
  p.num_q_heads = static_cast<int>(num_heads_);
  p.num_kv_heads = static_cast<int>(num_kv_heads_);
  p.head_dim = static_cast<int>(head_dim_);
  p.page_size = static_cast<int>(P);
  p.softmax_scale = static_cast<float>(scale);
  p.q = bits_of<const bf16_bits>(q_rot);
  p.k_bf16 = bits_of<const bf16_bits>(c.k_bf16);
  p.v_bf16 = bits_of<const bf16_bits>(c.v_bf16);
  p.k_codes = c.k_codes.data_ptr<std::uint8_t>();
  p.v_codes = c.v_codes.data_ptr<std::uint8_t>();
  p.k_scale_zero = bits_of<const bf16_bits>(c.k_scale_zero);
  p.v_scale_zero = bits_of<const bf16_bits>(c.v_scale_zero);
  p.bf16_block_table = btab_d.data_ptr<std::int32_t>();
  p.int2_block_table = itab_d.data_ptr<std::int32_t>();
  p.bf16_table_stride = static_cast<int>(bstride);
  p.int2_table_stride = static_cast<int>(istride);
  p.sink_len = lens_d.data_ptr<std::int32_t>();
  p.int2_len = p.sink_len + batch_;
  p.recent_len = p.sink_len + 2 * batch_;
  p.max_pages_per_sequence = static_cast<int>(bstride + istride);
  p.max_bf16_pages_per_sequence = static_cast<int>(bstride);
  p.out = bits_of<bf16_bits>(out);
  p.path = options_.path;
  const auto need = static_cast<std::int64_t>(kernels::decode_workspace_bytes(p));
  if (!workspace_.defined() || workspace_.numel() < need) {
    workspace_ = torch::zeros({need}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
  }
  p.workspace = workspace_.data_ptr();
  p.workspace_bytes = static_cast<std::size_t>(workspace_.numel());
  const kernels::Status status = kernels::decode_attention(p);
  if (status != kernels::Status::kOk) workspace_ = torch::Tensor();  // counters may be left set
  check_status(status, "decode_attention");

  // Back to the model's value basis: O = O_rot R_V^T + v_mean.
  auto o = torch::einsum(
      "bhge,hde->bhgd",
      {out.to(torch::kFloat32).view({batch_, num_kv_heads_, G, head_dim_}), c.v_rotation});
  if (c.v_mean.defined()) o = o + c.v_mean.view({1, num_kv_heads_, 1, head_dim_});
  length_ = c.length;
  return o.reshape({batch_, 1, num_heads_, head_dim_}).to(q.scalar_type());
}

}  // namespace oscar
