// Timing helpers shared by the Torch-free GPU driver programs in scripts/gpu: a CUDA check that
// exits, the median of event-timed runs, and the card's copy bandwidth.
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
