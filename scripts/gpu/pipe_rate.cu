// Measures the issue rate of the packed operations the INT2 quantizer is built from (halfwise
// 16-bit integer min / max, bf16x2 min / max, bf16x2 comparisons and additions, 32-bit integer
// multiply-add, float32 min / max), alone and in pairs, to tell which of them share an execution
// pipe: two operations on different pipes issue together at up to the sum of their rates, two on
// one pipe at that pipe's rate. Each thread runs 8 independent chains; a full wave of 8-warp
// blocks per multiprocessor. Torch-free.
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a pipe_rate.cu -o pipe_rate
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "gpu_timing.cuh"

constexpr int kChains = 8, kSteps = 2048, kThreads = 256;

// One packed operation on two 32-bit registers, as its PTX instruction (no compiler rewriting).
#define PACKED_OP(name, instruction)                                 \
  __device__ __forceinline__ unsigned name(unsigned a, unsigned b) { \
    unsigned d;                                                      \
    asm(instruction " %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));      \
    return d;                                                        \
  }
PACKED_OP(umax16, "max.u16x2")
PACKED_OP(umin16, "min.u16x2")
PACKED_OP(bmax, "max.bf16x2")
PACKED_OP(bmin, "min.bf16x2")
PACKED_OP(bset_ge, "set.ge.bf16x2.bf16x2")
PACKED_OP(badd, "add.rn.bf16x2")
#undef PACKED_OP
__device__ __forceinline__ unsigned lop(unsigned a, unsigned b) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, 0x7fff7fff, 0xc0;" : "=r"(d) : "r"(a), "r"(b));  // a & b & mask
  return d;
}

// A compare-exchange of a and b (the larger to a) by a packed maximum and minimum, or an
// addition of each into the other: two dependent instructions a chain a step either way.
template <unsigned (*kMax)(unsigned, unsigned), unsigned (*kMin)(unsigned, unsigned)>
__device__ __forceinline__ void exchange(unsigned& a, unsigned& b) {
  const unsigned high = kMax(a, b);
  b = kMin(a, b);
  a = high;
}
__device__ __forceinline__ void add_both(unsigned& a, unsigned& b) {
  a = badd(a, b);
  b = badd(b, a);
}

// op 0: max/min.u16x2; 1: max/min.bf16x2; 2: one of each (alternating chains); 3: fmaxf/fminf;
// 4: set.ge.bf16x2 (and an xor); 5: add.bf16x2; 6: u16x2 min/max beside add.bf16x2; 7: integer
// multiply-add; 9: lop3.
template <int kOp>
__global__ void __launch_bounds__(kThreads) pipe_kernel(unsigned* out, unsigned seed) {
  unsigned a[kChains], b[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) {
    a[c] = seed * (threadIdx.x + 7u * c) | 0x3f803f80u;
    b[c] = (seed ^ (c * 0x9e3779b9u)) | 0x3f803f80u;
  }
#pragma unroll 1
  for (int s = 0; s < kSteps; ++s) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kOp == 0) {
        exchange<umax16, umin16>(a[c], b[c]);
      } else if constexpr (kOp == 1) {
        exchange<bmax, bmin>(a[c], b[c]);
      } else if constexpr (kOp == 2) {
        if (c % 2 == 0) {
          exchange<umax16, umin16>(a[c], b[c]);
        } else {
          exchange<bmax, bmin>(a[c], b[c]);
        }
      } else if constexpr (kOp == 3) {
        const float x = __uint_as_float(a[c]), y = __uint_as_float(b[c]);
        a[c] = __float_as_uint(fmaxf(x, y));
        b[c] = __float_as_uint(fminf(x, y));
      } else if constexpr (kOp == 4) {
        a[c] = bset_ge(a[c], b[c]) ^ b[c];
        b[c] = bset_ge(b[c], a[c]) ^ a[c];
      } else if constexpr (kOp == 5) {
        add_both(a[c], b[c]);
      } else if constexpr (kOp == 6) {
        if (c % 2 == 0) {
          exchange<umax16, umin16>(a[c], b[c]);
        } else {
          add_both(a[c], b[c]);
        }
      } else if constexpr (kOp == 7) {
        a[c] = a[c] * b[c] + 3u;
        b[c] = b[c] * a[c] + 5u;
      } else if constexpr (kOp == 9) {
        a[c] = lop(a[c], b[c]);
        b[c] = lop(b[c], a[c]);
      }
    }
  }
  unsigned r = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) r ^= a[c] ^ b[c];
  if (r == 0x12345678u) out[threadIdx.x] = r;
}

template <int kOp>
void run(const char* name, int sms, int blocks_per_sm, unsigned* out, int per_step = 2) {
  const int blocks = sms * blocks_per_sm;
  const double us = median_us([&] { pipe_kernel<kOp><<<blocks, kThreads>>>(out, 12345u); }, 10);
  CK(cudaGetLastError());
  // per_step instructions a chain a step (two, or four where an xor follows each comparison).
  const double warp_instr = per_step * 1.0 * kChains * kSteps * (kThreads / 32.0) * blocks;
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double cycles = us * 1e-6 * clock_khz * 1e3;
  std::printf("%-44s %8.1f us  %5.2f warp instructions a cycle a multiprocessor\n", name, us,
              warp_instr / cycles / sms);
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d multiprocessors (4 warp instructions a cycle is the issue limit)\n",
              prop.name, sms);
  unsigned* out = nullptr;
  CK(cudaMalloc(&out, kThreads * sizeof(unsigned)));
  run<0>("max/min.u16x2 (the top lists today)", sms, 8, out);
  run<1>("max/min.bf16x2", sms, 8, out);
  run<2>("u16x2 and bf16x2 min/max, half each", sms, 8, out);
  run<3>("max/min.f32", sms, 8, out);
  run<4>("set.ge.bf16x2 and xor", sms, 8, out, 4);
  run<5>("add.bf16x2", sms, 8, out);
  run<6>("u16x2 min/max and add.bf16x2, half each", sms, 8, out);
  run<7>("integer multiply-add", sms, 8, out);
  run<9>("lop3", sms, 8, out);
  return 0;
}
