// Batched symmetric eigendecomposition: LAPACK on the CPU, cuSOLVER against LAPACK on a GPU, the
// CUDA check macros and the kernel's argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "oscar/eigen.h"
#include "oscar/error.h"

#ifdef OSCAR_TEST_KERNELS
#include "oscar/kernels/cuda_check.h"
#include "oscar/kernels/eigen.h"
#endif

namespace oscar {
namespace {

// A backward-stable fp64 eigensolver returns V, w with ||V diag(w) V^T - C|| <= c * d * eps * ||C||
// and ||V^T V - I|| <= c * d * eps, eps = 2.2e-16. For d <= 128, d * eps < 3e-14; these bounds
// leave three orders of magnitude for the modest constant c and still catch any real error (a
// wrong sign, order or transpose gives O(1)).
constexpr double kReconstructionTol = 1e-10;  // relative to ||C||_F
constexpr double kOrthonormalityTol = 1e-10;  // absolute, entries of V^T V - I
// Two backends solving the same fp64 matrix agree on eigenvalues to O(d * eps * ||C||) (Weyl).
constexpr double kEigenvalueTol = 1e-9;  // relative to max |eigenvalue| of the matrix
// An eigenvector moves by about eps * ||C|| / gap, so it is only compared across backends when its
// eigenvalue is separated from its neighbours by this fraction of ||C||; then 1 - |cos| < 1e-8 is
// far above rounding and far below any real disagreement.
constexpr double kSeparatedGap = 1e-4;
constexpr double kVectorDotTol = 1e-8;

torch::TensorOptions f64() { return torch::TensorOptions().dtype(torch::kFloat64); }

// Random symmetric positive definite batch [B, d, d], like a covariance of 2d samples.
torch::Tensor random_spd(std::int64_t batch, std::int64_t d, std::uint64_t seed,
                         const torch::Device& device = torch::kCPU) {
  torch::manual_seed(seed);
  auto x = torch::randn({batch, d, 2 * d}, f64());
  auto c = torch::matmul(x, x.transpose(1, 2)) / (2.0 * d) + 1e-3 * torch::eye(d, f64());
  return c.to(device);
}

// Q diag(values) Q^T with a random orthogonal Q, for a known spectrum.
torch::Tensor with_spectrum(const torch::Tensor& values /* [B, d] */, std::uint64_t seed) {
  torch::manual_seed(seed);
  const auto b = values.size(0), d = values.size(1);
  auto q = std::get<0>(torch::linalg_qr(torch::randn({b, d, d}, f64())));
  return torch::matmul(q * values.unsqueeze(1), q.transpose(1, 2));
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

double frobenius(const torch::Tensor& t) { return t.pow(2).sum().sqrt().item<double>(); }

// Checks the decomposition against its input: shape, dtype, device, order, orthonormality and
// reconstruction.
void expect_valid(const torch::Tensor& c, const SymmetricEigen& e, const std::string& what) {
  SCOPED_TRACE(what);
  const auto b = c.size(0), d = c.size(1);
  ASSERT_EQ(e.values.sizes(), (std::vector<std::int64_t>{b, d}));
  ASSERT_EQ(e.vectors.sizes(), (std::vector<std::int64_t>{b, d, d}));
  EXPECT_EQ(e.values.scalar_type(), torch::kFloat64);
  EXPECT_EQ(e.vectors.scalar_type(), torch::kFloat64);
  EXPECT_EQ(e.values.device(), c.device());
  EXPECT_EQ(e.vectors.device(), c.device());
  EXPECT_TRUE(e.values.is_contiguous());
  auto w = e.values.cpu(), v = e.vectors.cpu(), cc = c.cpu();
  if (d > 1) {
    auto steps = w.narrow(1, 1, d - 1) - w.narrow(1, 0, d - 1);
    EXPECT_GE(steps.min().item<double>(), 0.0) << "eigenvalues not ascending";
  }
  auto gram = torch::matmul(v.transpose(1, 2), v) - torch::eye(d, f64());
  EXPECT_LE(max_abs(gram), kOrthonormalityTol) << "eigenvectors not orthonormal";
  // Column j is the eigenvector of values[:, j]: V diag(w) V^T scales columns.
  auto rebuilt = torch::matmul(v * w.unsqueeze(1), v.transpose(1, 2));
  for (std::int64_t i = 0; i < b; ++i) {
    const double norm = frobenius(cc[i]);
    const double err = frobenius(rebuilt[i] - cc[i]);
    EXPECT_LE(err, kReconstructionTol * norm) << "matrix " << i << " not reconstructed";
  }
  // And each column satisfies C v = lambda v on its own (catches a rows-vs-columns mix-up even
  // where reconstruction alone might be symmetric in it).
  auto residual = torch::matmul(cc, v) - v * w.unsqueeze(1);
  EXPECT_LE(max_abs(residual), kReconstructionTol * std::max(1.0, max_abs(w)));
}

// Same eigenvalues, and the same eigenvectors up to sign where the eigenvalue is well separated.
void expect_same_eigenpairs(const SymmetricEigen& a, const SymmetricEigen& b,
                            const std::string& what) {
  SCOPED_TRACE(what);
  auto wa = a.values.cpu(), wb = b.values.cpu(), va = a.vectors.cpu(), vb = b.vectors.cpu();
  const auto batch = wa.size(0), d = wa.size(1);
  std::int64_t compared = 0;
  for (std::int64_t i = 0; i < batch; ++i) {
    const double scale = std::max(max_abs(wa[i]), std::numeric_limits<double>::min());
    EXPECT_LE(max_abs(wa[i] - wb[i]), kEigenvalueTol * scale) << "eigenvalues of matrix " << i;
    const auto wi = wa[i].contiguous();
    const auto dots = (va[i] * vb[i]).sum(0).abs().contiguous();  // |v_a_j . v_b_j| per column j
    auto w = wi.accessor<double, 1>();
    auto dot = dots.accessor<double, 1>();
    for (std::int64_t j = 0; j < d; ++j) {
      double gap = std::numeric_limits<double>::infinity();
      if (j > 0) gap = std::min(gap, w[j] - w[j - 1]);
      if (j + 1 < d) gap = std::min(gap, w[j + 1] - w[j]);
      if (gap < kSeparatedGap * scale) continue;
      EXPECT_NEAR(dot[j], 1.0, kVectorDotTol) << "eigenvector " << j << " of matrix " << i;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0) << "no well-separated eigenvalue to compare eigenvectors on";
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SymmetricEigh, CpuRandomSpdBatches) {
  std::uint64_t seed = 1;
  for (std::int64_t d : {1, 2, 8, 64, 128}) {
    for (std::int64_t batch = 1; batch <= 5; ++batch) {
      auto c = random_spd(batch, d, seed++);
      expect_valid(c, symmetric_eigh(c),
                   "d " + std::to_string(d) + " batch " + std::to_string(batch));
    }
  }
}

TEST(SymmetricEigh, CpuKnownSpectrum) {
  const std::int64_t d = 16;
  auto values = torch::stack(
      {torch::linspace(-3.0, 5.0, d, f64()), torch::linspace(1.0, 16.0, d, f64()).pow(2)});
  auto c = with_spectrum(values, 7);
  auto e = symmetric_eigh(c, EigenBackend::kLapack);
  expect_valid(c, e, "known spectrum");
  EXPECT_LE(max_abs(e.values - values), kEigenvalueTol * max_abs(values));
}

TEST(SymmetricEigh, CpuBackendsAgree) {
  auto c = random_spd(3, 32, 11);
  auto lapack = symmetric_eigh(c, EigenBackend::kLapack);
  auto torch_eigh = symmetric_eigh(c, EigenBackend::kTorch);
  auto automatic = symmetric_eigh(c, EigenBackend::kAuto);
  expect_same_eigenpairs(lapack, torch_eigh, "lapack vs torch");
  expect_same_eigenpairs(lapack, automatic, "lapack vs auto");
}

TEST(SymmetricEigh, UsesTheSymmetricPart) {
  auto c = random_spd(2, 12, 3);
  torch::manual_seed(4);
  auto skew = torch::randn({2, 12, 12}, f64());
  skew = skew - skew.transpose(1, 2);
  auto e = symmetric_eigh(c + skew);
  expect_valid(c, e, "symmetric part");
  auto input = c + skew;
  auto before = input.clone();
  symmetric_eigh(input);
  EXPECT_TRUE(torch::equal(input, before)) << "the input was modified";
}

TEST(SymmetricEigh, NonContiguousInput) {
  auto c = random_spd(4, 10, 5);
  auto strided = c.transpose(0, 2).contiguous().transpose(0, 2);  // same values, other strides
  ASSERT_FALSE(strided.is_contiguous());
  expect_valid(c, symmetric_eigh(strided), "non-contiguous");
}

TEST(SymmetricEigh, EmptyBatch) {
  auto e = symmetric_eigh(torch::zeros({0, 5, 5}, f64()));
  EXPECT_EQ(e.values.sizes(), (std::vector<std::int64_t>{0, 5}));
  EXPECT_EQ(e.vectors.sizes(), (std::vector<std::int64_t>{0, 5, 5}));
}

TEST(SymmetricEigh, RejectsBadInput) {
  EXPECT_NE(error_of([] {
              symmetric_eigh(torch::zeros({2, 3, 4}, f64()));
            }).find("square"),
            std::string::npos);
  EXPECT_NE(error_of([] { symmetric_eigh(torch::eye(3, f64())); }).find("2-D"), std::string::npos);
  EXPECT_NE(error_of([] {
              symmetric_eigh(torch::zeros({1, 3, 3}, torch::kFloat32));
            }).find("float64"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              symmetric_eigh(torch::zeros({1, 0, 0}, f64()));
            }).find("non-empty"),
            std::string::npos);
  auto nan = random_spd(2, 4, 9);
  nan[1][2][3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(error_of([&] { symmetric_eigh(nan); }).find("1 NaN or infinite"), std::string::npos);
  auto inf = random_spd(1, 4, 9);
  inf[0][0][0] = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { symmetric_eigh(inf); }).find("NaN or infinite"), std::string::npos);
  EXPECT_NE(error_of([] { symmetric_eigh(torch::Tensor()); }).find("undefined"), std::string::npos);
}

TEST(SymmetricEigh, CusolverNeedsCudaTensor) {
  auto c = random_spd(1, 4, 2);
  const auto message = error_of([&] { symmetric_eigh(c, EigenBackend::kCusolver); });
  EXPECT_NE(message.find("cusolver"), std::string::npos) << message;
}

TEST(SymmetricEigh, BackendNames) {
  for (auto b : {EigenBackend::kAuto, EigenBackend::kLapack, EigenBackend::kCusolver,
                 EigenBackend::kTorch}) {
    EXPECT_EQ(parse_eigen_backend(eigen_backend_name(b)), b);
  }
  EXPECT_THROW(parse_eigen_backend("magma"), Error);
  EXPECT_EQ(resolve_eigen_backend(EigenBackend::kAuto, torch::kCPU), EigenBackend::kLapack);
  EXPECT_EQ(resolve_eigen_backend(EigenBackend::kAuto, torch::Device(torch::kCUDA, 0)),
            cusolver_eigh_built() ? EigenBackend::kCusolver : EigenBackend::kTorch);
  EXPECT_EQ(resolve_eigen_backend(EigenBackend::kTorch, torch::kCPU), EigenBackend::kTorch);
}

// GPU: cuSOLVER (and torch's CUDA eigh) against LAPACK on the same matrices.
class SymmetricEighGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (or LibTorch without CUDA)";
  }
  const torch::Device cuda{torch::kCUDA, 0};
};

