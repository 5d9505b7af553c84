// Statistics -> covariances -> batched eigendecomposition -> OSCAR rotations -> bundle.
#include "oscar/calibrate.h"

#include <cmath>
#include <limits>

#include "oscar/error.h"
#include "oscar/version.h"

namespace oscar {
namespace {

// A covariance whose smallest eigenvalue is below this fraction of its largest is treated as rank
// deficient: float64 eigensolvers resolve eigenvalues to ~1e-16 of the largest, so anything under
// 1e-12 is numerical noise around zero, and its eigenvectors (hence R) are arbitrary.
constexpr double kRankTolerance = 1e-12;

torch::Tensor apply_grouping(torch::Tensor per_head, Grouping grouping) {  // [Hkv, d, d]
  if (grouping == Grouping::kLayer) per_head = per_head.mean(0, true).expand_as(per_head);
  return per_head;
}

// Symmetric eigendecomposition -> (vectors with fixed signs, eigenvalues), ascending as eigh.
std::pair<torch::Tensor, torch::Tensor> decompose(const torch::Tensor& covariances,
                                                  EigenBackend backend) {
  const SymmetricEigen eig = symmetric_eigh(covariances, backend);
  return {fix_eigenvector_signs(eig.vectors), eig.values};
}

void check_rank(const torch::Tensor& values_desc, std::int64_t num_kv_heads, const char* what,
                std::int64_t rows) {
  const auto cpu = values_desc.to(torch::kCPU).contiguous();
  const std::int64_t d = cpu.size(1);
  const double* v = cpu.data_ptr<double>();
  for (std::int64_t b = 0; b < cpu.size(0); ++b) {
    const double top = v[b * d], bottom = v[b * d + d - 1];
    OSCAR_CHECK(top > 0.0 && bottom > kRankTolerance * top,
                "{} of layer {} KV head {} is rank deficient (eigenvalues {:.3g} .. {:.3g}) after "
                "{} rows: calibrate on more tokens (--tokens) or check the model",
                what, b / num_kv_heads, b % num_kv_heads, top, bottom, rows);
  }
}

SpectrumSummary summarize(const double* desc, std::int64_t d) {
  double trace = 0.0;
  for (std::int64_t i = 0; i < d; ++i) trace += desc[i];
  SpectrumSummary s;
  s.top_share = trace > 0.0 ? desc[0] / trace : 0.0;
  s.condition = desc[d - 1] > 0.0 ? desc[0] / desc[d - 1] : std::numeric_limits<double>::infinity();
  return s;
}

std::vector<float> to_floats(const torch::Tensor& t) {
  const auto c = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace

Grouping parse_grouping(const std::string& name) {
  if (name == "head") return Grouping::kHead;
  if (name == "layer") return Grouping::kLayer;
  fail("unknown grouping '{}' (expected head or layer)", name);
}

const char* grouping_name(Grouping grouping) {
  return grouping == Grouping::kHead ? "head" : "layer";
}

torch::Tensor key_smoothing_scales(const KvStatistics& stats, std::int64_t layer,
                                   const RotationOptions& options) {
  OSCAR_CHECK(options.smooth_keys >= 0.0 && options.smooth_keys <= 1.0,
              "key smoothing strength must lie in [0, 1] (got {})", options.smooth_keys);
  const auto cq = stats.query_covariance(layer);
  auto q_var = torch::diagonal(cq, 0, 1, 2);  // [Hkv, d]
  auto k_var = options.center_keys ? stats.key_channel_variance(layer)
                                   : stats.key_channel_second_moment(layer);
  if (options.grouping == Grouping::kLayer) {
    q_var = q_var.mean(0, true).expand_as(q_var);
    k_var = k_var.mean(0, true).expand_as(k_var);
  }
  // Channels that never move (zero variance) would get scale 0 or inf: floor both spreads.
  const auto floor_of = [](const torch::Tensor& x) {
    return x.amax(1, true).clamp_min(1e-300) * 1e-12;
  };
  q_var = torch::maximum(q_var, floor_of(q_var));
  k_var = torch::maximum(k_var, floor_of(k_var));
  const auto log_s = 0.5 * options.smooth_keys * (k_var.log() - q_var.log());
  return (log_s - log_s.mean(1, true)).exp().contiguous();
}

torch::Tensor key_covariances(const KvStatistics& stats, const RotationOptions& options) {
  std::vector<torch::Tensor> layers;
  for (std::int64_t i = 0; i < stats.num_layers(); ++i) {
    auto cq = stats.query_covariance(i);
    if (options.smooth_keys > 0.0) {
      const auto s = key_smoothing_scales(stats, i, options);  // q' = q S
      cq = cq * s.unsqueeze(2) * s.unsqueeze(1);
    }
    layers.push_back(apply_grouping(cq, options.grouping));
  }
  const auto c = torch::cat(layers, 0);
  return (c + c.transpose(1, 2)) * 0.5;  // exact symmetry; the sums are symmetric up to rounding
}

torch::Tensor value_covariances(const KvStatistics& stats, Grouping grouping,
                                ValueObjective objective) {
  std::vector<torch::Tensor> layers;
  for (std::int64_t i = 0; i < stats.num_layers(); ++i) {
    layers.push_back(apply_grouping(objective == ValueObjective::kAttn
                                        ? stats.output_covariance(i)
                                        : stats.keyweight_value_covariance(i),
                                    grouping));
  }
  const auto c = torch::cat(layers, 0);
  return (c + c.transpose(1, 2)) * 0.5;
}

RotationResult compute_rotations(const KvStatistics& stats, const RotationOptions& options) {
  const std::int64_t layers = stats.num_layers(), heads = stats.num_kv_heads(),
                     d = stats.head_dim();
  const std::int64_t rows = stats.main_tokens() * (stats.num_heads() / heads);
  OSCAR_CHECK(stats.main_tokens() >= d,
              "{} calibration tokens cannot give full-rank {}x{} covariances: use --tokens of at "
              "least {} (far more for stable rotations)",
              stats.main_tokens(), d, d, d);
  if (options.composition != Composition::kR) hadamard_matrix(d);  // clear error for d != 2^k
  stats.check_finite();

  const auto [k_vectors, k_values] =
      decompose(key_covariances(stats, options), options.eigen_backend);
  const auto [v_vectors, v_values] = decompose(
      value_covariances(stats, options.grouping, options.value_objective), options.eigen_backend);
  const auto k_desc = k_values.flip(1), v_desc = v_values.flip(1);
  check_rank(k_desc, heads, "C_Q (query covariance)", rows);
  check_rank(v_desc, heads, "C_S (value objective covariance)", rows);

  const auto k_rotation = compose_rotation(k_vectors, k_values, options.composition);
  const auto v_rotation = compose_rotation(v_vectors, v_values, options.composition);

  RotationResult result;
  result.eigen_backend =
      eigen_backend_name(resolve_eigen_backend(options.eigen_backend, stats.device()));
  const auto k_cpu = k_desc.to(torch::kCPU).contiguous(),
             v_cpu = v_desc.to(torch::kCPU).contiguous();
  for (std::int64_t i = 0; i < layers; ++i) {
    result.k_rotation.push_back(k_rotation.narrow(0, i * heads, heads));
    result.v_rotation.push_back(v_rotation.narrow(0, i * heads, heads));
    result.k_eigenvalues.push_back(k_desc.narrow(0, i * heads, heads));
    result.v_eigenvalues.push_back(v_desc.narrow(0, i * heads, heads));
    result.k_mean.push_back(stats.key_mean(i));
    result.v_mean.push_back(stats.value_mean(i));
    result.k_smooth.push_back(options.smooth_keys > 0.0 ? key_smoothing_scales(stats, i, options)
                                                        : torch::Tensor());
    for (std::int64_t h = 0; h < heads; ++h) {
      HeadSummary s;
      s.layer = i;
      s.head = h;
      s.k = summarize(k_cpu.data_ptr<double>() + (i * heads + h) * d, d);
      s.v = summarize(v_cpu.data_ptr<double>() + (i * heads + h) * d, d);
      s.k_clip = options.clip_k;
      s.v_clip = options.clip_v;
      result.heads.push_back(s);
    }
  }
  return result;
}

Bundle make_bundle(const RotationResult& rotations, const RotationOptions& options,
                   const ModelIdentity& model, const QuantizationParams& quantization,
                   CalibrationProvenance provenance) {
  OSCAR_CHECK(options.clip_k > 0.0 && options.clip_k <= 1.0 && options.clip_v > 0.0 &&
                  options.clip_v <= 1.0,
              "clip ratios must lie in (0, 1] (got K {} and V {})", options.clip_k, options.clip_v);
  Bundle b;
  b.model = model;
  b.quantization = quantization;
  provenance.grouping = grouping_name(options.grouping);
  provenance.value_objective = value_objective_name(options.value_objective);
  provenance.composition = composition_name(options.composition);
  provenance.center_keys = options.center_keys;
  provenance.center_values = options.center_values;
  provenance.smooth_keys = options.smooth_keys;
  provenance.eigen_backend = rotations.eigen_backend;
  b.calibration = std::move(provenance);
  b.tool_version = version();
  b.git_commit = git_commit();
  const std::size_t layers = rotations.k_rotation.size();
  OSCAR_CHECK(static_cast<std::int64_t>(layers) == model.num_layers,
              "rotations for {} layers but the model has {}", layers, model.num_layers);
  b.layers.resize(layers);
  for (std::size_t i = 0; i < layers; ++i) {
    LayerRotations& l = b.layers[i];
    l.k_rotation = to_floats(rotations.k_rotation[i]);
    l.v_rotation = to_floats(rotations.v_rotation[i]);
    l.k_eigenvalues = to_floats(rotations.k_eigenvalues[i]);
    l.v_eigenvalues = to_floats(rotations.v_eigenvalues[i]);
    const std::int64_t heads = rotations.k_rotation[i].size(0);
    l.k_clip.assign(static_cast<std::size_t>(heads), static_cast<float>(options.clip_k));
    l.v_clip.assign(static_cast<std::size_t>(heads), static_cast<float>(options.clip_v));
    for (const HeadSummary& s : rotations.heads) {
      if (s.layer == static_cast<std::int64_t>(i)) {
        l.k_clip[static_cast<std::size_t>(s.head)] = static_cast<float>(s.k_clip);
        l.v_clip[static_cast<std::size_t>(s.head)] = static_cast<float>(s.v_clip);
      }
    }
    if (options.center_keys) l.k_mean = to_floats(rotations.k_mean[i]);
    if (options.center_values) l.v_mean = to_floats(rotations.v_mean[i]);
    if (options.smooth_keys > 0.0) l.k_smooth = to_floats(rotations.k_smooth.at(i));
  }
  return b;
}

}  // namespace oscar
