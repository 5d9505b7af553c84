// Batched symmetric eigendecomposition through cusolverDnXsyevBatched (64-bit API, fp64).
#include "oscar/kernels/eigen.h"

#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "oscar/kernels/cuda_check.h"

namespace oscar::kernels {

#if CUDART_VERSION >= 12060

namespace {

// cuSOLVER handles are expensive to create (they allocate device state) and are bound to the
// device that was current at creation, so each thread keeps one per device and reuses it. A handle
// must not be used by two threads at once; thread-local ownership makes that impossible.
class SolverCache {
 public:
  SolverCache() = default;
  SolverCache(const SolverCache&) = delete;
  SolverCache& operator=(const SolverCache&) = delete;

  ~SolverCache() {
    // Destruction is best effort: at process exit the driver may already be shutting down and
    // nothing useful could be done with an error here.
    for (std::size_t device = 0; device < entries_.size(); ++device) {
      Entry& e = entries_[device];
      if (e.handle == nullptr) continue;
      cudaSetDevice(static_cast<int>(device));
      if (e.params != nullptr) cusolverDnDestroyParams(e.params);
      cusolverDnDestroy(e.handle);
    }
  }

  // Handle and params for `device`, which must be the current device.
  Status get(int device, cusolverDnHandle_t* handle, cusolverDnParams_t* params) {
    if (static_cast<std::size_t>(device) >= entries_.size()) entries_.resize(device + 1);
    Entry& e = entries_[device];
    if (e.handle == nullptr) {
      cusolverDnHandle_t h = nullptr;
      OSCAR_CUDA_CHECK(cusolverDnCreate(&h));
      cusolverDnParams_t p = nullptr;
      if (!OSCAR_CUDA_OK(cusolverDnCreateParams(&p))) {
        cusolverDnDestroy(h);
        return Status::kCudaError;
      }
      e.handle = h;
      e.params = p;
    }
    *handle = e.handle;
    *params = e.params;
    return Status::kOk;
  }

 private:
  struct Entry {
    cusolverDnHandle_t handle = nullptr;
    cusolverDnParams_t params = nullptr;
  };
  std::vector<Entry> entries_;
};

// Makes `device` current for the object's lifetime and then restores the caller's device, so the
// kernel can be called with buffers on any GPU without disturbing the caller's state.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != current_) cudaSetDevice(previous_);
  }

  Status set(int device) {
    OSCAR_CUDA_CHECK(cudaGetDevice(&previous_));
    current_ = previous_;
    if (device != previous_) OSCAR_CUDA_CHECK(cudaSetDevice(device));
    current_ = device;
    return Status::kOk;
  }

 private:
  int previous_ = -1, current_ = -1;
};

// A stream-ordered device allocation, released on the same stream when it goes out of scope.
class StreamBuffer {
 public:
  explicit StreamBuffer(cudaStream_t stream) : stream_(stream) {}
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() {
    // Only reached with memory still held on an error path, where the first failure's message is
    // the one worth keeping; a failing free here is not recorded.
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
  }

  Status allocate(std::size_t bytes) {
    OSCAR_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream_));
    return Status::kOk;
  }
  Status release() {
    void* p = ptr_;
    ptr_ = nullptr;
    if (p != nullptr) OSCAR_CUDA_CHECK(cudaFreeAsync(p, stream_));
    return Status::kOk;
  }
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

// The device a buffer lives on, or -1 (message recorded) when it is not device-accessible memory.
int buffer_device(const void* ptr, const char* name) {
  cudaPointerAttributes attributes{};
  if (!OSCAR_CUDA_OK(cudaPointerGetAttributes(&attributes, ptr))) return -1;
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    set_last_error("batched_symmetric_eigh: %s is not device memory", name);
    return -1;
  }
  return attributes.device;
}

// cusolverDnXsyevBatched limits n * lda * batch to INT32_MAX, and a batch past the grid's 65535
// blocks has been seen refused, so larger batches are solved in chunks within both limits.
constexpr std::int64_t kMaxElementsPerCall = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxBatchPerCall = 32768;