TEST_F(SymmetricEighGpu, CusolverMatchesLapack) {
  if (!cusolver_eigh_built()) GTEST_SKIP() << "built without the CUDA kernels";
  std::uint64_t seed = 100;
  for (std::int64_t d : {1, 2, 8, 64, 128}) {
    for (std::int64_t batch : {1, 3, 5}) {
      const std::string what = "d " + std::to_string(d) + " batch " + std::to_string(batch);
      auto c = random_spd(batch, d, seed++);
      auto lapack = symmetric_eigh(c, EigenBackend::kLapack);
      auto gpu = symmetric_eigh(c.to(cuda), EigenBackend::kCusolver);
      expect_valid(c.to(cuda), gpu, what);
      expect_same_eigenpairs(lapack, gpu, what);
    }
  }
}

TEST_F(SymmetricEighGpu, CusolverKnownSpectrum) {
  if (!cusolver_eigh_built()) GTEST_SKIP() << "built without the CUDA kernels";
  const std::int64_t d = 64;
  auto values = torch::stack(
      {torch::linspace(-1.0, 1.0, d, f64()), torch::logspace(-6.0, 2.0, d, 10.0, f64())});
  auto c = with_spectrum(values, 21);
  auto e = symmetric_eigh(c.to(cuda), EigenBackend::kCusolver);
  expect_valid(c.to(cuda), e, "known spectrum");
  EXPECT_LE(max_abs(e.values.cpu() - values), kEigenvalueTol * max_abs(values));
  expect_same_eigenpairs(symmetric_eigh(c, EigenBackend::kLapack), e, "known spectrum vs lapack");
}

