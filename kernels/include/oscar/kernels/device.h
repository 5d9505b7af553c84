// CUDA device discovery and the status type shared by the project's Torch-free kernels.
#pragma once

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

}  // namespace oscar::kernels