constexpr std::size_t round_up(std::size_t bytes, std::size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace

Status batched_symmetric_eigh(const BatchedEighParams& p) {
  if (p.n < 1 || p.batch < 1 || p.matrices == nullptr || p.eigenvalues == nullptr) {
    set_last_error(
        "batched_symmetric_eigh: invalid arguments (n %lld, batch %lld, matrices %p, "
        "eigenvalues %p)",
        static_cast<long long>(p.n), static_cast<long long>(p.batch),
        static_cast<void*>(p.matrices), static_cast<void*>(p.eigenvalues));
    return Status::kInvalidArgument;
  }
  // n * n * batch doubles must be addressable without overflow.
  const std::int64_t max_elements = std::numeric_limits<std::int64_t>::max() / 8;
  if (p.n > max_elements / p.n || p.n * p.n > max_elements / p.batch) {
    set_last_error("batched_symmetric_eigh: %lld matrices of order %lld are too many",
                   static_cast<long long>(p.batch), static_cast<long long>(p.n));
    return Status::kInvalidArgument;
  }
  if (p.n * p.n > kMaxElementsPerCall) {
    set_last_error(
        "batched_symmetric_eigh: order %lld is too large for cusolverDnXsyevBatched "
        "(n * n must stay below 2^31)",
        static_cast<long long>(p.n));
    return Status::kUnsupported;
  }
  const int device = buffer_device(p.matrices, "matrices");
  if (device < 0) return Status::kInvalidArgument;
  const int values_device = buffer_device(p.eigenvalues, "eigenvalues");
  if (values_device < 0) return Status::kInvalidArgument;
  if (values_device != device) {
    set_last_error("batched_symmetric_eigh: matrices are on device %d but eigenvalues on device %d",
                   device, values_device);
    return Status::kInvalidArgument;
  }

  DeviceGuard guard;
  if (Status s = guard.set(device); s != Status::kOk) return s;
  thread_local SolverCache cache;
  cusolverDnHandle_t handle = nullptr;
  cusolverDnParams_t params = nullptr;
  if (Status s = cache.get(device, &handle, &params); s != Status::kOk) return s;
  OSCAR_CUDA_CHECK(cusolverDnSetStream(handle, p.stream));

  const cusolverEigMode_t jobz = CUSOLVER_EIG_MODE_VECTOR;
  // Row-major symmetric input read column-major is the same matrix, so either triangle works.
  const cublasFillMode_t uplo = CUBLAS_FILL_MODE_LOWER;
  const std::int64_t chunk =
      std::min({p.batch, kMaxBatchPerCall, kMaxElementsPerCall / (p.n * p.n)});
  std::size_t device_bytes = 0, host_bytes = 0;
  OSCAR_CUDA_CHECK(cusolverDnXsyevBatched_bufferSize(
      handle, params, jobz, uplo, p.n, CUDA_R_64F, p.matrices, p.n, CUDA_R_64F, p.eigenvalues,
      CUDA_R_64F, &device_bytes, &host_bytes, chunk));

  // One allocation holds the device workspace (reused by every chunk) followed by the per-matrix
  // info flags of the whole batch.
  const std::size_t info_offset = round_up(device_bytes, 256);
  StreamBuffer scratch(p.stream);
  if (Status s = scratch.allocate(info_offset + sizeof(int) * static_cast<std::size_t>(p.batch));
      s != Status::kOk) {
    return s;
  }
  int* info = reinterpret_cast<int*>(scratch.data() + info_offset);
  std::vector<unsigned char> host_workspace(host_bytes);
  std::vector<int> host_info(static_cast<std::size_t>(p.batch), 0);

  const Status launched = [&]() -> Status {
    for (std::int64_t start = 0; start < p.batch; start += chunk) {
      const std::int64_t count = std::min(chunk, p.batch - start);
      OSCAR_CUDA_CHECK(cusolverDnXsyevBatched(
          handle, params, jobz, uplo, p.n, CUDA_R_64F, p.matrices + start * p.n * p.n, p.n,
          CUDA_R_64F, p.eigenvalues + start * p.n, CUDA_R_64F,
          device_bytes > 0 ? scratch.data() : nullptr, device_bytes,
          host_bytes > 0 ? host_workspace.data() : nullptr, host_bytes, info + start, count));
    }
    OSCAR_CUDA_CHECK(cudaMemcpyAsync(host_info.data(), info, sizeof(int) * host_info.size(),
                                     cudaMemcpyDeviceToHost, p.stream));
    return scratch.release();
  }();
  // Wait even after a failure: queued work may still use the host workspace and host_info, which
  // die with this frame. On the failure path the first message is the one kept.
  if (launched != Status::kOk) {
    cudaStreamSynchronize(p.stream);
    return launched;
  }
  OSCAR_CUDA_CHECK(cudaStreamSynchronize(p.stream));

  std::int64_t failed = 0, first = -1;
  for (std::size_t b = 0; b < host_info.size(); ++b) {
    if (host_info[b] == 0) continue;
    if (failed++ == 0) first = static_cast<std::int64_t>(b);
  }
  if (failed > 0) {
    const int code = host_info[static_cast<std::size_t>(first)];
    if (code < 0) {
      set_last_error("cusolverDnXsyevBatched rejected parameter %d (info %d)", -code, code);
    } else {
      set_last_error(
          "cusolverDnXsyevBatched: %lld of %lld matrices did not converge (first: "
          "matrix %lld, %d off-diagonal elements left)",
          static_cast<long long>(failed), static_cast<long long>(p.batch),
          static_cast<long long>(first), code);
    }
    return Status::kCudaError;
  }
  return Status::kOk;
}

#else  // CUDART_VERSION < 12060

Status batched_symmetric_eigh(const BatchedEighParams&) {
  set_last_error(
      "batched_symmetric_eigh needs CUDA 12.6 or newer (cusolverDnXsyevBatched); this "
      "build used CUDA %d.%d",
      CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
  return Status::kUnsupported;
}

#endif

}  // namespace oscar::kernels
