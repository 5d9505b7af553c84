// Streaming float64 accumulation of the OSCAR statistics, with merge, save and resume.
#include "oscar/kv_statistics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/safetensors.h"

namespace oscar {
namespace {

using nlohmann::json;

constexpr const char* kStatsFormat = "oscar-kv-statistics";
// Version 2 added the per-channel key second moments (k_sq_sum) for key smoothing.
constexpr int kStatsVersion = 2;

// [B, T, H, d] -> [Hkv, rows, d] float64, the rows of each KV head's group (GQA: g query heads).
torch::Tensor group_rows(const torch::Tensor& x, std::int64_t num_kv_heads) {
  const std::int64_t heads = x.size(2), d = x.size(3);
  const std::int64_t group = heads / num_kv_heads;
  return x.to(torch::kFloat64)
      .reshape({-1, num_kv_heads, group, d})
      .permute({1, 0, 2, 3})
      .reshape({num_kv_heads, -1, d});
}

torch::Tensor second_moment(const torch::Tensor& rows) {  // [H, N, d] -> [H, d, d]
  return torch::bmm(rows.transpose(1, 2), rows);
}

json provenance_to_json(const StatsProvenance& p) {
  return json{{"model_name", p.model_name},
              {"config_sha256", p.config_sha256},
              {"weights_header_sha256", p.weights_header_sha256},
              {"dataset_name", p.dataset_name},
              {"dataset_sha256", p.dataset_sha256},
              {"seq_len", p.seq_len},
              {"seed", p.seed},
              {"shard_index", p.shard_index},
              {"shard_count", p.shard_count},
              {"compute_dtype", p.compute_dtype}};
}

StatsProvenance provenance_from_json(const json& j) {
  StatsProvenance p;
  p.model_name = j.at("model_name").get<std::string>();
  p.config_sha256 = j.at("config_sha256").get<std::string>();
  p.weights_header_sha256 = j.at("weights_header_sha256").get<std::string>();
  p.dataset_name = j.at("dataset_name").get<std::string>();
  p.dataset_sha256 = j.at("dataset_sha256").get<std::string>();
  p.seq_len = j.at("seq_len").get<std::int64_t>();
  p.seed = j.at("seed").get<std::uint64_t>();
  p.shard_index = j.at("shard_index").get<std::int64_t>();
  p.shard_count = j.at("shard_count").get<std::int64_t>();
  p.compute_dtype = j.at("compute_dtype").get<std::string>();
  return p;
}

}  // namespace

ValueObjective parse_value_objective(const std::string& name) {
  if (name == "attn") return ValueObjective::kAttn;
  if (name == "keyweight") return ValueObjective::kKeyWeight;
  fail("unknown value objective '{}' (expected attn or keyweight)", name);
}

const char* value_objective_name(ValueObjective objective) {
  return objective == ValueObjective::kAttn ? "attn" : "keyweight";
}

KvStatistics::KvStatistics(std::int64_t num_layers, std::int64_t num_heads,
                           std::int64_t num_kv_heads, std::int64_t head_dim, torch::Device device)
    : num_layers_(num_layers),
      num_heads_(num_heads),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      device_(device) {
  OSCAR_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 && num_heads % num_kv_heads == 0,
              "invalid statistics shape: {} layers, {} q / {} KV heads, head_dim {}", num_layers,
              num_heads, num_kv_heads, head_dim);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  layers_.resize(static_cast<std::size_t>(num_layers));
  for (Layer& l : layers_) {
    l.q_sum = torch::zeros({num_kv_heads, head_dim, head_dim}, opts);
    l.o_sum = torch::zeros({num_kv_heads, head_dim, head_dim}, opts);
    l.k_sum = torch::zeros({num_kv_heads, head_dim}, opts);
    l.k_sq_sum = torch::zeros({num_kv_heads, head_dim}, opts);
    l.v_sum = torch::zeros({num_kv_heads, head_dim}, opts);
    l.kw_sum = torch::zeros({num_kv_heads, head_dim, head_dim}, opts);
    l.w_sum = torch::zeros({num_kv_heads}, opts);
  }
}

