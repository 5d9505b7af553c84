// Timing helpers shared by the Torch-free GPU driver programs in scripts/gpu: a CUDA check that
// exits, the median of event-timed runs, the card's copy bandwidth, and a folded read of 16-byte
// words (the read that empties L2 before a timed run, and a stream to time).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Median over `iters` runs of f (launches on the default stream), in microseconds; `before`
// runs ahead of each timed run, outside the events (e.g. a kernel that empties L2).
template <class F, class B>
double median_us(F f, int iters, B before) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    before();
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0f);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
template <class F>
double median_us(F f, int iters) {
  return median_us(f, iters, [] {});
}

// Copy bandwidth of the card in GB/s: `bytes` device to device (256 MiB unless given; oscar-bench
// copies 2 GiB), read + write, measured each run.
inline double copy_bandwidth_gbs(std::size_t bytes = std::size_t{256} << 20) {
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  const double t = median_us([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); }, 20);
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * bytes / (t * 1e3);
}

// Reads data[first], data[first + step], ... below n as 16-byte streaming loads, 8 in flight a
// thread, folded into one word so that the loads are kept.
__device__ inline unsigned fold_read(const uint4* data, long n, long first, long step) {
  unsigned acc = 0;
  long i = first;
  for (; i + 7 * step < n; i += 8 * step) {
    uint4 x[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) x[u] = __ldcs(data + i + u * step);
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= x[u].x + x[u].y + x[u].z + x[u].w;
  }
  for (; i < n; i += step) acc ^= __ldcs(data + i).x;
  return acc;
}

// A grid-stride read of n 16-byte words by 512-thread blocks.
static __global__ void __launch_bounds__(512)
    linear_read(const uint4* data, long n, unsigned* sink) {
  const unsigned acc =
      fold_read(data, n, long(blockIdx.x) * blockDim.x + threadIdx.x, long(gridDim.x) * blockDim.x);
  if (acc == 0x12345678u) sink[0] = acc;
}
