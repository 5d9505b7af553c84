// Rotation algebra: Walsh-Hadamard, bit reversal, eigenvector signs and the R = U H P composition.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "oscar/error.h"
#include "oscar/rotation.h"

using namespace oscar;

namespace {
// Tolerance for products of float64 orthonormal matrices of order <= 256: each entry is a sum of
// d products with relative rounding ~1e-16, so 1e-12 leaves four orders of magnitude of margin.
constexpr double kOrthoTol = 1e-12;

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }
}  // namespace

TEST(Hadamard, OrthonormalSylvesterForPowersOfTwo) {
  for (std::int64_t d : {1, 2, 4, 8, 16, 64, 128, 256}) {
    const auto h = hadamard_matrix(d);
    ASSERT_EQ(h.sizes(), (std::vector<std::int64_t>{d, d}));
    EXPECT_LT(max_abs(h.matmul(h.t()) - torch::eye(d, torch::kFloat64)), kOrthoTol) << d;
    EXPECT_LT(max_abs(h.abs() - 1.0 / std::sqrt(double(d))), 1e-15) << d;
    EXPECT_LT(max_abs(h - h.t()), 1e-15) << "Sylvester H is symmetric, d " << d;
    EXPECT_GT(h[0].min().item<double>(), 0.0) << "natural order: first row all positive";
  }
  // Sylvester recursion: H_2n = [[H, H], [H, -H]] / sqrt(2).
  const auto h4 = hadamard_matrix(4) * 2.0;
  const auto expected =
      torch::tensor({1., 1., 1., 1., 1., -1., 1., -1., 1., 1., -1., -1., 1., -1., -1., 1.},
                    torch::kFloat64)
          .view({4, 4});
  EXPECT_LT(max_abs(h4 - expected), 1e-15);
}

TEST(Hadamard, RejectsNonPowersOfTwo) {
  for (std::int64_t d : {0, 3, 6, 96, 80}) {
    try {
      hadamard_matrix(d);
      FAIL() << d;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("power of two"), std::string::npos);
    }
  }
}

TEST(BitReversal, KnownOrderAndInvolution) {
  EXPECT_EQ(bit_reversal_permutation(8), (std::vector<std::int64_t>{0, 4, 2, 6, 1, 5, 3, 7}));
  EXPECT_EQ(bit_reversal_permutation(1), (std::vector<std::int64_t>{0}));
  for (std::int64_t d : {2, 4, 16, 128, 256}) {
    const auto p = bit_reversal_permutation(d);
    for (std::int64_t i = 0; i < d; ++i) ASSERT_EQ(p[p[i]], i) << "bitrev is an involution";
  }
}

TEST(BitReversal, EigenOrderFollowsTheDefinition) {
  // perm[bitrev(i)] = idx_desc[i].
  const auto values = torch::tensor({0.5, 3.0, 1.0, 7.0, 0.1, 2.0, 4.0, 0.2}, torch::kFloat64);
  const std::vector<std::int64_t> idx_desc = {3, 6, 1, 5, 2, 0, 7, 4};
  const auto br = bit_reversal_permutation(8);
  const auto perm = bit_reversal_eigen_order(values);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(perm[br[i]], idx_desc[i]);
  // Ties keep index order, so the permutation is deterministic.
  const auto tied = bit_reversal_eigen_order(torch::ones({4}, torch::kFloat64));
  EXPECT_EQ(tied, (std::vector<std::int64_t>{0, 2, 1, 3}));
}

TEST(EigenvectorSigns, LargestEntryOfEachColumnPositive) {
  torch::manual_seed(3);
  const auto q = std::get<0>(torch::linalg_qr(torch::randn({3, 16, 16}, torch::kFloat64)));
  const auto fixed = fix_eigenvector_signs(q);
  const auto pivot = fixed.abs().argmax(1, true);
  EXPECT_GT(fixed.gather(1, pivot).min().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(fix_eigenvector_signs(-q), fixed)) << "sign-invariant result";
  EXPECT_TRUE(torch::equal(fix_eigenvector_signs(fixed), fixed)) << "idempotent";
}

TEST(Compose, EveryCompositionIsOrthogonalAndMatchesItsDefinition) {
  torch::manual_seed(5);
  for (std::int64_t d : {8, 64, 128}) {
    const auto a = torch::randn({2, d, d}, torch::kFloat64);
    const auto c = a.matmul(a.transpose(1, 2));
    auto [values, vectors] = torch::linalg_eigh(c);
    const auto h = hadamard_matrix(d);
    for (Composition comp :
         {Composition::kRHPbr, Composition::kR, Composition::kRH, Composition::kH}) {
      const auto r = compose_rotation(vectors, values, comp);
      const auto eye = torch::eye(d, torch::kFloat64);
      EXPECT_LT(max_abs(r.matmul(r.transpose(1, 2)) - eye), 1e-10)
          << composition_name(comp) << " d " << d;
    }
    // R = U H P with P = I[:, perm].
    const auto r = compose_rotation(vectors, values, Composition::kRHPbr);
    for (std::int64_t b = 0; b < 2; ++b) {
      const auto perm = bit_reversal_eigen_order(values[b]);
      auto p = torch::zeros({d, d}, torch::kFloat64);
      for (std::int64_t j = 0; j < d; ++j) p[perm[j]][j] = 1.0;
      EXPECT_LT(max_abs(r[b] - vectors[b].matmul(h).matmul(p)), kOrthoTol);
    }
    EXPECT_LT(max_abs(compose_rotation(vectors, values, Composition::kRH) - vectors.matmul(h)),
              kOrthoTol);
  }
  EXPECT_EQ(parse_composition("r_h_pbr"), Composition::kRHPbr);
  EXPECT_THROW(parse_composition("h_r"), Error);
}

TEST(Compose, NonPowerOfTwoOnlyWithPlainEigenvectors) {
  const auto c = torch::eye(6, torch::kFloat64).unsqueeze(0);
  auto [values, vectors] = torch::linalg_eigh(c);
  EXPECT_NO_THROW(compose_rotation(vectors, values, Composition::kR));
  EXPECT_THROW(compose_rotation(vectors, values, Composition::kRHPbr), Error);
}