void KvStatistics::on_attention(const AttentionRecord& record) {
  OSCAR_CHECK(record.layer >= 0 && record.layer < num_layers_,
              "attention record of layer {} but the statistics have {} layers", record.layer,
              num_layers_);
  OSCAR_CHECK(record.q.dim() == 4 && record.q.size(2) == num_heads_ &&
                  record.q.size(3) == head_dim_ && record.k.size(2) == num_kv_heads_,
              "attention record of layer {} does not match the statistics' head layout",
              record.layer);
  Layer& l = layers_[static_cast<std::size_t>(record.layer)];
  const std::int64_t tokens = record.k.size(0) * record.k.size(1);
  const auto k = group_rows(record.k.to(device_), num_kv_heads_);  // [Hkv, N, d]
  if (!keyweight_pass_) {
    l.q_sum += second_moment(group_rows(record.q.to(device_), num_kv_heads_));
    l.o_sum += second_moment(group_rows(record.out.to(device_), num_kv_heads_));
    l.k_sum += k.sum(1);
    l.k_sq_sum += (k * k).sum(1);
    l.v_sum += group_rows(record.v.to(device_), num_kv_heads_).sum(1);
    if (record.layer == num_layers_ - 1) main_tokens_ += tokens;
  } else {
    const auto v = group_rows(record.v.to(device_), num_kv_heads_);
    const auto w = (torch::bmm(k, l.weight_cq) * k).sum(2);  // [Hkv, N]: k C_Q k^T
    l.kw_sum += torch::bmm((v * w.unsqueeze(2)).transpose(1, 2), v);
    l.w_sum += w.sum(1);
    if (record.layer == num_layers_ - 1) keyweight_tokens_ += tokens;
  }
}

void KvStatistics::begin_keyweight_pass() {
  OSCAR_CHECK(main_tokens_ > 0, "the key-weighted pass needs the main pass's C_Q first");
  for (std::int64_t i = 0; i < num_layers_; ++i) layers_[i].weight_cq = query_covariance(i);
  keyweight_pass_ = true;
}

torch::Tensor KvStatistics::query_covariance(std::int64_t layer) const {
  OSCAR_CHECK(main_tokens_ > 0, "no statistics accumulated yet");
  const double rows = static_cast<double>(main_tokens_ * (num_heads_ / num_kv_heads_));
  return layers_.at(static_cast<std::size_t>(layer)).q_sum / rows;
}

torch::Tensor KvStatistics::output_covariance(std::int64_t layer) const {
  OSCAR_CHECK(main_tokens_ > 0, "no statistics accumulated yet");
  const double rows = static_cast<double>(main_tokens_ * (num_heads_ / num_kv_heads_));
  return layers_.at(static_cast<std::size_t>(layer)).o_sum / rows;
}

torch::Tensor KvStatistics::keyweight_value_covariance(std::int64_t layer) const {
  OSCAR_CHECK(keyweight_tokens_ > 0, "the key-weighted pass has not run");
  const Layer& l = layers_.at(static_cast<std::size_t>(layer));
  return l.kw_sum / l.w_sum.view({-1, 1, 1});
}

torch::Tensor KvStatistics::value_mean(std::int64_t layer) const {
  OSCAR_CHECK(main_tokens_ > 0, "no statistics accumulated yet");
  return layers_.at(static_cast<std::size_t>(layer)).v_sum / static_cast<double>(main_tokens_);
}

torch::Tensor KvStatistics::key_mean(std::int64_t layer) const {
  OSCAR_CHECK(main_tokens_ > 0, "no statistics accumulated yet");
  return layers_.at(static_cast<std::size_t>(layer)).k_sum / static_cast<double>(main_tokens_);
}

torch::Tensor KvStatistics::key_channel_variance(std::int64_t layer) const {
  OSCAR_CHECK(main_tokens_ > 0, "no statistics accumulated yet");
  const Layer& l = layers_.at(static_cast<std::size_t>(layer));
  const auto mean = key_mean(layer);
  return (l.k_sq_sum / static_cast<double>(main_tokens_) - mean * mean).clamp_min(0.0);
}

torch::Tensor KvStatistics::key_channel_second_moment(std::int64_t layer) const {
  OSCAR_CHECK(main_tokens_ > 0, "no statistics accumulated yet");
  return layers_.at(static_cast<std::size_t>(layer)).k_sq_sum / static_cast<double>(main_tokens_);
}

void KvStatistics::check_finite() const {
  for (std::int64_t i = 0; i < num_layers_; ++i) {
    const Layer& l = layers_[static_cast<std::size_t>(i)];
    const auto total = l.q_sum.sum() + l.o_sum.sum() + l.k_sum.sum() + l.kw_sum.sum();
    OSCAR_CHECK(std::isfinite(total.item<double>()),
                "non-finite activations (NaN or Inf) reached the statistics of layer {}: the "
                "model or its weights produce NaN/Inf on this data (try --dtype f32)",
                i);
  }
}

