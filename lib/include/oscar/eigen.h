// Batched symmetric eigendecomposition in fp64: LAPACK (via LibTorch), cuSOLVER or torch's eigh.
#pragma once

#include <torch/torch.h>

#include <string>

namespace oscar {

enum class EigenBackend {
  kAuto,      // CPU tensors: LAPACK; CUDA tensors: cuSOLVER when built in, else torch
  kLapack,    // LAPACK on the host through LibTorch (CUDA inputs are copied over and back)
  kCusolver,  // cusolverDnXsyevBatched (CUDA tensors only; needs a build with the CUDA kernels)
  kTorch,     // torch::linalg::eigh on the tensor's own device
};

// Eigenpairs with torch.linalg.eigh's convention: values [B, d] ascending per matrix, vectors
// [B, d, d] with column j a unit eigenvector of values[:, j]. fp64, on the input's device. Like
// torch's, vectors has column-major strides (each matrix is the transpose of a contiguous one);
// call .contiguous() where row-major memory is needed. Each eigenvector's sign is whatever the
// backend produced, so compare backends through |v_a . v_b| or the reconstruction, never
// element-wise.
struct SymmetricEigen {
  torch::Tensor values;
  torch::Tensor vectors;
};

// Eigendecomposition of a batch of symmetric matrices `matrices` [B, d, d], fp64, finite (B may be
// 0). The input is symmetrized as (C + C^T) / 2 first, so only its symmetric part matters and the
// backends all see the same matrix. Throws oscar::Error naming the problem for a wrong shape,
// dtype or non-finite entries, for a backend that cannot run on this device or build, and when a
// solver fails to converge.
SymmetricEigen symmetric_eigh(const torch::Tensor& matrices,
                              EigenBackend backend = EigenBackend::kAuto);

// The backend kAuto picks for a tensor on `device` (any other backend is returned as is).
EigenBackend resolve_eigen_backend(EigenBackend backend, const torch::Device& device);

// Whether this build includes the cuSOLVER backend (CUDA kernels compiled in). A GPU is still
// needed to use it.
bool cusolver_eigh_built();

const char* eigen_backend_name(EigenBackend backend);  // "auto", "lapack", "cusolver", "torch"

// Inverse of eigen_backend_name; throws oscar::Error for any other name.
EigenBackend parse_eigen_backend(const std::string& name);

}  // namespace oscar
