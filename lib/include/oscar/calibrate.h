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
  // (descending), key means [Hkv, d]. Kept in full precision for evaluation and tests; the bundle
  // holds them as float32.
  std::vector<torch::Tensor> k_rotation, v_rotation, k_eigenvalues, v_eigenvalues, k_mean, v_mean;
  std::vector<HeadSummary> heads;
  std::string eigen_backend;  // the backend that actually ran
};

// The covariances the method decomposes, [L * Hkv, d, d] float64 (layer-major), after grouping.
torch::Tensor key_covariances(const KvStatistics& stats, Grouping grouping);
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