void KvStatistics::merge(const KvStatistics& other) {
  OSCAR_CHECK(other.num_layers_ == num_layers_ && other.num_heads_ == num_heads_ &&
                  other.num_kv_heads_ == num_kv_heads_ && other.head_dim_ == head_dim_,
              "cannot merge statistics of different shapes ({} layers {}/{} heads d {} vs {} "
              "layers {}/{} heads d {})",
              num_layers_, num_heads_, num_kv_heads_, head_dim_, other.num_layers_,
              other.num_heads_, other.num_kv_heads_, other.head_dim_);
  OSCAR_CHECK(keyweight_pass_ == other.keyweight_pass_,
              "cannot merge main-pass statistics with statistics of the key-weighted pass");
  if (keyweight_pass_) {
    // Key-weighted sums add up only when every part weighted by the same C_Q, which holds when
    // each part began its second pass from the same (merged) main-pass statistics: then their main
    // sums are equal too and are kept once.
    for (std::int64_t i = 0; i < num_layers_; ++i) {
      Layer& a = layers_[static_cast<std::size_t>(i)];
      const Layer& b = other.layers_[static_cast<std::size_t>(i)];
      const bool same_main = torch::equal(a.weight_cq, b.weight_cq.to(device_)) &&
                             torch::equal(a.q_sum, b.q_sum.to(device_)) &&
                             torch::equal(a.o_sum, b.o_sum.to(device_)) &&
                             torch::equal(a.k_sum, b.k_sum.to(device_)) &&
                             torch::equal(a.k_sq_sum, b.k_sq_sum.to(device_)) &&
                             torch::equal(a.v_sum, b.v_sum.to(device_)) &&
                             main_tokens_ == other.main_tokens_;
      OSCAR_CHECK(same_main,
                  "key-weighted statistics of layer {} come from another main pass: each part "
                  "must run its key-weighted pass from the same merged main-pass statistics "
                  "(oscar-calibrate --keyweight-from)",
                  i);
    }
    for (std::int64_t i = 0; i < num_layers_; ++i) {
      Layer& a = layers_[static_cast<std::size_t>(i)];
      const Layer& b = other.layers_[static_cast<std::size_t>(i)];
      a.kw_sum += b.kw_sum.to(device_);
      a.w_sum += b.w_sum.to(device_);
    }
    keyweight_tokens_ += other.keyweight_tokens_;
    keyweight_sequences += other.keyweight_sequences;
    return;
  }
  for (std::int64_t i = 0; i < num_layers_; ++i) {
    Layer& a = layers_[static_cast<std::size_t>(i)];
    const Layer& b = other.layers_[static_cast<std::size_t>(i)];
    a.q_sum += b.q_sum.to(device_);
    a.o_sum += b.o_sum.to(device_);
    a.k_sum += b.k_sum.to(device_);
    a.k_sq_sum += b.k_sq_sum.to(device_);
    a.v_sum += b.v_sum.to(device_);
  }
  main_tokens_ += other.main_tokens_;
  main_sequences += other.main_sequences;
}

void KvStatistics::save(const std::string& path, const StatsProvenance& provenance) const {
  std::vector<torch::Tensor> keep;  // CPU copies that outlive the serialization
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    keep.push_back(t.to(torch::kCPU).contiguous());
    const auto& c = keep.back();
    tensors.push_back({name, DType::F64, c.sizes().vec(), c.data_ptr<double>(),
                       static_cast<std::size_t>(c.numel()) * sizeof(double)});
  };
  for (std::int64_t i = 0; i < num_layers_; ++i) {
    const Layer& l = layers_[static_cast<std::size_t>(i)];
    const std::string p = fmt::format("layers.{}.", i);
    add(p + "q_sum", l.q_sum);
    add(p + "o_sum", l.o_sum);
    add(p + "k_sum", l.k_sum);
    add(p + "k_sq_sum", l.k_sq_sum);
    add(p + "v_sum", l.v_sum);
    add(p + "kw_sum", l.kw_sum);
    add(p + "w_sum", l.w_sum);
    if (keyweight_pass_) add(p + "weight_cq", l.weight_cq);
  }
  const json manifest{{"format", kStatsFormat},
                      {"format_version", kStatsVersion},
                      {"num_layers", num_layers_},
                      {"num_heads", num_heads_},
                      {"num_kv_heads", num_kv_heads_},
                      {"head_dim", head_dim_},
                      {"main_tokens", main_tokens_},
                      {"main_sequences", main_sequences},
                      {"keyweight_pass", keyweight_pass_},
                      {"keyweight_tokens", keyweight_tokens_},
                      {"keyweight_sequences", keyweight_sequences},
                      {"provenance", provenance_to_json(provenance)}};
  write_safetensors(path, tensors, {{"oscar", manifest.dump()}});
}

