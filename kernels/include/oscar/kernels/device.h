// CUDA device discovery and the status type shared by the project's Torch-free kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace oscar::kernels {

// Kernels return a status instead of throwing, so they can be called from any host code.
enum class Status { kOk = 0, kInvalidArgument, kUnsupported, kCudaError };

const char* status_name(Status status);

struct DeviceInfo {
  int index = -1;
  char name[256] = {};
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  std::size_t global_memory_bytes = 0;
  std::size_t l2_cache_bytes = 0;
};

// Number of usable CUDA devices; 0 when there is no driver, no device or any CUDA error (the return
// code of cudaGetDeviceCount is checked, never assumed), so GPU tests can skip cleanly.
int cuda_device_count();

// Fills `info` for device `index`; kCudaError when it cannot be queried.
Status cuda_device_info(int index, DeviceInfo* info);

// How benchmarks push their data out of L2 before a timed run. kRead streams through a buffer
// larger than L2 and leaves it full of clean lines, as the weight-reading GEMMs before a decode
// attention call do; kWrite memsets the buffer and leaves L2 full of dirty lines, which the timed
// kernel then pays to write back (the common `cache.zero_()` flush).
enum class EvictMode { kRead, kWrite };

// Enqueues the eviction on `stream` over `bytes` of device memory at `scratch` (at least 64; use
// several times the L2 size, e.g. 256 MiB on Hopper). The buffer must be 16-byte aligned.
Status evict_l2(void* scratch, std::size_t bytes, EvictMode mode, cudaStream_t stream);

}  // namespace oscar::kernels