// The calibration's real shape: every KV head of every layer at head_dim 128.
TEST_F(SymmetricEighGpu, CusolverCalibrationShape) {
  if (!cusolver_eigh_built()) GTEST_SKIP() << "built without the CUDA kernels";
  auto c = random_spd(576, 128, 42);
  auto lapack = symmetric_eigh(c, EigenBackend::kLapack);
  auto gpu = symmetric_eigh(c.to(cuda), EigenBackend::kAuto);
  expect_valid(c.to(cuda), gpu, "576 x 128");
  expect_same_eigenpairs(lapack, gpu, "576 x 128 vs lapack");
}

TEST_F(SymmetricEighGpu, TorchAndLapackOnCudaTensors) {
  auto c = random_spd(4, 48, 8);
  auto reference = symmetric_eigh(c, EigenBackend::kLapack);
  auto torch_gpu = symmetric_eigh(c.to(cuda), EigenBackend::kTorch);
  expect_valid(c.to(cuda), torch_gpu, "torch on cuda");
  expect_same_eigenpairs(reference, torch_gpu, "torch on cuda vs lapack");
  auto lapack_from_gpu = symmetric_eigh(c.to(cuda), EigenBackend::kLapack);
  expect_valid(c.to(cuda), lapack_from_gpu, "lapack from cuda");
}