KvStatistics KvStatistics::load(const std::string& path, torch::Device device,
                                StatsProvenance* provenance) {
  OSCAR_CHECK(file_exists(path), "statistics file '{}' does not exist", path);
  const SafetensorsFile file(path);
  const auto it = file.metadata().find("oscar");
  OSCAR_CHECK(it != file.metadata().end(), "{}: not an OSCAR statistics file (no manifest)", path);
  json m;
  try {
    m = json::parse(it->second);
    OSCAR_CHECK(m.at("format").get<std::string>() == kStatsFormat, "{}: format '{}' is not '{}'",
                path, m.at("format").get<std::string>(), kStatsFormat);
    const int version = m.at("format_version").get<int>();
    OSCAR_CHECK(version == kStatsVersion,
                "{}: statistics format_version {} is not supported (this build reads {}): "
                "recompute the statistics with this version",
                path, version, kStatsVersion);
    const auto num_layers = m.at("num_layers").get<std::int64_t>();
    const auto num_kv_heads = m.at("num_kv_heads").get<std::int64_t>();
    const auto head_dim = m.at("head_dim").get<std::int64_t>();
    const bool keyweight_pass = m.at("keyweight_pass").get<bool>();
    // The manifest's counts size the accumulators: check them against the file's tensors before
    // allocating, so a corrupt count cannot ask for more memory than the file itself holds.
    const std::size_t per_layer = keyweight_pass ? 8 : 7;
    OSCAR_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 &&
                    static_cast<std::uint64_t>(num_layers) * per_layer == file.tensors().size(),
                "{}: the manifest's {} layers, {} KV heads, head_dim {} do not match the {} "
                "tensors in the file",
                path, num_layers, num_kv_heads, head_dim, file.tensors().size());
    const TensorInfo& first = file.at("layers.0.q_sum");
    OSCAR_CHECK(first.shape == std::vector<std::int64_t>({num_kv_heads, head_dim, head_dim}),
                "{}: tensor layers.0.q_sum has shape [{}], but the manifest says {} KV heads of "
                "head_dim {}",
                path, fmt::join(first.shape, ", "), num_kv_heads, head_dim);
    KvStatistics stats(num_layers, m.at("num_heads").get<std::int64_t>(), num_kv_heads, head_dim,
                       device);
    stats.main_tokens_ = m.at("main_tokens").get<std::int64_t>();
    stats.main_sequences = m.at("main_sequences").get<std::int64_t>();
    stats.keyweight_pass_ = keyweight_pass;
    stats.keyweight_tokens_ = m.at("keyweight_tokens").get<std::int64_t>();
    stats.keyweight_sequences = m.at("keyweight_sequences").get<std::int64_t>();
    if (provenance != nullptr) *provenance = provenance_from_json(m.at("provenance"));
    auto read = [&](const std::string& name, torch::Tensor& into) {
      const TensorInfo& info = file.at(name);
      OSCAR_CHECK(info.dtype == DType::F64 && info.shape == into.sizes().vec(),
                  "{}: tensor {} is {} [{}], expected F64 [{}]", path, name, dtype_name(info.dtype),
                  fmt::join(info.shape, ", "), fmt::join(into.sizes().vec(), ", "));
      auto cpu = torch::empty(into.sizes(), torch::kFloat64);
      std::memcpy(cpu.data_ptr<double>(), file.data(info), info.nbytes());
      into = cpu.to(device);
    };
    for (std::int64_t i = 0; i < stats.num_layers_; ++i) {
      Layer& l = stats.layers_[static_cast<std::size_t>(i)];
      const std::string p = fmt::format("layers.{}.", i);
      read(p + "q_sum", l.q_sum);
      read(p + "o_sum", l.o_sum);
      read(p + "k_sum", l.k_sum);
      read(p + "k_sq_sum", l.k_sq_sum);
      read(p + "v_sum", l.v_sum);
      read(p + "kw_sum", l.kw_sum);
      read(p + "w_sum", l.w_sum);
      if (stats.keyweight_pass_) {
        l.weight_cq = torch::empty_like(l.q_sum);
        read(p + "weight_cq", l.weight_cq);
      }
    }
    return stats;
  } catch (const json::exception& e) {
    fail("{}: malformed statistics manifest: {}", path, e.what());
  }
}

}  // namespace oscar
