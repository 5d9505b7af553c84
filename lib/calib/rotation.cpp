// Rotation algebra of the OSCAR method (see docs/calibration.md for the definitions).
#include "oscar/rotation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "oscar/error.h"

namespace oscar {

bool is_power_of_two(std::int64_t d) { return d > 0 && (d & (d - 1)) == 0; }

torch::Tensor hadamard_matrix(std::int64_t d) {
  OSCAR_CHECK(is_power_of_two(d),
              "head_dim {} is not a power of two: the Walsh-Hadamard factor of the rotation needs "
              "one (use --composition r to calibrate without it)",
              d);
  auto h = torch::ones({1, 1}, torch::kFloat64);
  for (std::int64_t n = 1; n < d; n *= 2) {
    h = torch::cat({torch::cat({h, h}, 1), torch::cat({h, -h}, 1)}, 0);
  }
  return h / std::sqrt(static_cast<double>(d));
}

std::vector<std::int64_t> bit_reversal_permutation(std::int64_t d) {
  OSCAR_CHECK(is_power_of_two(d), "bit reversal needs a power of two, got {}", d);
  int bits = 0;
  while ((std::int64_t{1} << bits) < d) ++bits;
  std::vector<std::int64_t> perm(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < d; ++i) {
    std::int64_t r = 0;
    for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
    perm[static_cast<std::size_t>(i)] = r;
  }
  return perm;
}

Composition parse_composition(const std::string& name) {
  if (name == "r_h_pbr") return Composition::kRHPbr;
  if (name == "r") return Composition::kR;
  if (name == "r_h") return Composition::kRH;
  if (name == "h") return Composition::kH;
  fail("unknown composition '{}' (expected r_h_pbr, r, r_h or h)", name);
}

const char* composition_name(Composition composition) {
  switch (composition) {
    case Composition::kRHPbr:
      return "r_h_pbr";
    case Composition::kR:
      return "r";
    case Composition::kRH:
      return "r_h";
    case Composition::kH:
      return "h";
  }
  return "?";
}

torch::Tensor fix_eigenvector_signs(const torch::Tensor& vectors) {
  OSCAR_CHECK(vectors.dim() == 3 && vectors.size(1) == vectors.size(2),
              "eigenvectors must be [B, d, d]");
  // argmax returns the first maximal index, which is the documented tie rule.
  const auto pivot = vectors.abs().argmax(1, /*keepdim=*/true);  // [B, 1, d]
  const auto sign = 1.0 - 2.0 * (vectors.gather(1, pivot) < 0).to(vectors.dtype());
  return vectors * sign;
}

std::vector<std::int64_t> bit_reversal_eigen_order(const torch::Tensor& eigenvalues) {
  const auto values = eigenvalues.to(torch::kCPU, torch::kFloat64).contiguous();
  OSCAR_CHECK(values.dim() == 1, "eigenvalues of one head must be 1-D");
  const std::int64_t d = values.size(0);
  const double* v = values.data_ptr<double>();
  std::vector<std::int64_t> idx_desc(static_cast<std::size_t>(d));
  std::iota(idx_desc.begin(), idx_desc.end(), 0);
  std::stable_sort(idx_desc.begin(), idx_desc.end(),
                   [&](std::int64_t a, std::int64_t b) { return v[a] > v[b]; });
  const auto br = bit_reversal_permutation(d);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < d; ++i) perm[br[i]] = idx_desc[i];
  return perm;
}

torch::Tensor compose_rotation(const torch::Tensor& vectors, const torch::Tensor& eigenvalues,
                               Composition composition) {
  OSCAR_CHECK(vectors.dim() == 3 && vectors.size(1) == vectors.size(2) && eigenvalues.dim() == 2 &&
                  eigenvalues.size(0) == vectors.size(0) && eigenvalues.size(1) == vectors.size(1),
              "compose_rotation: vectors must be [B, d, d] and eigenvalues [B, d]");
  const std::int64_t d = vectors.size(1);
  const auto u = vectors.to(torch::kFloat64);
  switch (composition) {
    case Composition::kR:
      return u.clone();
    case Composition::kH:
      return hadamard_matrix(d).to(u.device()).expand({u.size(0), d, d}).clone();
    case Composition::kRH:
      return torch::matmul(u, hadamard_matrix(d).to(u.device()));
    case Composition::kRHPbr: {
      const auto uh = torch::matmul(u, hadamard_matrix(d).to(u.device()));
      std::vector<torch::Tensor> heads;
      for (std::int64_t b = 0; b < u.size(0); ++b) {
        const auto perm = bit_reversal_eigen_order(eigenvalues[b]);
        const auto index = torch::tensor(perm, torch::kLong).to(u.device());
        heads.push_back(uh[b].index_select(1, index));  // (U H) I[:, perm] = columns perm of U H
      }
      return torch::stack(heads);
    }
  }
  fail("unknown composition");
}

}  // namespace oscar