TEST_F(SymmetricEighGpu, RejectsNanOnGpu) {
  auto c = random_spd(1, 4, 9);
  c[0][1][1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(symmetric_eigh(c.to(cuda)), Error);
}

#ifdef OSCAR_TEST_KERNELS

kernels::Status failing_runtime_call() {
  OSCAR_CUDA_CHECK(cudaErrorInvalidValue);
  return kernels::Status::kOk;
}

kernels::Status failing_solver_call() {
  OSCAR_CUDA_CHECK(CUSOLVER_STATUS_NOT_SUPPORTED);
  return kernels::Status::kOk;
}

TEST(CudaCheck, RecordsReadableMessages) {
  kernels::clear_last_error();
  EXPECT_STREQ(kernels::last_error_message(), "");
  EXPECT_EQ(failing_runtime_call(), kernels::Status::kCudaError);
  std::string message = kernels::last_error_message();
  EXPECT_NE(message.find("cudaErrorInvalidValue"), std::string::npos) << message;
  EXPECT_NE(message.find("test_eigen.cpp"), std::string::npos) << message;
  EXPECT_EQ(failing_solver_call(), kernels::Status::kCudaError);
  message = kernels::last_error_message();
  EXPECT_NE(message.find("CUSOLVER_STATUS_NOT_SUPPORTED"), std::string::npos) << message;
  EXPECT_FALSE(OSCAR_CUDA_OK(CUBLAS_STATUS_ALLOC_FAILED));
  message = kernels::last_error_message();
  EXPECT_NE(message.find("CUBLAS_STATUS_ALLOC_FAILED"), std::string::npos) << message;
  EXPECT_TRUE(OSCAR_CUDA_OK(cudaSuccess));
}

TEST(BatchedEighKernel, RejectsBadArguments) {
  kernels::BatchedEighParams p;
  EXPECT_EQ(kernels::batched_symmetric_eigh(p), kernels::Status::kInvalidArgument);
  std::vector<double> host(16), values(4);
  p.n = 4;
  p.batch = 1;
  p.matrices = host.data();
  p.eigenvalues = values.data();
  // Host memory is refused (without a GPU the pointer query itself fails; same status).
  EXPECT_EQ(kernels::batched_symmetric_eigh(p), kernels::Status::kInvalidArgument);
  EXPECT_STRNE(kernels::last_error_message(), "");
  p.n = std::int64_t{1} << 40;
  EXPECT_EQ(kernels::batched_symmetric_eigh(p), kernels::Status::kInvalidArgument);
}

#endif  // OSCAR_TEST_KERNELS

}  // namespace
}  // namespace oscar
