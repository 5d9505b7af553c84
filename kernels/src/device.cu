// CUDA device discovery with checked runtime calls, and the L2 eviction benchmarks time with.
#include <cuda_runtime.h>

#include <cstdint>
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

namespace {

// Reads the buffer in 16-byte words (grid-stride); the xor of what was read is stored only when it
// equals a value the data never produces in practice, which keeps the loads without writing.
__global__ void read_buffer_kernel(const uint4* words, std::size_t count, unsigned* sink) {
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const uint4 w = words[i];
    acc ^= w.x ^ w.y ^ w.z ^ w.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

Status evict_l2(void* scratch, std::size_t bytes, EvictMode mode, cudaStream_t stream) {
  if (scratch == nullptr || bytes < 64) return Status::kInvalidArgument;
  if (mode == EvictMode::kWrite) {
    static unsigned fill = 0;
    return cudaMemsetAsync(scratch, static_cast<int>(++fill & 0xffu), bytes, stream) == cudaSuccess
               ? Status::kOk
               : Status::kCudaError;
  }
  const std::size_t words = (bytes - 16) / sizeof(uint4);
  auto* base = static_cast<unsigned char*>(scratch);
  read_buffer_kernel<<<1024, 512, 0, stream>>>(reinterpret_cast<const uint4*>(base + 16), words,
                                               reinterpret_cast<unsigned*>(base));
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace oscar::kernels
