// Batched symmetric eigendecomposition in double precision on the GPU (cuSOLVER).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "oscar/kernels/device.h"

namespace oscar::kernels {

struct BatchedEighParams {
  std::int64_t n = 0;      // matrix order
  std::int64_t batch = 0;  // number of matrices
  // Device memory, `batch` contiguous n x n symmetric matrices (either triangle may be read, so
  // they must really be symmetric). Overwritten: on return, read row-major, row j of matrix b is
  // the unit eigenvector of eigenvalue j of that matrix (cuSOLVER's column-major eigenvectors).
  double* matrices = nullptr;
  // Device memory, [batch, n]: written with each matrix's eigenvalues in ascending order.
  double* eigenvalues = nullptr;
  cudaStream_t stream = nullptr;  // work is ordered on this stream
};

// Eigenvalues and eigenvectors of every matrix with cusolverDnXsyevBatched on the device that owns
// `matrices` (the current device is restored afterwards). Synchronous: it returns once the work on
// `stream` is done, because the per-matrix convergence flags are read back and checked; a matrix
// that did not converge makes it return kCudaError naming the matrix. Large batches are solved in
// chunks within cuSOLVER's size limits.
// kInvalidArgument: n or batch < 1, null or host pointers, or buffers on different devices.
// kUnsupported: n * n of 2^31 or more, or built against a CUDA toolkit older than 12.6 (no batched
// 64-bit syev).
// On any failure last_error_message() (cuda_check.h) says what went wrong.
Status batched_symmetric_eigh(const BatchedEighParams& params);

}  // namespace oscar::kernels
