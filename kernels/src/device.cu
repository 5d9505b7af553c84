// CUDA device discovery with checked runtime calls.
#include <cuda_runtime.h>

#include <cstring>

#include "oscar/kernels/device.h"

namespace oscar::kernels {

const char* status_name(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kUnsupported:
      return "unsupported";
    case Status::kCudaError:
      return "CUDA error";
  }
  return "unknown";
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return count;
}

Status cuda_device_info(int index, DeviceInfo* info) {
  if (info == nullptr || index < 0 || index >= cuda_device_count()) return Status::kInvalidArgument;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return Status::kCudaError;
  info->index = index;
  std::strncpy(info->name, prop.name, sizeof(info->name) - 1);
  info->compute_major = prop.major;
  info->compute_minor = prop.minor;
  info->multiprocessors = prop.multiProcessorCount;
  info->global_memory_bytes = prop.totalGlobalMem;
  info->l2_cache_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  return Status::kOk;
}

}  // namespace oscar::kernels
