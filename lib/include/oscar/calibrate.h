// From accumulated statistics to a rotation bundle: eigendecomposition, composition, clip, summary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/eigen.h"
#include "oscar/kv_statistics.h"
#include "oscar/rotation.h"

namespace oscar {

enum class Grouping {
  kHead,   // one rotation per (layer, KV head)
  kLayer,  // one rotation per layer: the KV heads' covariances averaged (the anchor's v1)
};
Grouping parse_grouping(const std::string& name);
const char* grouping_name(Grouping grouping);

struct RotationOptions {
  Grouping grouping = Grouping::kHead;
  ValueObjective value_objective = ValueObjective::kAttn;
  Composition composition = Composition::kRHPbr;
  bool center_keys = false;
  bool center_values = false;  // store per-head value means (exact: rows of softmax sum to 1)
  // Key smoothing strength alpha (0: off). Keys are divided per channel by s and queries multiplied
  // by it, which leaves every logit q . k unchanged; s_c = (sigma_k,c / sigma_q,c)^alpha,
  // normalised to geometric mean 1, and C_Q is rotated in the smoothed basis (S C_Q S). alpha = 0.5
  // minimises tr(S C_Q S) tr(S^-1 C_K S^-1), the logit error of an isotropic per-token quantizer.
  double smooth_keys = 0.0;
  double clip_k = 0.96, clip_v = 0.92;
  EigenBackend eigen_backend = EigenBackend::kAuto;
};

// Spectrum of one covariance, for the summary.
struct SpectrumSummary {
  double top_share = 0.0;  // largest eigenvalue / trace
  double condition = 0.0;  // largest / smallest eigenvalue
};

struct HeadSummary {
  std::int64_t layer = 0, head = 0;
  SpectrumSummary k, v;
  double k_clip = 0.0, v_clip = 0.0;
};

struct RotationResult {
  // Per layer, float64 on the statistics' device: rotations [Hkv, d, d], eigenvalues [Hkv, d]
  // (descending), key means [Hkv, d], key smoothing scales [Hkv, d] (undefined when off). Kept in
  // full precision for evaluation and tests; the bundle holds them as float32.
  std::vector<torch::Tensor> k_rotation, v_rotation, k_eigenvalues, v_eigenvalues, k_mean, v_mean,
      k_smooth;
  std::vector<HeadSummary> heads;
  std::string eigen_backend;  // the backend that actually ran
};

// Key smoothing scales of one layer, [Hkv, d] float64 (see RotationOptions::smooth_keys); with
// layer grouping every head gets the same scales.
torch::Tensor key_smoothing_scales(const KvStatistics& stats, std::int64_t layer,
                                   const RotationOptions& options);

// The covariances the method decomposes, [L * Hkv, d, d] float64 (layer-major), after grouping;
// C_Q is taken in the smoothed basis S C_Q S when options.smooth_keys > 0.
torch::Tensor key_covariances(const KvStatistics& stats, const RotationOptions& options);
torch::Tensor value_covariances(const KvStatistics& stats, Grouping grouping,
                                ValueObjective objective);

// Eigendecomposes C_Q and C_S of every layer and head in one batched call, fixes eigenvector signs,
// composes R and checks that every covariance has full rank (too few calibration tokens, or a
// degenerate model, give an error naming the layer and head).
RotationResult compute_rotations(const KvStatistics& stats, const RotationOptions& options);

// Assembles the bundle (float32 tensors, clip ratios from options) from the rotations.
Bundle make_bundle(const RotationResult& rotations, const RotationOptions& options,
                   const ModelIdentity& model, const QuantizationParams& quantization,
                   CalibrationProvenance provenance);

}  // namespace oscar
