// Rate of the warpgroup MMA in the forms the d 128 store can use: m64n128k16, bf16 operands, f32
// accumulators, B (k16 x n128) from shared memory in 8 x 8 core matrices without swizzle (R'^T's
// layout in store_kv_tc_kernel), A (m64 x k16) either from registers (as that kernel has it) or
// from shared memory in the same core-matrix layout (as the d 256 store has it). Each warpgroup
// issues batches of 16 (8 k-steps x 2 terms: one 64-row job's product), commits and waits, as the
// store does, with 1, 2 or 4 warpgroups a block and one block a multiprocessor. Prints TFLOPS over
// the card and cycles per m64n128k16 per multiprocessor (all warpgroups together; the dense bf16
// peak is 64 on an H100 SXM, 989 TFLOPS at 1.83 GHz). Torch-free; Hopper only.
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a wgmma_rate.cu
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "gpu_timing.cuh"

constexpr int kKSteps = 8;                   // d 128: k-steps of 16
constexpr int kTileBytes = 64 * 128 * 2;     // a 64 x 128 bf16 operand (A of a warpgroup, or B)
constexpr unsigned kCoreBytes = 128;         // core matrices adjacent in K
constexpr unsigned kGroupStride = 16 * 128;  // core matrices adjacent in M (A) or N (B)

__device__ __forceinline__ std::uint64_t descriptor(const void* smem) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  return static_cast<std::uint64_t>((address & 0x3ffff) >> 4) |
         static_cast<std::uint64_t>(kCoreBytes >> 4) << 16 |
         static_cast<std::uint64_t>(kGroupStride >> 4) << 32;
}

#define WGMMA_D                                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define WGMMA_D_OPERANDS(d)                                                                       \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// D += A x B, A from registers (each warp its 16 rows in the mma.m16n8k16 A layout).
__device__ __forceinline__ void mma_rs(float (&d)[64], const std::uint32_t (&a)[4],
                                       std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_D
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"
      : WGMMA_D_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
// D += A x B, both from shared memory.
__device__ __forceinline__ void mma_ss(float (&d)[64], std::uint64_t a, std::uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_D
      ", %64, %65, p, 1, 1, 0, 0;\n}"
      : WGMMA_D_OPERANDS(d)
      : "l"(a), "l"(b), "r"(1));
}

template <bool kSharedA, bool kDrain>
__global__ void __launch_bounds__(512, 1) wgmma_rate(int batches, float* out, long long* cycles) {
  extern __shared__ __align__(128) unsigned char smem[];
  // Small bf16 values (1/64) everywhere: B's two terms, then one A tile per warpgroup.
  for (int i = static_cast<int>(threadIdx.x); i < (2 + 4) * kTileBytes / 4;
       i += static_cast<int>(blockDim.x)) {
    reinterpret_cast<unsigned*>(smem)[i] = 0x3c803c80u;
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int group = static_cast<int>(threadIdx.x) / 128;
  const std::uint64_t b_hi = descriptor(smem), b_lo = descriptor(smem + kTileBytes);
  const std::uint64_t a_desc = descriptor(smem + (2 + group) * kTileBytes);
  std::uint32_t a[kKSteps][4];
  for (int ks = 0; ks < kKSteps; ++ks) {
    // Distinct registers (equal constants would share one, which serializes the pipeline).
    for (int r = 0; r < 4; ++r) a[ks][r] = 0x3c803c80u | ((threadIdx.x + 4 * ks + r) & 7);
  }
  float d[64];
  for (int e = 0; e < 64; ++e) d[e] = 0.0f;
  const long long start = clock64();
  for (int batch = 0; batch < batches; ++batch) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      // k-step ks starts 2 core matrices (256 bytes, 16 descriptor units) further along K.
      if constexpr (kSharedA) {
        mma_ss(d, a_desc + 16 * ks, b_hi + 16 * ks);
        mma_ss(d, a_desc + 16 * ks, b_lo + 16 * ks);
      } else {
        mma_rs(d, a[ks], b_hi + 16 * ks);
        mma_rs(d, a[ks], b_lo + 16 * ks);
      }
    }
    // kDrain: the pipe drains after every batch (as the store waits for a job's product);
    // otherwise the next batch is issued with this one in flight.
    if constexpr (kDrain) {
      asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;" ::
                       : "memory");
    } else {
      asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 1;" ::
                       : "memory");
    }
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  const long long stop = clock64();
  float sum = 0.0f;
  for (int e = 0; e < 64; ++e) sum += d[e];
  if (sum == 12345.0f) out[threadIdx.x] = sum;  // keeps the products
  if (threadIdx.x == 0 && blockIdx.x == 0) *cycles = stop - start;
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d multiprocessors\n", prop.name, sms);
  float* out = nullptr;
  long long* cycles = nullptr;
  CK(cudaMalloc(&out, 512 * sizeof(float)));
  CK(cudaMalloc(&cycles, sizeof(long long)));
  const int bytes = (2 + 4) * kTileBytes;
  const int batches = 4000;
  const auto run = [&](auto kernel, const char* a_from, const char* waits) {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    for (const int groups : {1, 2, 4}) {
      const double us =
          median_us([&] { kernel<<<sms, 128 * groups, bytes>>>(batches, out, cycles); }, 5);
      CK(cudaGetLastError());
      long long c = 0;
      CK(cudaMemcpy(&c, cycles, sizeof(c), cudaMemcpyDeviceToHost));
      const double mmas = 16.0 * batches * groups;  // per multiprocessor
      const double flops = 2.0 * 64 * 128 * 16 * mmas * sms;
      std::printf(
          "A from %-9s %-26s %d warpgroup(s) a block: %8.1f us, %6.1f TFLOPS, %5.1f cycles per "
          "m64n128k16 per multiprocessor\n",
          a_from, waits, groups, us, flops / (us * 1e6), c / mmas);
    }
  };
  run(wgmma_rate<false, true>, "registers", "batches of 16, drained");
  run(wgmma_rate<false, false>, "registers", "batches of 16, one in flight");
  run(wgmma_rate<true, true>, "shared", "batches of 16, drained");
  run(wgmma_rate<true, false>, "shared", "batches of 16, one in flight");
  return 0;
}
