// Reads and writes what store_kv does at d 128, with no product and no quantization: each warp
// takes 32-token tiles of one (K or V, KV head) into shared memory by cp.async (one tile in
// flight), a lane reads its row and writes 36 bytes (32 of codes, 4 of scale and zero) into an
// INT2-sized paged pool. Times it with 8 KV heads (rows 2 KB apart) and with one (contiguous
// rows) over the same bytes, against the card's copy bandwidth. Torch-free.
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a store_pattern.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gpu_timing.cuh"

constexpr int kWarps = 16, kTokens = 32, kChunks = 16, kPitch = kChunks + 1;  // 16-byte chunks

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__global__ void __launch_bounds__(kWarps * 32, 1)
    store_pattern(const uint4* __restrict__ k, const uint4* __restrict__ v, uint4* k_codes,
                  uint4* v_codes, unsigned* k_scale_zero, unsigned* v_scale_zero, int tokens,
                  int hkv) {
  extern __shared__ uint4 smem[];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  uint4* tile_rows = smem + warp * kTokens * kPitch;
  const int head = static_cast<int>(blockIdx.y);
  const bool is_key = blockIdx.z == 0;
  const uint4* src = is_key ? k : v;
  uint4* codes = is_key ? k_codes : v_codes;
  unsigned* scale_zero = is_key ? k_scale_zero : v_scale_zero;
  const long tiles = tokens / kTokens;
  const long step = static_cast<long>(gridDim.x) * kWarps;
  for (long tile = static_cast<long>(warp) * gridDim.x + blockIdx.x; tile < tiles; tile += step) {
#pragma unroll
    for (int u = 0; u < kTokens * kChunks / 32; ++u) {
      const int idx = lane + 32 * u, t = idx / kChunks, c = idx % kChunks;
      const uint4* g = src + ((tile * kTokens + t) * hkv + head) * kChunks + c;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                       shared_address(tile_rows + t * kPitch + c)),
                   "l"(g));
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
    __syncwarp();
    uint4 acc = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint4 x = tile_rows[lane * kPitch + c];
      acc.x ^= x.x;
      acc.y += x.y;
      acc.z ^= x.z;
      acc.w += x.w;
    }
    __syncwarp();
    const long token = tile * kTokens + lane, page = token / 16, offset = token % 16;
    const long row = (page * hkv + head) * 16 + offset;
    codes[row * 2] = acc;
    codes[row * 2 + 1] = make_uint4(acc.y, acc.x, acc.w, acc.z);
    scale_zero[row] = acc.x + acc.w;
  }
}

int main() {
  const long rows = 32768L * 8;  // rows of K (and of V): 32768 tokens x 8 heads, or 262144 x 1
  uint4 *k = nullptr, *v = nullptr, *k_codes = nullptr, *v_codes = nullptr;
  unsigned *k_scale_zero = nullptr, *v_scale_zero = nullptr;
  CK(cudaMalloc(&k, rows * 256));
  CK(cudaMalloc(&v, rows * 256));
  CK(cudaMalloc(&k_codes, rows * 32));
  CK(cudaMalloc(&v_codes, rows * 32));
  CK(cudaMalloc(&k_scale_zero, rows * 4));
  CK(cudaMalloc(&v_scale_zero, rows * 4));
  CK(cudaMemset(k, 1, rows * 256));
  CK(cudaMemset(v, 2, rows * 256));
  const double copy_gbs = copy_bandwidth_gbs();
  const double bytes = 2.0 * rows * (256 + 36);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("copy %.0f GB/s; the store's bytes take %.1f us at copy speed\n", copy_gbs,
              bytes / copy_gbs / 1e3);
  const size_t smem = sizeof(uint4) * kWarps * kTokens * kPitch;
  CK(cudaFuncSetAttribute(store_pattern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(smem)));
  for (const int hkv : {8, 1}) {
    const int tokens = static_cast<int>(rows / hkv);
    // As store_kv's tensor-core path: one wave of 16-warp blocks over (KV head, K or V).
    const dim3 grid(static_cast<unsigned>(std::max(1, sms / (2 * hkv))), hkv, 2);
    const double t = median_us(
        [&] {
          store_pattern<<<grid, kWarps * 32, smem>>>(k, v, k_codes, v_codes, k_scale_zero,
                                                     v_scale_zero, tokens, hkv);
        },
        50);
    CK(cudaGetLastError());
    std::printf("%d KV heads x %d tokens, %u blocks: %.1f us, %.0f GB/s (%.0f%% of copy)\n", hkv,
                tokens, grid.x * grid.y * grid.z, t, bytes / (t * 1e3),
                100.0 * bytes / (t * 1e3) / copy_gbs);
  }
  return 0;
}
