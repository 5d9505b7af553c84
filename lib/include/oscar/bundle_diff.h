// Comparing two rotation bundles: manifest fields, and per (layer, KV head, K/V) the rotation
// elements, the leading eigen-subspaces, eigenvalues, clip ratios and means/smoothing scales.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oscar/bundle.h"

namespace oscar {

// Each tolerance bounds one metric; a negative value leaves that metric unchecked. The defaults
// (all 0) ask for identical values.
struct DiffTolerances {
  double rotation = 0.0;     // max |R_A - R_B| over the elements of one head's rotation
  double angle_deg = 0.0;    // largest principal angle between the leading eigen-subspaces, degrees
  double eigen = 0.0;        // max_i |lambda_A,i - lambda_B,i| / max_i |lambda_A,i|
  double clip = 0.0;         // |clip_A - clip_B|
  double aux = 0.0;          // k_mean / v_mean / k_smooth: max |a - b| / max |a|
  std::int64_t leading = 0;  // eigenvectors spanning the compared subspace; 0: head_dim / 4
  // Manifest fields (dotted, e.g. "calibration.tokens") whose difference is reported but not a
  // failure. The clock and build fields (created, tool.version, tool.git_commit) never count.
  std::vector<std::string> ignored_fields;
};

struct HeadDiff {
  std::int64_t layer = 0, head = 0;
  char kind = 'k';        // 'k' or 'v'
  bool identical = true;  // every tensor of this (layer, head, kind) bit-identical
  double rotation = 0.0, angle_deg = 0.0, eigen = 0.0, clip = 0.0, aux = 0.0;
  // False when the eigenvector basis could not be recovered from R (composition h, or float32
  // ties between eigenvalues that make the bit-reversal order ambiguous); angle_deg is then NaN.
  bool angle_defined = true;
};

struct FieldDiff {
  std::string field, a, b;
  bool counted = true;  // false for ignored and clock/build fields
};

struct BundleDiff {
  std::vector<FieldDiff> fields;  // manifest fields that differ
  std::vector<HeadDiff> heads;    // every (layer, KV head, kind), layer-major, K before V
  std::int64_t leading = 0;       // subspace dimension used
  bool tensors_identical = true;
  HeadDiff worst;  // the maximum of each metric over heads (angles: defined ones)
  std::vector<std::string> failures;  // one sentence per metric or field over its tolerance
  bool ok() const { return failures.empty(); }
};

// Compares `a` with `b`. Bundles of different dimensions (layers, KV heads, head_dim) cannot be
// compared tensor by tensor: that is an oscar::Error.
BundleDiff diff_bundles(const Bundle& a, const Bundle& b, const DiffTolerances& tolerances);

// The eigenvectors U (columns in ascending eigenvalue order, row-major d x d, float64) that R was
// composed from, given the bundle's composition and its stored eigenvalues (descending): U = R
// for r, R H for r_h, and for r_h_pbr R with the bit-reversal permutation undone, then times H.
// Returns false (and leaves `u` unspecified) for composition h, or when the recovered columns break
// the sign convention (each column's largest-magnitude entry positive), which happens only when
// float32 ties hide the eigenvalue order the permutation was built from.
bool recover_eigenvectors(const float* rotation, const float* eigenvalues_desc, std::int64_t d,
                          const std::string& composition, std::vector<double>* u);

// Largest principal angle (degrees) between the spans of the last k columns of U_A and U_B
// (row-major d x d): asin of the spectral norm of (I - U_A,k U_A,k^T) U_B,k.
double largest_principal_angle_deg(const std::vector<double>& u_a, const std::vector<double>& u_b,
                                   std::int64_t d, std::int64_t k);

}  // namespace oscar
