// Batched symmetric eigendecomposition: input checks, backend choice and the cuSOLVER bridge.
#include "oscar/eigen.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "oscar/error.h"

#ifdef OSCAR_WITH_CUDA_KERNELS
#include "oscar/kernels/cuda_check.h"
#include "oscar/kernels/eigen.h"
#endif

namespace oscar {
namespace {

std::string shape_string(const torch::Tensor& t) {
  std::string s = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += fmt::format("{}{}", i ? ", " : "", t.size(i));
  return s + "]";
}

// Checks the input and returns its symmetric part: a new contiguous tensor, never a view of the
// input, so a solver may overwrite it.
torch::Tensor symmetrized(const torch::Tensor& matrices) {
  OSCAR_CHECK(matrices.defined(), "symmetric_eigh: the input tensor is undefined");
  OSCAR_CHECK(matrices.dim() == 3,
              "symmetric_eigh: expected a batch of matrices [B, d, d], got a {}-D tensor of shape "
              "{} (add a batch dimension with unsqueeze(0) for a single matrix)",
              matrices.dim(), shape_string(matrices));
  OSCAR_CHECK(matrices.size(1) == matrices.size(2) && matrices.size(1) > 0,
              "symmetric_eigh: matrices must be square and non-empty, got shape {}",
              shape_string(matrices));
  OSCAR_CHECK(matrices.scalar_type() == torch::kFloat64,
              "symmetric_eigh: expected float64 matrices, got {} (eigenvectors of covariance "
              "matrices need double precision; convert with .to(torch::kFloat64))",
              std::string(c10::toString(matrices.scalar_type())));
  // One reduction pass instead of an elementwise isfinite mask: aminmax propagates NaN, and an
  // infinity shows up as the minimum or maximum.
  if (matrices.numel() > 0) {
    const auto [lo, hi] = torch::aminmax(matrices);
    const auto ends = torch::stack({lo, hi}).cpu();  // one device round trip for both
    const auto* range = ends.data_ptr<double>();
    if (!std::isfinite(range[0]) || !std::isfinite(range[1])) {
      const auto bad = torch::logical_not(torch::isfinite(matrices)).sum().item<std::int64_t>();
      fail("symmetric_eigh: the input has {} NaN or infinite entries", bad);
    }
  }
  // Halving before adding cannot overflow for finite input.
  return matrices.mul(0.5).add_(matrices.transpose(1, 2), 0.5).contiguous();
}

SymmetricEigen torch_eigh(const torch::Tensor& sym) {
  auto [values, vectors] = torch::linalg_eigh(sym, "L");
  return {values, vectors};
}

SymmetricEigen cusolver_eigh(const torch::Tensor& sym) {
  OSCAR_CHECK(sym.is_cuda(),
              "symmetric_eigh: the cusolver backend needs a CUDA tensor, got one on "
              "{} (use lapack or auto)",
              sym.device().str());
#ifdef OSCAR_WITH_CUDA_KERNELS
  const auto batch = sym.size(0), n = sym.size(1);
  auto a = sym;  // our own buffer (see symmetrized), overwritten with the eigenvectors
  auto w = torch::empty({batch, n}, sym.options());
  // The solver runs on the legacy default stream, which does not wait for work on torch's other
  // streams (they are created non-blocking). A device synchronization makes the copies above
  // visible whatever stream torch is using; the solver itself returns only once it is done.
  torch::cuda::synchronize(sym.device().index());
  kernels::BatchedEighParams params;
  params.n = n;
  params.batch = batch;
  params.matrices = a.data_ptr<double>();
  params.eigenvalues = w.data_ptr<double>();
  params.stream = nullptr;
  const kernels::Status status = kernels::batched_symmetric_eigh(params);
  OSCAR_CHECK(status == kernels::Status::kOk,
              "symmetric_eigh: cuSOLVER failed on {} matrices of order {} on {}: {} ({})", batch, n,
              sym.device().str(), kernels::status_name(status), kernels::last_error_message());
  // cuSOLVER writes column-major eigenvectors: read row-major, row j is eigenvector j. The
  // transposed view has columns as eigenvectors and the same strides torch's eigh returns.
  return {w, a.transpose(1, 2)};
#else
  fail(
      "symmetric_eigh: the cusolver backend is not in this build (it was configured without "
      "the CUDA kernels); use torch or auto");
#endif
}

}  // namespace

bool cusolver_eigh_built() {
#ifdef OSCAR_WITH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

EigenBackend resolve_eigen_backend(EigenBackend backend, const torch::Device& device) {
  if (backend != EigenBackend::kAuto) return backend;
  if (!device.is_cuda()) return EigenBackend::kLapack;
  return cusolver_eigh_built() ? EigenBackend::kCusolver : EigenBackend::kTorch;
}

SymmetricEigen symmetric_eigh(const torch::Tensor& matrices, EigenBackend backend) {
  torch::NoGradGuard no_grad;
  const auto sym = symmetrized(matrices);
  const auto device = sym.device();
  if (sym.size(0) == 0) {
    const auto d = sym.size(1);
    return {torch::empty({0, d}, sym.options()), torch::empty({0, d, d}, sym.options())};
  }
  switch (resolve_eigen_backend(backend, device)) {
    case EigenBackend::kLapack: {
      if (!device.is_cpu()) {
        auto r = torch_eigh(sym.cpu());
        return {r.values.to(device), r.vectors.to(device)};
      }
      return torch_eigh(sym);
    }
    case EigenBackend::kCusolver:
      return cusolver_eigh(sym);
    case EigenBackend::kTorch:
    case EigenBackend::kAuto:  // resolved above; listed so the switch covers every value
      return torch_eigh(sym);
  }
  fail("symmetric_eigh: unknown backend {}", static_cast<int>(backend));
}

const char* eigen_backend_name(EigenBackend backend) {
  switch (backend) {
    case EigenBackend::kAuto:
      return "auto";
    case EigenBackend::kLapack:
      return "lapack";
    case EigenBackend::kCusolver:
      return "cusolver";
    case EigenBackend::kTorch:
      return "torch";
  }
  return "unknown";
}

EigenBackend parse_eigen_backend(const std::string& name) {
  for (auto b : {EigenBackend::kAuto, EigenBackend::kLapack, EigenBackend::kCusolver,
                 EigenBackend::kTorch}) {
    if (name == eigen_backend_name(b)) return b;
  }
  fail("unknown eigen backend '{}' (expected auto, lapack, cusolver or torch)", name);
}

}  // namespace oscar
