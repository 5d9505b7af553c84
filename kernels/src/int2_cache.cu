// CUDA kernels of the paged mixed-precision KV cache: store (rotate, quantize, pack), demotion and
// split-KV decode attention with a log-sum-exp merge.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "decode_plan.h"
#include "oscar/kernels/cuda_check.h"
#include "oscar/kernels/int2_cache.h"

// Ablations of the tensor-core stores, for timing their parts (scripts/gpu/store-ablation): each
// drops one part of the work and so stores wrong values; all are off in every normal build.
//   OSCAR_STORE_ABLATE_PRODUCT   no warpgroup MMA (the accumulators come from the row itself);
//   OSCAR_STORE_ABLATE_LOW_TERM  the product with R'_hi only (half the tensor work);
//   OSCAR_STORE_ABLATE_ONE_K_STEP  the product's first k-step only (an eighth of the tensor work
//                                at d 128, the warpgroup still meeting at every product);
//   OSCAR_STORE_ABLATE_QUANTIZE  no clip selection, range, thresholds or codes (rows still read);
//   OSCAR_STORE256_ABLATE_STREAM  d 256 only: the product from the ring's first chunks of R' (none
//                                streamed from L2 after them).
// The d 256 store takes PRODUCT, LOW_TERM and QUANTIZE too; without the product its registers are
// allocated differently (1.4 KB of spills a thread), so that build times an artefact. QUANTIZE
// also drops the quantization of store_kv_rows_kernel's d 256 pairs (shared code).
#ifndef OSCAR_STORE_ABLATE_PRODUCT
#define OSCAR_STORE_ABLATE_PRODUCT 0
#endif
#ifndef OSCAR_STORE_ABLATE_LOW_TERM
#define OSCAR_STORE_ABLATE_LOW_TERM 0
#endif
#ifndef OSCAR_STORE_ABLATE_ONE_K_STEP
#define OSCAR_STORE_ABLATE_ONE_K_STEP 0
#endif
#ifndef OSCAR_STORE_ABLATE_QUANTIZE
#define OSCAR_STORE_ABLATE_QUANTIZE 0
#endif
#ifndef OSCAR_STORE256_ABLATE_STREAM
#define OSCAR_STORE256_ABLATE_STREAM 0
#endif
// Ablations of the tensor-core decode, for timing its parts (scripts/gpu/decode-variants): each
// drops one part of the work and so decodes wrong values; all are off in every normal build.
//   OSCAR_DECODE_ABLATE_TILES    the tile loop only copies (no scores, softmax or value product);
//   OSCAR_DECODE_ABLATE_VALUES   no value product (scores and softmax computed);
//   OSCAR_DECODE_ABLATE_MERGE    no merge of the splits (no count, no wait, no output);
//   OSCAR_DECODE_ABLATE_WINDOWS  no BF16 windows' grid where it would merge (batch 1): the
//                                tensor-core blocks count among themselves and the last merges
//                                (what one grid merged by count would cost).
#ifndef OSCAR_DECODE_ABLATE_TILES
#define OSCAR_DECODE_ABLATE_TILES 0
#endif
#ifndef OSCAR_DECODE_ABLATE_VALUES
#define OSCAR_DECODE_ABLATE_VALUES 0
#endif
#ifndef OSCAR_DECODE_ABLATE_MERGE
#define OSCAR_DECODE_ABLATE_MERGE 0
#endif
#ifndef OSCAR_DECODE_ABLATE_WINDOWS
#define OSCAR_DECODE_ABLATE_WINDOWS 0
#endif
// The d 256 store's rows quantized by pairs of lanes (int2q::store_row_pair), on in every normal
// build; 0 builds the row per thread (int2q::store_row_thread) for comparisons, with
// OSCAR_STORE256_WARPS=8 (32 rows a warp).
#ifndef OSCAR_STORE256_PAIR_ROWS
#define OSCAR_STORE256_PAIR_ROWS 1
#endif
// store_kv_rows_kernel's rows (sides that arrive rotated) quantized by pairs of lanes
// (int2q::store_row_pair) at d 256 and 128, on in every normal build; 0 builds a row per thread
// (int2q::store_row_thread) for comparisons. At d 128 the pairs pay through occupancy: at 80
// registers three blocks a multiprocessor fit, where a row per thread (128) fits two; with two
// blocks each the two forms ran level.
#ifndef OSCAR_STORE_ROWS256_PAIRS
#define OSCAR_STORE_ROWS256_PAIRS 1
#endif
#ifndef OSCAR_STORE_ROWS128_PAIRS
#define OSCAR_STORE_ROWS128_PAIRS 1
#endif
// The warpgroups' turns at the tensor pipe (store_kv_tc_kernel), on in every normal build; 0 lets
// them issue their products at will, as before (timed by scripts/gpu/store-ablation).
#ifndef OSCAR_STORE_TENSOR_TURNS
#define OSCAR_STORE_TENSOR_TURNS 1
#endif
// A timeline of the d 64 / 128 store's steps (OSCAR_STORE_TRACE=1, timing studies only:
// scripts/gpu/store_ablation.cu prints it): the first warp of each warpgroup of the first blocks
// of KV head 0 records clock64() at fixed points of each step.
#ifndef OSCAR_STORE_TRACE
#define OSCAR_STORE_TRACE 0
#endif
// A timeline of the decode kernels (OSCAR_DECODE_TRACE=1, timing studies only: oscar-bench built
// with the same switch prints it after each INT2 point): %globaltimer at fixed points of every
// block of the tensor-core kernel (and at each warp's loop end) and of the BF16 windows' kernel.
#ifndef OSCAR_DECODE_TRACE
#define OSCAR_DECODE_TRACE 0
#endif
#if OSCAR_STORE_TRACE || OSCAR_DECODE_TRACE
#include <cstdio>
#include <string>
#include <vector>
#endif

namespace oscar::kernels {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

#if OSCAR_STORE_TRACE
constexpr int kTraceBlocks = 8, kTraceSteps = 16, kTracePoints = 10;
constexpr int kTraceGroups = 4;  // warpgroups of a block (kStoreTcWarps / 4)
__device__ long long g_store_trace[2 * kTraceBlocks * kTraceGroups * kTraceSteps * kTracePoints];
#define OSCAR_TRACE(point)                                                               \
  do {                                                                                   \
    if (blockIdx.x < kTraceBlocks && blockIdx.y == 0 && (threadIdx.x & 127) == 0 &&      \
        step < kTraceSteps)                                                              \
      g_store_trace[(((blockIdx.z * kTraceBlocks + blockIdx.x) * kTraceGroups + group) * \
                         kTraceSteps +                                                   \
                     step) *                                                             \
                        kTracePoints +                                                   \
                    (point)] = clock64();                                                \
  } while (0)
#else
#define OSCAR_TRACE(point) \
  do {                     \
  } while (0)
#endif

#if OSCAR_DECODE_TRACE
// Points 0-6: the kernel's own (decode_trace_report names them); 7 and 8: the merging block's
// count done and its split weights in shared memory; the last slot: the block's multiprocessor.
constexpr int kDecodeTraceBlocks = 1024, kDecodeTracePoints = 10, kDecodeTraceWarps = 16;
constexpr int kMergeCountedPoint = 7, kMergeWeightsPoint = 8;
__device__ unsigned long long g_decode_trace[2][kDecodeTraceBlocks][kDecodeTracePoints];
__device__ unsigned long long g_decode_trace_warps[kDecodeTraceBlocks][kDecodeTraceWarps];
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int trace_block() {
  return (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}
// Point `point` of kernel `kernel` (0 tensor cores, 1 BF16 windows), by the block's thread 0.
#define OSCAR_DECODE_POINT(kernel, point)                                   \
  do {                                                                      \
    if (threadIdx.x == 0 && trace_block() < kDecodeTraceBlocks) {           \
      g_decode_trace[kernel][trace_block()][point] = global_ns();           \
      if ((point) == 0) {                                                   \
        unsigned sm;                                                        \
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));                     \
        g_decode_trace[kernel][trace_block()][kDecodeTracePoints - 1] = sm; \
      }                                                                     \
    }                                                                       \
  } while (0)
#define OSCAR_DECODE_WARP_POINT()                                          \
  do {                                                                     \
    if ((threadIdx.x & 31) == 0 && trace_block() < kDecodeTraceBlocks &&   \
        (threadIdx.x >> 5) < kDecodeTraceWarps)                            \
      g_decode_trace_warps[trace_block()][threadIdx.x >> 5] = global_ns(); \
  } while (0)
#else
#define OSCAR_DECODE_POINT(kernel, point) \
  do {                                    \
  } while (0)
#define OSCAR_DECODE_WARP_POINT() \
  do {                            \
  } while (0)
#endif

__device__ __forceinline__ float bf16_to_float(bf16_bits x) {
  return __bfloat162float(__ushort_as_bfloat16(x));
}
__device__ __forceinline__ bf16_bits float_to_bf16(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// Whether a pointer is a multiple of `to` bytes (the vector widths the kernels load and store).
bool is_aligned(const void* ptr, std::uintptr_t to) {
  return reinterpret_cast<std::uintptr_t>(ptr) % to == 0;
}

// The pool row of a store's slot (slot = page * page_size + offset; pages hold every KV head's
// page_size rows side by side), or -1 for a skipped slot (-1). page_size is 8 or 16 (store_kv
// checks): shifts and a mask, where a division of 64-bit slots is a long subroutine.
__device__ __forceinline__ std::int64_t slot_pool_row(std::int64_t slot, int page_size,
                                                      int num_kv_heads, int head) {
  const int shift = page_size == 16 ? 4 : 3;
  return slot >= 0 ? (((slot >> shift) * num_kv_heads + head) << shift) + (slot & (page_size - 1))
                   : -1;
}

// Whether a store block works on keys. A grid over both sides (extent 2 in z, or y for the
// preparation) has keys at index 0; a grid over one side serves the only side of its kind: the one
// with a rotation for the rotating kernels, the one without (rows that arrive rotated) for
// store_kv_rows_kernel.
__device__ __forceinline__ bool store_side_is_key(const StoreKvParams& p, unsigned index,
                                                  unsigned extent, bool rotating) {
  return extent == 2 ? index == 0 : (p.k_rotation != nullptr) == rotating;
}

// A row element as the float32 store paths rotate it, (x - mean) / smooth with either step left
// out when its vector is absent: the column path gives the float32 path's bits because both
// compute it here.
__device__ __forceinline__ float centred_smoothed(float x, bool centre, float mean, bool smooth,
                                                  float scale) {
  if (centre) x = __fsub_rn(x, mean);
  if (smooth) x = __fdiv_rn(x, scale);
  return x;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

// Programmatic dependent launch (Hopper). Every kernel here calls wait_for_prerequisite_grids
// before it reads or writes anything the work before it in the stream may touch (only the fixed
// inputs, the prepared rotation and the clip ratios, come earlier), then allow_dependent_launch,
// in that order: a grid launched as a programmatic dependent of it then starts only once every
// block has passed its wait, so that grid may read what came before without waiting itself (the
// kernels that run beside another of the same call rely on this), and each grid completes only
// after the work it waited for. The decode's CUDA-core kernel signals later, once its pages are
// read (decode_kernel says why). A kernel launched the ordinary way passes the wait at once.
//
// Lets a grid launched next as a programmatic dependent of this one start.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
// Waits until the grids this one was launched beside (programmatic dependent launch) have
// completed and their writes are visible; a no-op for a grid launched the ordinary way.
__device__ __forceinline__ void wait_for_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The two in order, for kernels with nothing to do before the wait.
__device__ __forceinline__ void wait_then_allow_dependents() {
  wait_for_prerequisite_grids();
  allow_dependent_launch();
}

// An attribute of the current device, or `fallback` when it cannot be queried.
int device_attribute(cudaDeviceAttr attribute, int fallback) {
  int device = 0, value = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) {
    cudaGetLastError();
    return fallback;
  }
  return value;
}
int device_multiprocessors() { return device_attribute(cudaDevAttrMultiProcessorCount, 132); }
int device_compute_major() { return device_attribute(cudaDevAttrComputeCapabilityMajor, 0); }

// A launch of `grid` x `block` threads with `smem` bytes of dynamic shared memory on `stream`, as
// a programmatic dependent of the grid launched before it (it may start beside that grid) where
// `dependent` and the device has it (Hopper); `attribute` is the storage the configuration points
// at.
cudaLaunchConfig_t launch_config(dim3 grid, dim3 block, cudaStream_t stream, bool dependent,
                                 cudaLaunchAttribute& attribute, std::size_t smem = 0) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (dependent && device_compute_major() >= 9) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return config;
}

// Launches `kernel` (as <<<grid, block, smem, stream>>>, or as a programmatic dependent of the
// grid before it where `dependent`, launch_config) and returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                          cudaStream_t stream, bool dependent, Args&&... args) {
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = launch_config(grid, block, stream, dependent, attribute, smem);
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The INT2 row quantizer of bf16 rows (exact clip threshold, bit-identical to the reference) and
// the demotion kernel built on it.
#include "int2_quantize.cuh"  // NOLINT(build/include)

// ---------------------------------------------------------------------------------------------
// store_kv: block (chunk of kStoreTokens tokens, KV head, keys or values) of kStoreThreads
// threads. The chunk's centred, smoothed rows are staged in shared memory transposed
// ([element][token], so a thread reads four tokens of an element in one vector load); thread
// (group g, column j) computes column j of the rotated rows of its kStoreTokens / groups tokens,
// each with the same fused multiply-adds in the same order (i = 0 .. d-1) as a plain dot product,
// reading R[i][j] once for all of them. The rotated rows then go back to shared memory row by row
// and each warp stores / quantizes whole rows.
constexpr int kStoreTokens = 32;
constexpr int kStoreThreads = 256;

template <int D>
__global__ void __launch_bounds__(kStoreThreads) store_kv_kernel(StoreKvParams p) {
  wait_then_allow_dependents();
  constexpr int E = D / 32;
  constexpr int kGroups = kStoreThreads / D;  // token groups: 4 at d 64, 2 at 128, 1 at 256
  constexpr int kPerThread = kStoreTokens / kGroups;
  constexpr int kStride = kStoreTokens + 4;  // keeps 16-byte alignment, spreads the writes
  constexpr int kWarps = kStoreThreads / 32;
  static_assert(kStoreThreads % D == 0 && kPerThread % 4 == 0, "store tiling");
  __shared__ __align__(16) float stage[D * kStride];  // [element][token], then [token][element]
  const int head = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool is_key = store_side_is_key(p, blockIdx.z, gridDim.z, true);
  const int hkv = p.num_kv_heads;
  const std::int64_t token0 = static_cast<std::int64_t>(blockIdx.x) * kStoreTokens;
  const std::int64_t left = p.num_tokens - token0;
  const int count = left < kStoreTokens ? static_cast<int>(left) : kStoreTokens;
  const bf16_bits* src = is_key ? p.k : p.v;
  const float* mean = is_key ? p.k_mean : p.v_mean;
  const float* smooth = is_key ? p.k_smooth : nullptr;
  for (int idx = threadIdx.x; idx < kStoreTokens * D; idx += kStoreThreads) {
    const int t = idx / D, e = idx % D;
    float x = 0.0f;
    if (t < count) {
      x = centred_smoothed(bf16_to_float(src[((token0 + t) * hkv + head) * D + e]), mean != nullptr,
                           mean != nullptr ? mean[head * D + e] : 0.0f, smooth != nullptr,
                           smooth != nullptr ? smooth[head * D + e] : 1.0f);
    }
    stage[e * kStride + t] = x;
  }
  __syncthreads();
  const int j = threadIdx.x % D, first = (threadIdx.x / D) * kPerThread;
  const float* rot =
      (is_key ? p.k_rotation : p.v_rotation) + static_cast<std::int64_t>(head) * D * D + j;
  float acc[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) acc[u] = 0.0f;
#pragma unroll 4
  for (int i = 0; i < D; ++i) {
    const float r = __ldg(rot + i * D);
    const float4* xi = reinterpret_cast<const float4*>(&stage[i * kStride + first]);
#pragma unroll
    for (int u = 0; u < kPerThread / 4; ++u) {
      const float4 x4 = xi[u];
      acc[4 * u] = fmaf(x4.x, r, acc[4 * u]);
      acc[4 * u + 1] = fmaf(x4.y, r, acc[4 * u + 1]);
      acc[4 * u + 2] = fmaf(x4.z, r, acc[4 * u + 2]);
      acc[4 * u + 3] = fmaf(x4.w, r, acc[4 * u + 3]);
    }
  }
  __syncthreads();  // every read of the transposed rows is done
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) stage[(first + u) * D + j] = round_bf16(acc[u]);
  __syncthreads();
  const std::int64_t* bf16_slot = p.bf16_slot;
  const std::int64_t* int2_slot = p.int2_slot;
  for (int t = warp; t < count; t += kWarps) {
    float rotated[E];
#pragma unroll
    for (int m = 0; m < E; ++m) rotated[m] = stage[t * D + lane + 32 * m];
    const std::int64_t bf16_row =
        slot_pool_row(bf16_slot != nullptr ? bf16_slot[token0 + t] : -1, p.page_size, hkv, head);
    if (bf16_row >= 0) {
      bf16_bits* dst = (is_key ? p.k_bf16 : p.v_bf16) + bf16_row * D;
#pragma unroll
      for (int m = 0; m < E; ++m) dst[lane + 32 * m] = float_to_bf16(rotated[m]);
    }
    const std::int64_t row_index =
        slot_pool_row(int2_slot != nullptr ? int2_slot[token0 + t] : -1, p.page_size, hkv, head);
    if (row_index >= 0) {
      quantize_row_bf16<D>(rotated, (is_key ? p.k_clip : p.v_clip)[head],
                           (is_key ? p.k_codes : p.v_codes) + row_index * (D / 4),
                           (is_key ? p.k_scale_zero : p.v_scale_zero) + row_index * 2);
    }
  }
}

// A store of few BF16 rows (a decode step's: one token per sequence into the recent window), the
// float32 path's arithmetic split over columns. Block (column slice, token tile) of one (KV head, K
// or V): 16 output columns for up to 32 tokens (16 at d 256, for static shared memory), from R's
// 16 columns (D x 16 float32, 4-16 KB) instead of all of R, so that a one-token store spreads over
// D / 16 x Hkv x 2 blocks (128 at d 128 with 8 KV heads) where the float32 path runs 2 x Hkv blocks
// that each read all of R (64 KB at d 128). Every output is the float32 path's: (x - mean) /
// smooth, then one chain of fused multiply-adds over i = 0 .. d-1, rounded to bf16: the same bits.
constexpr int kColumnStoreThreads = 128;
constexpr int kColumnStoreColumns = 16;
template <int D>
__host__ __device__ constexpr int column_store_tokens() {
  return D == 256 ? 16 : 32;
}

template <int D>
__global__ void __launch_bounds__(kColumnStoreThreads) store_kv_columns_kernel(StoreKvParams p) {
  wait_then_allow_dependents();
  constexpr int kSlices = D / kColumnStoreColumns;
  constexpr int kColumnStoreTokens = column_store_tokens<D>();
  constexpr int kGroups = kColumnStoreThreads / kColumnStoreColumns;  // tokens g, g + 8, ...
  constexpr int kPerThread = kColumnStoreTokens / kGroups;
  constexpr int kRowStride = D + 1;  // the two token groups a warp reads fall in different banks
  static_assert(kPerThread * kGroups == kColumnStoreTokens, "column store tiling");
  __shared__ float rotation[D * kColumnStoreColumns];      // R[i][j0 + c] at i * 16 + c
  __shared__ float rows[kColumnStoreTokens * kRowStride];  // (x - mean) / smooth
  const int slice = static_cast<int>(blockIdx.x % kSlices);
  const std::int64_t token0 = static_cast<std::int64_t>(blockIdx.x / kSlices) * kColumnStoreTokens;
  const int head = static_cast<int>(blockIdx.y), hkv = p.num_kv_heads;
  const bool is_key = store_side_is_key(p, blockIdx.z, gridDim.z, true);
  const int j0 = slice * kColumnStoreColumns;
  const std::int64_t left = p.num_tokens - token0;
  const int count = left < kColumnStoreTokens ? static_cast<int>(left) : kColumnStoreTokens;
  const int c = static_cast<int>(threadIdx.x) % kColumnStoreColumns,
            g = static_cast<int>(threadIdx.x) / kColumnStoreColumns;
  // Every load is issued before the first is used: a loop of load-then-store waits for memory
  // once per iteration (most of a one-token store, as in build_store_rotation).
  std::int64_t slot[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int t = g + kGroups * u;
    slot[u] = t < count ? __ldg(p.bf16_slot + token0 + t) : -1;
  }
  constexpr int kRotationLoads = D * kColumnStoreColumns / kColumnStoreThreads;
  const float* rot =
      (is_key ? p.k_rotation : p.v_rotation) + static_cast<std::int64_t>(head) * D * D + j0;
  float r[kRotationLoads];
#pragma unroll
  for (int k = 0; k < kRotationLoads; ++k) {
    const int idx = static_cast<int>(threadIdx.x) + k * kColumnStoreThreads;
    r[k] = __ldg(rot + (idx / kColumnStoreColumns) * D + idx % kColumnStoreColumns);
  }
  // Thread e of the block loads elements e, e + 128, ... of the tile's rows in order: element
  // (e + 128 k) % D of token (e + 128 k) / D, whose mean and smoothing repeat every D / 128 loads.
  constexpr int kRowLoads = kColumnStoreTokens * D / kColumnStoreThreads;
  constexpr int kElements = D > kColumnStoreThreads ? D / kColumnStoreThreads : 1;
  const bf16_bits* src = is_key ? p.k : p.v;
  const float* mean = is_key ? p.k_mean : p.v_mean;
  const float* smooth = is_key ? p.k_smooth : nullptr;
  bf16_bits x[kRowLoads];
#pragma unroll
  for (int k = 0; k < kRowLoads; ++k) {
    const int idx = static_cast<int>(threadIdx.x) + k * kColumnStoreThreads;
    const int t = idx / D, e = idx % D;
    x[k] = t < count ? __ldg(src + ((token0 + t) * hkv + head) * D + e) : bf16_bits{0};
  }
  float m[kElements], s[kElements];
#pragma unroll
  for (int k = 0; k < kElements; ++k) {
    const int e = (static_cast<int>(threadIdx.x) + k * kColumnStoreThreads) % D;
    m[k] = mean != nullptr ? __ldg(mean + head * D + e) : 0.0f;
    s[k] = smooth != nullptr ? __ldg(smooth + head * D + e) : 1.0f;
  }
#pragma unroll
  for (int k = 0; k < kRotationLoads; ++k) {
    rotation[static_cast<int>(threadIdx.x) + k * kColumnStoreThreads] = r[k];
  }
#pragma unroll
  for (int k = 0; k < kRowLoads; ++k) {
    const int idx = static_cast<int>(threadIdx.x) + k * kColumnStoreThreads;
    const int t = idx / D, e = idx % D;
    rows[t * kRowStride + e] =
        t < count ? centred_smoothed(bf16_to_float(x[k]), mean != nullptr, m[k % kElements],
                                     smooth != nullptr, s[k % kElements])
                  : 0.0f;
  }
  __syncthreads();
  float acc[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) acc[u] = 0.0f;
#pragma unroll 4
  for (int i = 0; i < D; ++i) {
    const float rij = rotation[i * kColumnStoreColumns + c];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      acc[u] = fmaf(rows[(g + kGroups * u) * kRowStride + i], rij, acc[u]);
    }
  }
  bf16_bits* pool = is_key ? p.k_bf16 : p.v_bf16;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const std::int64_t row = slot_pool_row(slot[u], p.page_size, hkv, head);
    if (row >= 0) pool[row * D + j0 + c] = float_to_bf16(acc[u]);
  }
}

// ---------------------------------------------------------------------------------------------
// Decode attention. Block (split, KV head, sequence) of kWarps warps; warp w takes every kWarps-th
// page of the split's range. A row is read by L = D / 16 lanes, each owning 16 elements: bytes
// 4 r .. 4 r + 3 of the packed row (r = lane % L) at all four 2-bit fields, i.e. elements
// e(r, i, f) = 4 r + i + f D / 4. BF16 rows are read with the same element ownership, so the
// queries and accumulators of a lane mean the same elements on both kinds of page.
constexpr int kDecodeWarps = 4;

template <int D>
struct RowMap {
  static constexpr int kLanesPerRow = D / 16;
  static constexpr int kRowsPerStep = 32 / kLanesPerRow;
  __device__ static int element(int r, int i, int f) { return 4 * r + i + f * (D / 4); }
};

struct SplitPartial {  // per (sequence, q head, split), in the workspace
  float m, l;
};

// One page of one warp: logits of its P rows for the G heads, a single online-softmax rescale for
// the page, then p V. INT2 rows use q . ((c - z) s) = s (q . c - z sum q) and accumulate
// sum p s c and sum p s z separately (acc_zero, subtracted at the end).
template <int D, int G, int P, bool kInt2>
__device__ __forceinline__ void process_page(const DecodeParams& p, std::int64_t row0, int valid,
                                             int r, int row_in_step, const float (&q)[G][16],
                                             const float (&q_sum)[G], float scale_log2,
                                             float (&m_run)[G], float (&l_run)[G],
                                             float (&acc)[G][16], float (&acc_zero)[G]) {
  using Map = RowMap<D>;
  constexpr int L = Map::kLanesPerRow, R = Map::kRowsPerStep, kSteps = P / R;
  constexpr int kWords = kInt2 ? 1 : 8;  // 32-bit words a lane reads per row (K or V)
  std::uint32_t kw[kSteps][kWords], vw[kSteps][kWords];
  std::uint32_t ksz[kSteps], vsz[kSteps];
  // Issue every load of the page first: memory-level parallelism is what decode lives on.
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const std::int64_t row = row0 + s * R + row_in_step;
    if constexpr (kInt2) {
      kw[s][0] = reinterpret_cast<const std::uint32_t*>(p.k_codes + row * (D / 4))[r];
      vw[s][0] = reinterpret_cast<const std::uint32_t*>(p.v_codes + row * (D / 4))[r];
      ksz[s] = reinterpret_cast<const std::uint32_t*>(p.k_scale_zero)[row];
      vsz[s] = reinterpret_cast<const std::uint32_t*>(p.v_scale_zero)[row];
    } else {
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        const uint2 kk =
            *reinterpret_cast<const uint2*>(p.k_bf16 + row * D + Map::element(r, 0, f));
        const uint2 vv =
            *reinterpret_cast<const uint2*>(p.v_bf16 + row * D + Map::element(r, 0, f));
        kw[s][2 * f] = kk.x;
        kw[s][2 * f + 1] = kk.y;
        vw[s][2 * f] = vv.x;
        vw[s][2 * f + 1] = vv.y;
      }
      ksz[s] = vsz[s] = 0u;
    }
  }
  // Element j = 4 i + f of the lane: INT2 field f of byte i; BF16 half i % 2 of word 2 f + i / 2.
  auto element = [](const std::uint32_t(&w)[kWords], int i, int f) -> float {
    if constexpr (kInt2) {
      return static_cast<float>((w[0] >> (8 * i + 2 * f)) & 3u);
    } else {
      return bf16_to_float(static_cast<bf16_bits>(w[2 * f + i / 2] >> (16 * (i % 2))));
    }
  };

  float logit[kSteps][G];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    float kv[16];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int f = 0; f < 4; ++f) kv[i * 4 + f] = element(kw[s], i, f);
    }
    const bool in_page = s * R + row_in_step < valid;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) dot = fmaf(q[g][j], kv[j], dot);
      for (int off = L / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(kFullMask, dot, off);
      if constexpr (kInt2) {
        const float ks = bf16_to_float(static_cast<bf16_bits>(ksz[s] & 0xffffu));
        const float kz = bf16_to_float(static_cast<bf16_bits>(ksz[s] >> 16));
        dot = ks * (dot - kz * q_sum[g]);
      }
      logit[s][g] = in_page ? dot * scale_log2 : -INFINITY;
    }
  }

  // The page's maximum per head over the whole warp: one rescale per page, not per token.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) mx = fmaxf(mx, logit[s][g]);
    for (int off = L; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
    const float m_new = fmaxf(m_run[g], mx);
    const float alpha = exp2f(m_run[g] - m_new);  // 0 on the first page (m_run = -inf)
    m_run[g] = m_new;
    l_run[g] *= alpha;
    acc_zero[g] *= alpha;
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[g][j] *= alpha;
  }

#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    // Rows past the page's valid tokens may hold anything (a fresh pool, NaN bit patterns): their
    // weight is 0 but 0 * NaN is not, so they are skipped, not weighted.
    if (s * R + row_in_step >= valid) continue;
    float vv[16];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int f = 0; f < 4; ++f) vv[i * 4 + f] = element(vw[s], i, f);
    }
    float vs = 1.0f, vz = 0.0f;
    if constexpr (kInt2) {
      vs = bf16_to_float(static_cast<bf16_bits>(vsz[s] & 0xffffu));
      vz = bf16_to_float(static_cast<bf16_bits>(vsz[s] >> 16));
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float pr = exp2f(logit[s][g] - m_run[g]);
      l_run[g] += pr;
      const float w = pr * vs;
      if constexpr (kInt2) acc_zero[g] = fmaf(w, vz, acc_zero[g]);
#pragma unroll
      for (int j = 0; j < 16; ++j) acc[g][j] = fmaf(w, vv[j], acc[g][j]);
    }
  }
}

// Where a kernel writes its partial results: splits [offset, offset + count) of total per head.
struct SplitRange {
  int offset, count, total;
  bool bf16_pages = false;  // the tensor-core kernel reads the BF16 pages too (no windows' grid)
};

// The blocks of both decode kernels count themselves per (sequence, KV head) when their partial
// result is written; the last one merges, so no merge kernel is launched. The counters wrap back
// to zero on the last count (atomicInc), so a call leaves them as it found them and no memset
// precedes the launch. When the partial results of a (sequence, KV head) are too large for one
// block to read quickly (one KV head over 128 splits at d 256 and G 8: 1.1 MB, tens of
// microseconds for one multiprocessor), the merge takes two levels: the splits count themselves
// in groups, the last block of each group merges the group into the group's first slot, and the
// last group to finish merges the groups.
constexpr int kMaxMergeGroups = 32;  // per (sequence, KV head): sizes the counters' region
struct MergeCount {
  // [batch, KV heads] pair counters, then [batch, KV heads, kMaxMergeGroups] group counters;
  // null: merge_splits_kernel merges.
  unsigned* counters = nullptr;
  int blocks = 0;  // split slots of both kernels per (sequence, KV head)
  int group = 0;   // slots per first-level group; 0: the last block merges all slots at once
  // The BF16-window grid merges (one level only): the tensor-core blocks write their partial
  // results and exit without counting, and the last window block of each (sequence, KV head)
  // merges every slot once the tensor-core grid has completed (merge_when_last).
  bool in_windows = false;
  bool dry_pass = false;  // the window merge's dry pass (merge_when_last)
  int counted = 0;        // blocks counted, where not all slots' (OSCAR_DECODE_ABLATE_WINDOWS)
};

// True in every thread of the block whose count is the last of `expected` on `counter`; its view
// of the other counted blocks' writes is then complete. One acquire-release count by one thread
// after the block's barrier orders the whole block's writes before it (release, cumulative
// through the barrier) and the other blocks' counted writes before the merge's reads (acquire),
// as the split-K semaphores of CUTLASS do; a sequentially consistent fence in every thread
// (__threadfence) cost ~0.3 us at 128K batch 1 and ~1 us at batch 8 on the H100.
__device__ __forceinline__ bool counts_last(unsigned* counter, int expected) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned final_count = static_cast<unsigned>(expected - 1);
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;"
                 : "=r"(before)
                 : "l"(counter), "r"(final_count)
                 : "memory");
    last = before == final_count;
  }
  __syncthreads();
  return last;
}

// One-level merges of at most kMaxMergeGroups slots count by ticket: each block takes its place
// in the count of its (sequence, KV head) once its warps are done, before it writes its partial
// result (a relaxed count, so its round trip overlaps the block's combine). The other blocks then
// publish their (max, sum) pairs in ready slots of the zeroed counter region (a release store per
// head after the block's writes; a real pair is never all zero bits: an empty split's max is
// -inf, any other's sum is at least 1), and the block of the last ticket waits on those slots
// (acquire loads, most of them set long before), clears them for the next call, and only then
// reads the partial outputs. The last block thereby neither orders its own writes ahead of the
// count nor waits for the count after them, and its wait is also its read of the pairs. It waits
// only on blocks that took their tickets before it, which are running and wait on nothing.
// OSCAR_MERGE_TICKETS=0 counts after the write in every merge (counts_last), for timing studies.
#ifndef OSCAR_MERGE_TICKETS
#define OSCAR_MERGE_TICKETS 0
#endif
__host__ __device__ inline bool merges_by_ticket(const MergeCount& merge) {
  return OSCAR_MERGE_TICKETS && merge.counters != nullptr && merge.group == 0 &&
         !merge.in_windows && merge.blocks <= kMaxMergeGroups;
}
// The counter region in words: a pair counter and kMaxMergeGroups group counters per (sequence,
// KV head), then (8-byte aligned) the ready slots, [pairs][G][kMaxMergeGroups] (max, sum) pairs.
__host__ __device__ inline std::size_t ready_slots_offset(std::size_t pairs) {
  return (pairs * (1 + kMaxMergeGroups) + 1) / 2 * 2;
}
// The block's ticket (the count before its own) in thread 0, 0 elsewhere; called by every block
// of a merge by ticket once its warps' results are in shared memory, before it writes them.
__device__ __forceinline__ unsigned take_merge_ticket(const MergeCount& merge, int b, int kvh) {
  unsigned before = 0;
  if (merges_by_ticket(merge) && threadIdx.x == 0) {
    asm volatile("atom.relaxed.gpu.global.inc.u32 %0, [%1], %2;"
                 : "=r"(before)
                 : "l"(merge.counters + b * gridDim.y + kvh), "r"(unsigned(merge.blocks - 1))
                 : "memory");
  }
  return before;
}
// Waits for a ready slot's (max, sum) pair, reads it and clears the slot.
__device__ __forceinline__ float2 wait_ready_pair(unsigned long long* slot) {
  unsigned long long bits = 0;
  do {
    asm volatile("ld.acquire.gpu.global.b64 %0, [%1];" : "=l"(bits) : "l"(slot) : "memory");
  } while (bits == 0);
  *slot = 0;
  return make_float2(__uint_as_float(static_cast<unsigned>(bits)),
                     __uint_as_float(static_cast<unsigned>(bits >> 32)));
}

// Log-sum-exp merge, by the whole block, of `count` partial results of each of the G heads of
// (b, kvh): the slots first, first + stride, ... of `total`. to_output: the normalized result
// goes to p.out; otherwise the merged (max, sum) and unnormalized output go to slot `first`, a
// partial result like a split's. Shared memory: weight[G * count], head_l[G] and, when there are
// more threads than float4 columns, reduce[W * 32]. The columns are read as float4 with
// kMergeBatch loads in flight a thread; threads beyond the columns take every kParts-th slot
// and are summed through `reduce`. A small merge (one batch a thread) issues its column loads
// before the (max, sum) pairs' single pass, so it costs one L2 round trip (one KV head at d 256:
// 37.1 -> 34.8 us at 128K batch 1; GQA 8: 51.7 -> 50.8; no change for the Qwen3-8B shape).
// In a merge by ticket (`ready` not null, count <= 32) the (max, sum) pairs come from the ready
// slots (waited for, then cleared) and the block's own from `own_ml`, and the partial outputs are
// read only after them. dry: the same pass with every store but shared memory's skipped (see
// merge_when_last).
constexpr int kMergeBatch = 8;
template <int D, int G, int W>
__device__ void merge_partials(const DecodeParams& p, float* part_o, SplitPartial* part_ml, int b,
                               int kvh, int total, int first, int count, int stride, bool to_output,
                               float* weight, float* head_l, float4* reduce,
                               unsigned long long* ready = nullptr, int own_slot = -1,
                               const SplitPartial* own_ml = nullptr, bool dry = false) {
  constexpr int kThreads = W * 32, kColumns = G * D / 4;
  constexpr int kParts = kThreads >= 2 * kColumns ? kThreads / kColumns : 1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::int64_t head0 = static_cast<std::int64_t>(b) * p.num_q_heads + kvh * G;
  const int part = kParts > 1 ? static_cast<int>(threadIdx.x) / kColumns : 0;
  // With one column a thread and its slots in one batch, the partial outputs' loads go out
  // before the weights are computed, so their L2 round trip overlaps that of the (max, sum) pairs.
  const int column0 =
      kParts > 1 ? static_cast<int>(threadIdx.x) % kColumns : static_cast<int>(threadIdx.x);
  const bool prefetched = ready == nullptr && kColumns <= kThreads && part < kParts &&
                          column0 < kColumns && count <= kParts * kMergeBatch;
  // The same loads as the column loop below, written out in both places: one shared lambda
  // raised the tensor-core kernel from 111 to 120 registers (d 128, G 4).
  float4 x0[kMergeBatch];
  if (prefetched) {
    const int g = column0 / (D / 4), e = column0 % (D / 4) * 4;
    const float* const po = part_o + ((head0 + g) * total + first) * D + e;
#pragma unroll
    for (int k = 0; k < kMergeBatch; ++k) {
      const int i = part + k * kParts;
      x0[k] = i < count ? __ldcg(reinterpret_cast<const float4*>(po + static_cast<std::int64_t>(i) *
                                                                          stride * D))
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  for (int g = warp; g < G; g += W) {
    SplitPartial* const ml = part_ml + (head0 + g) * total + first;
    float m = -INFINITY, l = 0.0f;
    if (count <= 32) {
      // One (max, sum) pair a lane: one round trip.
      float2 pair = make_float2(-INFINITY, 0.0f);
      if (lane < count && ready == nullptr) {
        pair =
            __ldcg(reinterpret_cast<const float2*>(&ml[static_cast<std::int64_t>(lane) * stride]));
      } else if (lane == own_slot) {
        pair = make_float2(own_ml[g].m, own_ml[g].l);
      } else if (lane < count) {
        pair = wait_ready_pair(ready + g * kMaxMergeGroups + lane);
      }
      m = pair.x;
      for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, off));
      const float w = pair.x == -INFINITY ? 0.0f : exp2f(pair.x - m);
      if (lane < count) weight[g * count + lane] = w;
      l = w * pair.y;
    } else {
      for (int i = lane; i < count; i += 32) {
        m = fmaxf(m, __ldcg(&ml[static_cast<std::int64_t>(i) * stride].m));
      }
      for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, off));
      for (int i = lane; i < count; i += 32) {
        const SplitPartial* const slot = &ml[static_cast<std::int64_t>(i) * stride];
        const float ms = __ldcg(&slot->m);
        const float w = ms == -INFINITY ? 0.0f : exp2f(ms - m);
        weight[g * count + i] = w;
        l += w * __ldcg(&slot->l);
      }
    }
    l = warp_sum(l);  // every lane's reads of the slots come before lane 0's write below
    if (lane == 0) {
      if (to_output) {
        head_l[g] = l > 0.0f ? 1.0f / l : 0.0f;
      } else if (!dry) {
        ml[0] = {m, l};
      }
    }
  }
  __syncthreads();
  if (to_output && !dry) OSCAR_DECODE_POINT(W == kDecodeWarps ? 1 : 0, kMergeWeightsPoint);
  auto finish = [&](int column, float4 o) {
    if (dry) return;
    const int g = column / (D / 4), e = column % (D / 4) * 4;
    if (to_output) {
      bf16_bits* const out = p.out + (head0 + g) * D + e;
      out[0] = float_to_bf16(o.x * head_l[g]);
      out[1] = float_to_bf16(o.y * head_l[g]);
      out[2] = float_to_bf16(o.z * head_l[g]);
      out[3] = float_to_bf16(o.w * head_l[g]);
    } else {
      *reinterpret_cast<float4*>(part_o + ((head0 + g) * total + first) * D + e) = o;
    }
  };
  if (part < kParts) {
    constexpr int kColumnStep = kParts > 1 ? kColumns : kThreads;
    for (int column = column0; column < kColumns; column += kColumnStep) {
      const int g = column / (D / 4), e = column % (D / 4) * 4;
      const float* const po = part_o + ((head0 + g) * total + first) * D + e;
      const float* const wg = weight + g * count;
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int i0 = part; i0 < count; i0 += kParts * kMergeBatch) {
        float4 x[kMergeBatch];
#pragma unroll
        for (int k = 0; k < kMergeBatch; ++k) {
          const int i = i0 + k * kParts;
          x[k] = prefetched  ? x0[k]
                 : i < count ? __ldcg(reinterpret_cast<const float4*>(
                                   po + static_cast<std::int64_t>(i) * stride * D))
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int k = 0; k < kMergeBatch; ++k) {
          const int i = i0 + k * kParts;
          const float w = i < count ? wg[i] : 0.0f;
          o.x = fmaf(w, x[k].x, o.x);
          o.y = fmaf(w, x[k].y, o.y);
          o.z = fmaf(w, x[k].z, o.z);
          o.w = fmaf(w, x[k].w, o.w);
        }
      }
      if constexpr (kParts > 1) {
        reduce[threadIdx.x] = o;
      } else {
        finish(column, o);
      }
    }
  }
  if constexpr (kParts > 1) {
    __syncthreads();
    if (threadIdx.x < kColumns) {
      float4 o = reduce[threadIdx.x];
#pragma unroll
      for (int q = 1; q < kParts; ++q) {
        const float4 x = reduce[q * kColumns + threadIdx.x];
        o.x += x.x;
        o.y += x.y;
        o.z += x.z;
        o.w += x.w;
      }
      finish(threadIdx.x, o);
    }
  }
}

// The most partial results one merge_partials call of a MergeCount reads (its weights in shared
// memory: G floats per result, then G for head_l).
__host__ __device__ inline int merge_width(int blocks, int group) {
  return group == 0 ? blocks : max(group, (blocks + group - 1) / group);
}

// Build switches for timing studies: OSCAR_WINDOWS_MERGE=0 leaves the merge to the last block of
// either kernel (counts in both) where the window grid would merge; OSCAR_MERGE_DRY_PASS=0 drops
// the window merge's dry pass.
#ifndef OSCAR_WINDOWS_MERGE
#define OSCAR_WINDOWS_MERGE 1
#endif
#ifndef OSCAR_MERGE_DRY_PASS
#define OSCAR_MERGE_DRY_PASS 1
#endif

// Counts the block's split slot and merges when it is the last: by ticket, in one level, or in
// two (see MergeCount). `ticket`: take_merge_ticket's; `block_ml`: the block's (max, sum) pairs
// in shared memory (write_block_partial's, in a merge by ticket). Shared memory: `weight` holds
// G * (merge_width + 1) floats, `reduce` W * 32.
// In a merge in the window grid (MergeCount::in_windows; called by the BF16-window kernel only,
// `window_splits` its blocks of the pair) the count is among the window blocks, and the last of
// them merges all slots once the tensor-core grid this grid runs beside has completed. That wait
// replaces a count in every tensor-core block (a release fence and an atomic round trip, ~0.8 us
// on the last block's path at batch 1) and costs nothing more: the call's last grid waits for the
// tensor-core grid anyway. Before it, where the plan expects the windows to end well before the
// INT2 tiles (MergeCount::dry_pass), the block makes a dry pass of the merge (the slots' stale
// contents; no global store), so that the merge's instructions and the slots' address
// translations are at hand when the real pass starts, after the wait (H200, 128K, batch 1:
// 32.0-32.2 -> 30.9-31.3 us). Where the windows are the longer path (4K-32K at batch 1) the dry
// pass only delays the merge (+0.3-2.5 us) and is left out.
template <int D, int G, int W>
__device__ void merge_when_last(const DecodeParams& p, const MergeCount& merge, float* part_o,
                                SplitPartial* part_ml, int b, int kvh, int slot, unsigned ticket,
                                const SplitPartial* block_ml, float* weight, float4* reduce,
                                int window_splits = 0) {
  if (OSCAR_DECODE_ABLATE_MERGE) return;
  float* const head_l = weight + G * merge_width(merge.blocks, merge.group);
  const int pair = b * gridDim.y + kvh, pairs = gridDim.y * gridDim.z;
  unsigned* const pair_counter = merge.counters + pair;
  if (merges_by_ticket(merge)) {
    __shared__ bool last;
    unsigned long long* const ready =
        reinterpret_cast<unsigned long long*>(merge.counters + ready_slots_offset(pairs)) +
        static_cast<std::size_t>(pair) * G * kMaxMergeGroups;
    if (threadIdx.x == 0) last = ticket == static_cast<unsigned>(merge.blocks - 1);
    __syncthreads();  // the block's partial written (before the releases below)
    if (!last) {
      if (threadIdx.x < G) {
        const SplitPartial ml = block_ml[threadIdx.x];
        const unsigned long long bits =
            static_cast<unsigned long long>(__float_as_uint(ml.l)) << 32 | __float_as_uint(ml.m);
        asm volatile("st.release.gpu.global.b64 [%0], %1;" ::"l"(
                         ready + threadIdx.x * kMaxMergeGroups + slot),
                     "l"(bits)
                     : "memory");
      }
      return;
    }
    OSCAR_DECODE_POINT(W == kDecodeWarps ? 1 : 0, kMergeCountedPoint);
    merge_partials<D, G, W>(p, part_o, part_ml, b, kvh, merge.blocks, 0, merge.blocks, 1, true,
                            weight, head_l, reduce, ready, slot, block_ml);
    return;
  }
  if (merge.group == 0) {
    const int counted = merge.in_windows    ? window_splits
                        : merge.counted > 0 ? merge.counted
                                            : merge.blocks;
    if (counted > 1) {
      if (!counts_last(pair_counter, counted)) return;
    } else {
      __syncthreads();  // the block's partial written: `weight` may overlap its combine area
    }
#pragma unroll 1
    for (int pass = merge.in_windows && merge.dry_pass ? 0 : 1; pass < 2; ++pass) {
      const bool dry = pass == 0;
      if (!dry && merge.in_windows) {
        __syncthreads();  // the dry pass's reads of `weight` done
        wait_for_prerequisite_grids();
        OSCAR_DECODE_POINT(1, 2);
      }
      if (!dry) OSCAR_DECODE_POINT(W == kDecodeWarps ? 1 : 0, kMergeCountedPoint);
      merge_partials<D, G, W>(p, part_o, part_ml, b, kvh, merge.blocks, 0, merge.blocks, 1, true,
                              weight, head_l, reduce, nullptr, -1, nullptr, dry);
    }
    return;
  }
  const int group = slot / merge.group, first = group * merge.group;
  const int members = min(merge.group, merge.blocks - first);
  if (!counts_last(merge.counters + pairs + pair * kMaxMergeGroups + group, members)) return;
  if (members > 1) {
    merge_partials<D, G, W>(p, part_o, part_ml, b, kvh, merge.blocks, first, members, 1, false,
                            weight, head_l, reduce);
  }
  const int groups = (merge.blocks + merge.group - 1) / merge.group;
  if (counts_last(pair_counter, groups)) {
    merge_partials<D, G, W>(p, part_o, part_ml, b, kvh, merge.blocks, 0, groups, merge.group, true,
                            weight, head_l, reduce);
  }
}

// Combines the W warps of a block (each with its running max and sum per head and its output rows
// in sm_o) into the block's partial result for its split.
// block_ml not null (a merge by ticket): the (max, sum) pairs go there (shared memory, one a
// head) instead of part_ml. extra not null: one more partial result in the combine, output [G][D]
// then max [G] and sum [G] (the tensor-core block's BF16 windows, window_partial).
template <int D, int G, int W>
__device__ void write_block_partial(const DecodeParams& p, const float (&sm_m)[W][G],
                                    const float (&sm_l)[W][G], const float (&sm_o)[W][G][D], int b,
                                    int kvh, int split, SplitRange range, float* part_o,
                                    SplitPartial* part_ml, SplitPartial* block_ml,
                                    const float* extra = nullptr) {
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    const int g = idx / D, e = idx % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) m = fmaxf(m, sm_m[w][g]);
    const float extra_m = extra != nullptr ? extra[G * D + g] : -INFINITY;
    m = fmaxf(m, extra_m);
    float o = 0.0f, l = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float f = sm_m[w][g] == -INFINITY ? 0.0f : exp2f(sm_m[w][g] - m);
      o += f * sm_o[w][g][e];
      l += f * sm_l[w][g];
    }
    if (extra_m != -INFINITY) {
      const float f = exp2f(extra_m - m);
      o += f * extra[idx];
      l += f * extra[G * D + G + g];
    }
    const std::int64_t head = static_cast<std::int64_t>(b) * p.num_q_heads + kvh * G + g;
    const std::int64_t slot = head * range.total + range.offset + split;
    part_o[slot * D + e] = o;
    if (e == 0) {
      if (block_ml != nullptr) {
        block_ml[g] = {m, l};
      } else {
        part_ml[slot] = {m, l};
      }
    }
  }
}

// bf16_only: the INT2 pages are left to the tensor-core kernel (they count as absent here), which
// this grid runs beside: launched as its programmatic dependent, so it does not wait for it (the
// tensor-core kernel has waited for the work before both when this grid starts).
template <int D, int G, int P>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    decode_kernel(DecodeParams p, float* part_o, SplitPartial* part_ml, SplitRange range,
                  bool bf16_only, MergeCount merge) {
  if (!bf16_only) wait_for_prerequisite_grids();
  OSCAR_DECODE_POINT(1, 0);
  const int num_splits = range.count;
  using Map = RowMap<D>;
  constexpr int L = Map::kLanesPerRow, R = Map::kRowsPerStep;
  static_assert(P % R == 0, "page size must be a multiple of the rows a warp reads per step");
  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane % L, row_in_step = lane / L;
  const int hkv = p.num_kv_heads;

  const int sink_len = p.sink_len[b], int2_len = p.int2_len[b], recent_len = p.recent_len[b];
  const int sink_pages = (sink_len + P - 1) / P,
            int2_pages = bf16_only ? 0 : (int2_len + P - 1) / P,
            recent_pages = (recent_len + P - 1) / P;
  const int total_pages = sink_pages + int2_pages + recent_pages;
  const int per_split = (total_pages + num_splits - 1) / num_splits;
  const int page_begin = split * per_split;
  const int page_end = min(total_pages, page_begin + per_split);

  // A warp's queries and accumulators take 2 x 16 floats a lane per head: at G = 8 they do not
  // fit the registers (ptxas spilled 2.0 KB a thread at d 128, 3.9 KB at d 256), so the warps
  // split the group's heads into kHeadGroups groups of HG (warp w takes group w % kHeadGroups)
  // and each group's warps share the split's pages (the second group's reads hit L1/L2).
  constexpr int HG = G > 4 ? 4 : G;
  constexpr int kHeadGroups = G / HG, kPageWarps = kDecodeWarps / kHeadGroups;
  const int head_group = warp % kHeadGroups, head0 = head_group * HG;

  // Queries of the warp's heads, the lane's 16 elements each, and their full sums.
  float q[HG][16];
  float q_sum[HG];
#pragma unroll
  for (int g = 0; g < HG; ++g) {
    const bf16_bits* qh =
        p.q + (static_cast<std::int64_t>(b) * p.num_q_heads + kvh * G + head0 + g) * D;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        q[g][i * 4 + f] = bf16_to_float(qh[Map::element(r, i, f)]);
        s += q[g][i * 4 + f];
      }
    }
    // Sum over the row's L lanes: every lane of the row then holds sum_e q[e].
    for (int off = L / 2; off > 0; off >>= 1) s += __shfl_xor_sync(kFullMask, s, off);
    q_sum[g] = s;
  }

  float m_run[HG], l_run[HG], acc[HG][16], acc_zero[HG];
#pragma unroll
  for (int g = 0; g < HG; ++g) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.0f;
    acc_zero[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[g][j] = 0.0f;
  }
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f;  // exp(x) = exp2(x log2 e)

  for (int vp = page_begin + warp / kHeadGroups; vp < page_end; vp += kPageWarps) {
    // Where the page lives and how many of its tokens are valid.
    bool is_int2;
    int page, valid;
    if (vp < sink_pages) {
      is_int2 = false;
      page = p.bf16_block_table[static_cast<std::int64_t>(b) * p.bf16_table_stride + vp];
      valid = min(P, sink_len - vp * P);
    } else if (vp < sink_pages + int2_pages) {
      is_int2 = true;
      const int ip = vp - sink_pages;
      page = p.int2_block_table[static_cast<std::int64_t>(b) * p.int2_table_stride + ip];
      valid = min(P, int2_len - ip * P);
    } else {
      is_int2 = false;
      const int rp = vp - sink_pages - int2_pages;
      page =
          p.bf16_block_table[static_cast<std::int64_t>(b) * p.bf16_table_stride + sink_pages + rp];
      valid = min(P, recent_len - rp * P);
    }
    const std::int64_t row0 = (static_cast<std::int64_t>(page) * hkv + kvh) * P;

    if (is_int2) {
      process_page<D, HG, P, true>(p, row0, valid, r, row_in_step, q, q_sum, scale_log2, m_run,
                                   l_run, acc, acc_zero);
    } else {
      process_page<D, HG, P, false>(p, row0, valid, r, row_in_step, q, q_sum, scale_log2, m_run,
                                    l_run, acc, acc_zero);
    }
  }
#pragma unroll
  for (int g = 0; g < HG; ++g) {
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[g][j] -= acc_zero[g];
  }

  // The pages are read: a programmatic dependent launched next (the next call's first kernel) may
  // start. Not before: one started at the top sat on the multiprocessors through the whole
  // decode. On an H200, a graph of 36 layers' store, demotion and decode, all three programmatic
  // dependents, against ordinary launches: at d 256 and batch 8 / 32, 0.98x / 0.94x signalling
  // at the top, 1.07x / 1.01x at the grid's exit, 1.02x / 1.00x here; at d 128 and batch 1,
  // 1.06x at the exit and 1.15x here.
  allow_dependent_launch();
  // Combine the rows of the warp (lanes with the same r hold the same elements).
#pragma unroll
  for (int g = 0; g < HG; ++g) {
    for (int off = L; off < 32; off <<= 1) {
      l_run[g] += __shfl_xor_sync(kFullMask, l_run[g], off);
#pragma unroll
      for (int j = 0; j < 16; ++j) acc[g][j] += __shfl_xor_sync(kFullMask, acc[g][j], off);
    }
  }
  // Combine the warps of the block through shared memory.
  __shared__ float sm_m[kDecodeWarps][G], sm_l[kDecodeWarps][G];
  __shared__ float sm_o[kDecodeWarps][G][D];
  // The heads of the other groups get an empty result from this warp (weight 0, and zeros, not
  // whatever shared memory held, under it).
  if (lane < L) {
#pragma unroll
    for (int g = 0; g < HG; ++g) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int f = 0; f < 4; ++f) {
          sm_o[warp][head0 + g][Map::element(r, i, f)] = acc[g][i * 4 + f];
        }
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g / HG == head_group) continue;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int f = 0; f < 4; ++f) sm_o[warp][g][Map::element(r, i, f)] = 0.0f;
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      sm_m[warp][g] = -INFINITY;
      sm_l[warp][g] = 0.0f;
    }
#pragma unroll
    for (int g = 0; g < HG; ++g) {
      sm_m[warp][head0 + g] = m_run[g];
      sm_l[warp][head0 + g] = l_run[g];
    }
  }
  __syncthreads();
  const unsigned ticket = take_merge_ticket(merge, b, kvh);
  __shared__ SplitPartial block_ml[G];
  write_block_partial<D, G, kDecodeWarps>(p, sm_m, sm_l, sm_o, b, kvh, split, range, part_o,
                                          part_ml, merges_by_ticket(merge) ? block_ml : nullptr);
  OSCAR_DECODE_POINT(1, 3);
  if (merge.counters != nullptr) {
    __shared__ float4 merge_reduce[kDecodeWarps * 32];
    merge_when_last<D, G, kDecodeWarps>(p, merge, part_o, part_ml, b, kvh, range.offset + split,
                                        ticket, block_ml, &sm_o[0][0][0], merge_reduce, num_splits);
  }
  // Beside the tensor-core kernel, whose last block may merge (and write the output) after this
  // grid is done: one block waits for it, so that this grid, the call's last, completes after it
  // and whatever follows in the stream, however launched, finds the output written. (A merge in
  // this grid has waited for it in every merging block.)
  OSCAR_DECODE_POINT(1, 1);
  if (bf16_only && !merge.in_windows && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
    wait_for_prerequisite_grids();
    OSCAR_DECODE_POINT(1, 2);
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core decode over INT2 pages. A warp takes 16-token tiles, tokens and head-dim elements
// in the M dimension of the mma so that the query heads of the group fill N:
//   S^T[16 tokens, 8 columns] = K codes [16, d] . Q^T[d, 8]   (m16n8k32 u8 x s8 -> s32)
//   O^T[d, 8 columns]        += V codes^T [d, 16 tokens] . P'^T[16, 8]   (m16n8k16 fp16 -> fp32)
// with P' = p * v_scale per token in fp16 (transposed by movmatrix), and the zero points
// applied afterwards through sums: q . k = s (q . c - z sum q), sum p s (c - z).
// Keys: codes enter the integer mma as u8 with one AND per four codes (fields 0 and 1 of a byte
// in place, 2 and 3 after one shift of the word: values c or 4 c); the query enters as two s8
// terms (high and low, see the kernel) in adjacent columns, so n-tile j holds heads 4j .. 4j + 3
// and the scores are exact integers. Values: bits & 3 << 2f of a 16-bit half is the fp16
// subnormal 4^f c 2^-24 (tensor cores keep fp16 subnormals), one AND per two codes; the 4^-f and
// the 2^24 are applied to the fp32 output row, exact powers of two.
//
// Element ownership (lane = 4 gid + t). Keys: lane t reads the d/64 words at bytes t d/16 .. of
// rows gid and gid + 8; key register r (field r / (d/64) of word r % (d/64)) holds elements
// e_k(t, r) + 0..3 and feeds k positions 4t .. 4t+3 (r even) or 16+4t .. (r odd) of k-step r/2;
// the query registers of column gid hold the same elements. Values: lane gid reads d/32 bytes
// (from byte gid d/32) of the rows of tokens 2t, 2t+1, 2t+8, 2t+9; register r of a row pair holds
// element e_v(gid, r) of both tokens and is the A row gid (r even) or gid + 8 (r odd) of m-tile
// r/2.
constexpr int kTileTokens = 16;
// Warps of a tensor-core block: one block per multiprocessor (registers bound it to 512 threads at
// d <= 128, 256 at d 256), so that a sequence's KV head has few splits and the merge reads little.
#ifndef OSCAR_TC_WARPS
#define OSCAR_TC_WARPS 16  // at d <= 128 (a build-time switch for tuning studies)
#endif
template <int D>
inline constexpr int kTcWarps = D >= 256 ? 8 : OSCAR_TC_WARPS;

__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t s) {
  std::uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
}

// Field f of both 16-bit halves of `bits` (2-bit codes at bits 2f of each half) as the fp16
// subnormals 4^f c 2^-24: a single AND, exact, no bias to remove afterwards.
__device__ __forceinline__ std::uint32_t codes_as_subnormals(std::uint32_t bits, int f) {
  return bits & (0x00030003u << (2 * f));
}
constexpr float kSubnormalScale = 16777216.0f;  // 2^24

// exp2 by the hardware approximation (2 ulp; -inf gives 0), without exp2f's range handling.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ std::uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

__device__ __forceinline__ std::uint32_t transpose_8x8(std::uint32_t x) {
  std::uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(x));
  return d;
}

__device__ __forceinline__ void mma_16816(float (&c)[4], std::uint32_t a0, std::uint32_t a1,
                                          std::uint32_t a2, std::uint32_t a3, std::uint32_t b0,
                                          std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_16832_u8s8(int (&c)[4], std::uint32_t a0, std::uint32_t a1,
                                               std::uint32_t a2, std::uint32_t a3, std::uint32_t b0,
                                               std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int D>
struct TcMap {
  static constexpr int kKWords = D / 64;  // 32-bit words of a key row per lane (1, 2, 4)
  static constexpr int kKRegs = D / 16;   // u8x4 key registers per row (4 fields per word)
  static constexpr int kVBytes = D / 32;  // bytes of a value row per lane (2, 4, 8)
  static constexpr int kVWords = kVBytes >= 4 ? kVBytes / 4 : 1;
  // Key register r of lane t: field r / kKWords of word r % kKWords of the lane's bytes
  // t D/16 ..; byte b of the register is element key_element(t, r) + b.
  __device__ static int key_element(int t, int r) {
    return t * (D / 16) + 4 * (r % kKWords) + (r / kKWords) * (D / 4);
  }
  // The factor a key byte carries in field f: fields 1 and 3 are read in place (bits 2-3: 4 c).
  __device__ static constexpr int field_unit(int f) { return f % 2 ? 4 : 1; }
  // Value register r of lane gid: byte gid d/32 + r / 4, field r % 4.
  __device__ static int value_element(int gid, int r) {
    return gid * kVBytes + r / 4 + (r % 4) * (D / 4);
  }
};

// A query element v = q / (step u) as two s8 terms: v = hi + lo / 256 to 2^-9 (|v| <= 127).
struct QueryTerms {
  float hi, lo;
};
__device__ __forceinline__ QueryTerms split_query(float v) {
  const float hi = rintf(v);
  return {hi, fminf(rintf((v - hi) * 256.0f), 127.0f)};  // v - hi is exact
}

// A key row's words and the same shifted by four bits (fields 2 and 3 at bits 0-3 of each byte).
template <int D>
struct KeyWords {
  std::uint32_t w[TcMap<D>::kKWords], hi[TcMap<D>::kKWords];
};
template <int D>
__device__ __forceinline__ KeyWords<D> key_words(const std::uint32_t (&w)[TcMap<D>::kKWords]) {
  KeyWords<D> k;
#pragma unroll
  for (int i = 0; i < TcMap<D>::kKWords; ++i) {
    k.w[i] = w[i];
    k.hi[i] = w[i] >> 4;
  }
  return k;
}
// Key register r as four u8 values c field_unit(r / kKWords): one AND for four codes.
template <int D>
__device__ __forceinline__ std::uint32_t key_register(const KeyWords<D>& k, int r) {
  constexpr int kW = TcMap<D>::kKWords;
  const int f = r / kW, i = r % kW;
  return (f < 2 ? k.w[i] : k.hi[i]) & (f % 2 ? 0x0C0C0C0Cu : 0x03030303u);
}

// Two value rows (tokens in the low and high halves) interleaved byte by byte: for each word of
// the lane, bytes 0 and 1 of both rows (x), x >> 8, bytes 2 and 3 (y), y >> 8; entry i then has
// byte i of the word at bit 0 and 16.
template <int D>
struct ValueBits {
  std::uint32_t w[TcMap<D>::kVWords][4];
};
template <int D>
__device__ __forceinline__ ValueBits<D> value_bits(const std::uint32_t (&row0)[TcMap<D>::kVWords],
                                                   const std::uint32_t (&row1)[TcMap<D>::kVWords]) {
  ValueBits<D> v;
#pragma unroll
  for (int i = 0; i < TcMap<D>::kVWords; ++i) {
    const std::uint32_t x = prmt(row0[i], row1[i], 0x5410), y = prmt(row0[i], row1[i], 0x7632);
    v.w[i][0] = x;
    v.w[i][1] = x >> 8;
    v.w[i][2] = y;
    v.w[i][3] = y >> 8;
  }
  return v;
}
// Value register r: byte r / 4 of the lane's bytes, field r % 4.
template <int D>
__device__ __forceinline__ std::uint32_t value_register(const ValueBits<D>& v, int r) {
  return codes_as_subnormals(v.w[(r / 4) / 4][(r / 4) % 4], r % 4);
}

// log2 of the largest softmax weight the tensor-core kernel lets through before it rescales.
constexpr float kRescaleSlack = 4.0f;

// A tile in shared memory: the 16 rows of key and value codes and their scale/zero words, filled
// by cp.async. Rows of tokens past the history are zero-filled (zero scales: no garbage, no NaN).
template <int D>
struct TcTile {
  std::uint8_t k[kTileTokens][D / 4];
  std::uint8_t v[kTileTokens][D / 4];
  std::uint32_t ksz[kTileTokens], vsz[kTileTokens];
};
// Slots of a warp's copy ring: NS - 2 tiles in flight while two are computed on. Four at every
// head size: fewer tiles in flight per multiprocessor streamed faster on the H100 (Qwen3-8B
// shape, 128K, same machine: 8 slots 40.0-40.4 us at batch 1 and 241.6-243.1 at batch 8, 4 slots
// 37.7-38.3 and 238.7-239.5; 3, 5, 6 and 10 slots, measured with a bulk-copy variant, were
// slower than 4).
#ifndef OSCAR_TC_STAGES
#define OSCAR_TC_STAGES 4
#endif
template <int D>
inline constexpr int kTcStages = OSCAR_TC_STAGES;
static_assert(OSCAR_TC_STAGES >= 3, "at least one tile in flight beside the two computed on");

__device__ __forceinline__ unsigned shared_address(const void* ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(ptr));
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = shared_address(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
}
// The same with a shared-space destination address plus a constant offset (the conversion from
// a generic pointer would cost instructions on every copy), optionally predicated.
// The global address is an integer, so that sources in different pools can be derived from one
// another by unsigned (wrapping) offsets.
template <unsigned kOffset = 0>
__device__ __forceinline__ void cp_async_16_to(unsigned dst, std::uint64_t gmem) {
  asm volatile("cp.async.cg.shared.global [%0+%2], [%1], 16;" ::"r"(dst), "l"(gmem), "n"(kOffset));
}
__device__ __forceinline__ void cp_async_16_to_if(bool copy, unsigned dst, std::uint64_t gmem) {
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %2, 0;\n"
      "  @p cp.async.cg.shared.global [%0], [%1], 16;\n"
      "}" ::"r"(dst),
      "l"(gmem), "r"(static_cast<int>(copy)));
}
// An 8-byte copy (through L1: .cg takes 16 bytes only).
__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(shared_address(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#ifndef OSCAR_TABLE_PREFETCH
#define OSCAR_TABLE_PREFETCH 1
#endif
constexpr long long kTablePrefetchMinTokens = 32768;  // see the prefetch in decode_int2_tc_kernel
// Brings the 128-byte line holding `address` into this multiprocessor's L1 (a hint: no fault, no
// wait).
__device__ __forceinline__ void prefetch_l1(const void* address) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(address));
}

// The pages of a tile: one page of 16 tokens, or two of 8 (the second only when the history
// reaches it, so the block table is never read past its end).
template <int P>
__device__ __forceinline__ int2 tile_pages(const std::int32_t* table, int tile, int int2_len) {
  if (tile * kTileTokens >= int2_len) return make_int2(0, 0);
  if constexpr (P == 16) {
    return make_int2(table[tile], 0);
  } else {
    const bool second = tile * kTileTokens + 8 < int2_len;
    return make_int2(table[2 * tile], second ? table[2 * tile + 1] : 0);
  }
}

// A lane's part of copying a full tile, fixed for the whole kernel: its 16-byte chunks of the
// key and value rows (the same offsets in both pools) and, for lanes 0-7, one 16-byte chunk of
// four scale/zero words. A chunk's source is the lane's address in page 0 plus the page's offset
// (one widening multiply-add) and its destination the slot's shared address plus a constant, so
// a full tile costs a few instructions and one cp.async per chunk. P 8: a tile spans two pages,
// rows 0-7 (chunks in the low half) in the first and rows 8-15 in the second.
template <int D, int P>
struct TileCopy {
  static constexpr int kRowBytes = D / 4;
  static constexpr int kChunks = kTileTokens * kRowBytes / 16;  // per pool: 16, 32 or 64
  static constexpr int kPerLane = (kChunks + 31) / 32;
  static constexpr int kHalf = 8 * kRowBytes;                       // bytes of rows 0-7
  static constexpr unsigned kValueOffset = offsetof(TcTile<D>, v);  // after the key rows
  // One page of one pool in bytes of codes and of scale/zero words (at most 64 KiB: 32 bits
  // with a widening multiply by the page id).
  unsigned page_bytes, sz_page_bytes;
  std::uint64_t key_src[kPerLane];  // global address of the lane's key chunk in page 0
  std::uint64_t value_minus_key;    // from a key chunk to the same value chunk (wrapping)
  unsigned dst[kPerLane];           // the key chunk's offset in the tile
  bool code_high[kPerLane];         // from the tile's second page (P 8)
  std::uint64_t sz_src;             // lanes 0-7: their scale/zero chunk in page 0
  unsigned sz_dst;
  bool sz_high;

  __device__ void init(const DecodeParams& p, int kvh, int lane) {
    page_bytes = static_cast<unsigned>(p.num_kv_heads) * P * kRowBytes;
    sz_page_bytes = static_cast<unsigned>(p.num_kv_heads) * P * 4;
    const auto address = [](const void* ptr) { return reinterpret_cast<std::uint64_t>(ptr); };
    value_minus_key = address(p.v_codes) - address(p.k_codes);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int at = (lane + 32 * j) * 16;
      code_high[j] = P == 8 && at >= kHalf;
      key_src[j] = address(p.k_codes) +
                   static_cast<unsigned>(kvh * P * kRowBytes + (code_high[j] ? at - kHalf : at));
      dst[j] = static_cast<unsigned>(offsetof(TcTile<D>, k) + at);
    }
    const int row = 4 * (lane & 3);
    sz_high = P == 8 && row >= 8;
    sz_src = address(lane < 4 ? p.k_scale_zero : p.v_scale_zero) +
             4u * static_cast<unsigned>(kvh * P + (sz_high ? row - 8 : row));
    sz_dst = static_cast<unsigned>(
        (lane < 4 ? offsetof(TcTile<D>, ksz) : offsetof(TcTile<D>, vsz)) + 4 * row);
  }
};

// Issues the cp.async copies of one tile into the slot at shared address slot_at (generic
// pointer: dst): 16-byte chunks, each inside one row.
template <int D, int P>
__device__ __forceinline__ void issue_tile(const DecodeParams& p, const TileCopy<D, P>& copy,
                                           int2 pages, int kvh, int tile, int int2_len, int lane,
                                           unsigned slot_at, TcTile<D>& dst) {
  static_assert(P == 8 || P == 16, "a tile is one page of 16 or two pages of 8 tokens");
  using Copy = TileCopy<D, P>;
  constexpr int kRowBytes = Copy::kRowBytes, kChunks = Copy::kChunks;
  const int hkv = p.num_kv_heads, token0 = tile * kTileTokens;
  if (token0 + kTileTokens <= int2_len) {  // a full tile: the common case, uniform over the warp
#pragma unroll
    for (int j = 0; j < Copy::kPerLane; ++j) {
      const unsigned page = static_cast<unsigned>(copy.code_high[j] ? pages.y : pages.x);
      const std::uint64_t src =
          copy.key_src[j] + static_cast<std::uint64_t>(page) * copy.page_bytes;
      if constexpr (kChunks >= 32) {
        cp_async_16_to(slot_at + copy.dst[j], src);
        cp_async_16_to<Copy::kValueOffset>(slot_at + copy.dst[j], src + copy.value_minus_key);
      } else {
        cp_async_16_to_if(lane < kChunks, slot_at + copy.dst[j], src);
        cp_async_16_to_if(lane < kChunks, slot_at + copy.dst[j] + Copy::kValueOffset,
                          src + copy.value_minus_key);
      }
    }
    // Scale/zero words: 4 rows per chunk, lanes 0-3 keys, 4-7 values.
    const unsigned page = static_cast<unsigned>(copy.sz_high ? pages.y : pages.x);
    cp_async_16_to_if(lane < 8, slot_at + copy.sz_dst,
                      copy.sz_src + static_cast<std::uint64_t>(page) * copy.sz_page_bytes);
    return;
  }
  const std::int64_t row_lo = (static_cast<std::int64_t>(pages.x) * hkv + kvh) * P;
  const std::int64_t row_hi =
      P == 16 ? row_lo + 8 : (static_cast<std::int64_t>(pages.y) * hkv + kvh) * P;
#pragma unroll
  for (int c = lane; c < kChunks; c += 32) {
    const int j = c * 16 / kRowBytes, offset = c * 16 % kRowBytes;
    const std::int64_t row = j < 8 ? row_lo + j : row_hi + (j - 8);
    const bool valid = token0 + j < int2_len;
    const std::int64_t at = valid ? row * kRowBytes + offset : 0;
    cp_async_16(&dst.k[j][offset], p.k_codes + at, valid ? 16 : 0);
    cp_async_16(&dst.v[j][offset], p.v_codes + at, valid ? 16 : 0);
  }
  if (lane < 8) {  // scale/zero words: 4 rows per chunk, lanes 0-3 keys, 4-7 values
    const int j = 4 * (lane & 3);
    const std::int64_t row = j < 8 ? row_lo + j : row_hi + (j - 8);
    const int valid_rows = min(4, max(0, int2_len - (token0 + j)));
    const auto* pool =
        reinterpret_cast<const std::uint32_t*>(lane < 4 ? p.k_scale_zero : p.v_scale_zero);
    cp_async_16(lane < 4 ? &dst.ksz[j] : &dst.vsz[j], pool + (valid_rows > 0 ? row : 0),
                4 * valid_rows);
  }
}

// The page ids of a warp's tiles, read 32 tiles at a time (lane j holds tile base + j, one
// coalesced load) and the next 32 ahead, so that issuing a tile never waits on the block table.
template <int P>
struct PageIds {
  int base;       // first tile of `current`
  int2 current;   // tiles base .. base + 31
  int2 upcoming;  // tiles base + 32 .. base + 63

  __device__ static int2 fetch(const std::int32_t* table, int first, int end, int int2_len,
                               int lane) {
    const int tile = first + lane;
    return tile < end ? tile_pages<P>(table, tile, int2_len) : make_int2(0, 0);
  }
  __device__ void init(const std::int32_t* table, int first, int end, int int2_len, int lane) {
    base = first;
    current = fetch(table, first, end, int2_len, lane);
    upcoming = fetch(table, first + 32, end, int2_len, lane);
  }
  // The pages of `tile` (tiles are asked for in increasing order, at most 32 past the last).
  __device__ int2 of(int tile, const std::int32_t* table, int end, int int2_len, int lane) {
    if (tile >= base + 32) {  // warp-uniform
      base += 32;
      current = upcoming;
      upcoming = fetch(table, base + 32, end, int2_len, lane);
    }
    const int k = tile - base;
    return make_int2(__shfl_sync(kFullMask, current.x, k),
                     P == 8 ? __shfl_sync(kFullMask, current.y, k) : 0);
  }
};

// Shared memory of the tensor-core kernel: the warps' copy rings, reused at the end for the
// warps' combine and (in the block that merges) the split weights.
template <int D, int G>
__host__ __device__ constexpr std::size_t tc_ring_bytes() {
  return sizeof(TcTile<D>) * kTcStages<D> * kTcWarps<D>;
}
// The block's query fragment, built once in shared memory after the ring: the s8 words of every
// lane, the group's query terms (high and low, s8), and per head the step and the query sum.
template <int D, int G>
__host__ __device__ constexpr std::size_t tc_query_bytes() {
  constexpr int kColumnTiles = G > 4 ? 2 : 1;
  return sizeof(std::uint32_t) * kColumnTiles * (D / 16) * 32 + 2 * G * D + sizeof(float) * 2 * G;
}
// The BF16 windows read by the tensor-core blocks themselves (SplitRange::bf16_pages), where one
// grid does the whole call at batch 1 and small batches: no BF16 windows' grid, no wait for this
// one, and the last tensor-core block of each (sequence, KV head) merges by count. Each block takes
// every count-th BF16 page of its sequence (sink pages, then recent ones), copies their key and
// value rows into shared memory with its first tiles (cp.async, nothing waits on them), and
// computes their attention after its tile loop, as one more partial result in its warps' combine.
// OSCAR_TC_WINDOW_BYTES: the rows' room in shared memory (a token's rows are 4 d bytes: 64 tokens
// at d 128); the plan uses this path only where every block's pages fit it (decode_plan.h), and
// more pages (a bound broken by the caller) are read in further rounds, slower but the same result.
// 0 builds the kernel without it (the windows' grid then runs beside it, as before).
#ifndef OSCAR_TC_WINDOW_BYTES
#define OSCAR_TC_WINDOW_BYTES 32768
#endif
// OSCAR_TC_WINDOWS_PLAN=1 lets the plan choose the path; off by default, since it measured
// slower at batch 1 than the windows' grid (H100, 128K: 39.3-39.7 against 37.4-37.6 us, 16K 17.2
// against 16.2-16.7), while the kernel built with it (and its area) measured faster at every
// batch than the kernel built without it (OSCAR_TC_WINDOW_BYTES=0; docs/int2-kernels-history.md).
#ifndef OSCAR_TC_WINDOWS_PLAN
#define OSCAR_TC_WINDOWS_PLAN 0
#endif
template <int D>
inline constexpr int kTcWindowSlots = OSCAR_TC_WINDOW_BYTES / (4 * D);  // tokens a round
static_assert(OSCAR_TC_WINDOW_BYTES % 16384 == 0,
              "whole pages of 16 tokens a round at every head size (16 KiB at d 256)");

template <int D, int G>
__host__ __device__ constexpr std::size_t tc_base_smem_bytes() {
  constexpr std::size_t combine = sizeof(float) * kTcWarps<D> * G * (D + 2);
  constexpr std::size_t pipeline = tc_ring_bytes<D, G>() + tc_query_bytes<D, G>();
  return ((pipeline > combine ? pipeline : combine) + 15) / 16 * 16;
}
// The windows' area, after the ring, query and combine areas (alive from the first copies to the
// block's combine): key rows [slots][D] and value rows [slots][D] (bf16), the queries [G][D]
// (bf16), the scores [slots][G] and the windows' partial result: output [G][D], max [G], sum [G].
template <int D, int G>
struct TcWindowArea {
  static constexpr int kSlots = kTcWindowSlots<D>;
  static constexpr std::size_t kKeys = tc_base_smem_bytes<D, G>();
  static constexpr std::size_t kValues = kKeys + sizeof(bf16_bits) * kSlots * D;
  static constexpr std::size_t kQueries = kValues + sizeof(bf16_bits) * kSlots * D;
  static constexpr std::size_t kScores = kQueries + sizeof(bf16_bits) * G * D;
  static constexpr std::size_t kResult = kScores + sizeof(float) * kSlots * G;
  static constexpr std::size_t kEnd = kResult + sizeof(float) * G * (D + 2);
};
template <int D, int G>
__host__ __device__ constexpr std::size_t tc_smem_bytes() {
  return OSCAR_TC_WINDOW_BYTES > 0 ? TcWindowArea<D, G>::kEnd : tc_base_smem_bytes<D, G>();
}

// The BF16 pages a tensor-core block reads: pages split, split + count, ... of its sequence's
// sink_pages + recent_pages BF16 pages.
template <int P>
struct WindowPages {
  int sink_pages = 0, pages = 0, sink_len = 0, recent_len = 0, split = 0, count = 1;
  __device__ int mine() const { return split < pages ? (pages - split + count - 1) / count : 0; }
  // Valid tokens of the block's k-th page (0 past the end).
  __device__ int valid_rows(int k) const {
    const int vp = split + k * count;
    if (vp >= pages) return 0;
    return vp < sink_pages ? min(P, sink_len - vp * P) : min(P, recent_len - (vp - sink_pages) * P);
  }
  __device__ int page_id(const DecodeParams& p, int b, int k) const {
    return p
        .bf16_block_table[static_cast<std::int64_t>(b) * p.bf16_table_stride + split + k * count];
  }
};

// The page ids of a thread's pieces of round 0 (issue_window_rows: piece threadIdx.x + j W 32),
// read ahead into registers.
template <int D, int G, int P, int W>
struct WindowIds {
  static constexpr int kPieces = 2 * D / 16;  // 16-byte pieces of a row
  static constexpr int kCount = OSCAR_TC_WINDOW_BYTES > 0
                                    ? (kTcWindowSlots<D>* kPieces + W * 32 - 1) / (W * 32)
                                    : 1;
  __device__ static void read(const DecodeParams& p, const WindowPages<P>& pages, int b,
                              int (&ids)[kCount]) {
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      const int k = (static_cast<int>(threadIdx.x) + j * W * 32) / kPieces / P;
      ids[j] = k < pages.mine() ? pages.page_id(p, b, k) : 0;
    }
  }
};

// Issues round `round`'s copies of the block's BF16 rows (kSlots tokens from page round * kSlots
// / P on) into the windows' area, zeros for tokens past a page's valid rows; every thread takes
// its share of 16-byte pieces (round 0: their page ids read ahead, WindowIds). Not committed here.
template <int D, int G, int P, int W>
__device__ void issue_window_rows(const DecodeParams& p, const WindowPages<P>& pages, int b,
                                  int kvh, int round, unsigned char* smem,
                                  const int (&ids)[WindowIds<D, G, P, W>::kCount]) {
  using Area = TcWindowArea<D, G>;
  constexpr int kPieces = WindowIds<D, G, P, W>::kPieces, kThreads = W * 32;
  constexpr int kPagesARound = Area::kSlots / P;
  const int first_page = round * kPagesARound;
  const int slots = min(kPagesARound, pages.mine() - first_page) * P;
  auto* const keys = reinterpret_cast<bf16_bits*>(smem + Area::kKeys);
  auto* const values = reinterpret_cast<bf16_bits*>(smem + Area::kValues);
#pragma unroll
  for (int j = 0; j < WindowIds<D, G, P, W>::kCount; ++j) {
    const int piece = static_cast<int>(threadIdx.x) + j * kThreads;
    if (piece >= slots * kPieces) break;
    const int slot = piece / kPieces, at = piece % kPieces * 8;
    const int k = first_page + slot / P, row = slot % P;
    const bool valid = row < pages.valid_rows(k);
    const int page = round == 0 ? ids[j] : pages.page_id(p, b, k);
    const std::int64_t src =
        valid ? ((static_cast<std::int64_t>(page) * p.num_kv_heads + kvh) * P + row) * D + at : 0;
    cp_async_16(keys + slot * D + at, p.k_bf16 + src, valid ? 16 : 0);
    cp_async_16(values + slot * D + at, p.v_bf16 + src, valid ? 16 : 0);
  }
}

// The attention of the block's BF16 rows, as one partial result (output [G][D], max [G] in log2
// units, sum [G]) in the windows' area's result, for write_block_partial. Called by the whole
// block after its tile loop, once round 0's copies have landed (cp.async.wait_group 0 and a
// barrier); further rounds are copied and waited for here. Scores: warp w takes slots w, w + W,
// ...: a lane's D / 32 elements of the key row against each head's query, summed over the warp.
// The output: thread i takes elements i, i + W * 32, ... of [G][D], each over every slot.
template <int D, int G, int P, int W>
__device__ void window_partial(const DecodeParams& p, const WindowPages<P>& pages, int b, int kvh,
                               float scale_log2, unsigned char* smem) {
  using Area = TcWindowArea<D, G>;
  constexpr int kThreads = W * 32, kPerLane = D / 32;
  constexpr int kElements = (G * D + kThreads - 1) / kThreads;
  constexpr int kPagesARound = Area::kSlots / P;
  const bf16_bits* const keys = reinterpret_cast<const bf16_bits*>(smem + Area::kKeys);
  const bf16_bits* const values = reinterpret_cast<const bf16_bits*>(smem + Area::kValues);
  const bf16_bits* const queries = reinterpret_cast<const bf16_bits*>(smem + Area::kQueries);
  float* const scores = reinterpret_cast<float*>(smem + Area::kScores);  // [slots][G]
  float* const result = reinterpret_cast<float*>(smem + Area::kResult);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float m_run[kElements], l_run[kElements], o_run[kElements];
#pragma unroll
  for (int i = 0; i < kElements; ++i) {
    m_run[i] = -INFINITY;
    l_run[i] = o_run[i] = 0.0f;
  }
  const int rounds = (pages.mine() + kPagesARound - 1) / kPagesARound;
  for (int round = 0; round < rounds; ++round) {
    if (round > 0) {
      __syncthreads();  // the last round's rows and scores read
      const int no_ids[WindowIds<D, G, P, W>::kCount] = {};
      issue_window_rows<D, G, P, W>(p, pages, b, kvh, round, smem, no_ids);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    }
    const int first_page = round * kPagesARound;
    const int slots = min(kPagesARound, pages.mine() - first_page) * P;
    for (int slot = warp; slot < slots; slot += W) {
      float k[kPerLane];
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) k[e] = bf16_to_float(keys[slot * D + lane * kPerLane + e]);
      const bool valid = slot % P < pages.valid_rows(first_page + slot / P);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) {
          dot = fmaf(bf16_to_float(queries[g * D + lane * kPerLane + e]), k[e], dot);
        }
        dot = warp_sum(dot);
        if (lane == 0) scores[slot * G + g] = valid ? dot * scale_log2 : -INFINITY;
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kElements; ++i) {
      const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
      if (idx >= G * D) break;
      const int g = idx / D, e = idx % D;
      float m = m_run[i];
      for (int slot = 0; slot < slots; ++slot) m = fmaxf(m, scores[slot * G + g]);
      if (m == -INFINITY) continue;  // nothing valid yet
      const float alpha = m_run[i] == -INFINITY ? 0.0f : exp2f(m_run[i] - m);
      float l = l_run[i] * alpha, o = o_run[i] * alpha;
      for (int slot = 0; slot < slots; ++slot) {
        const float w = exp2f(scores[slot * G + g] - m);  // exp2(-inf) = 0 for invalid rows
        l += w;
        o = fmaf(w, bf16_to_float(values[slot * D + e]), o);
      }
      m_run[i] = m;
      l_run[i] = l;
      o_run[i] = o;
    }
  }
#pragma unroll
  for (int i = 0; i < kElements; ++i) {
    const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
    if (idx >= G * D) break;
    result[idx] = o_run[i];
    if (idx % D == 0) {
      result[G * D + idx / D] = m_run[i];
      result[G * D + G + idx / D] = l_run[i];
    }
  }
  __syncthreads();
}

// v, as a value the compiler cannot recompute (it keeps it in a register or spills it).
__device__ __forceinline__ int opaque_int(int v) {
  asm volatile("" : "+r"(v));
  return v;
}

// One block per multiprocessor (kTcWarps warps, registers capped at 128 a thread at d <= 128).
template <int D, int G, int P>
__global__ void __launch_bounds__(kTcWarps<D> * 32, 1)
    decode_int2_tc_kernel(DecodeParams p, float* part_o, SplitPartial* part_ml, SplitRange range,
                          MergeCount merge) {
  // The BF16-window kernel launched next shares no data with this one but the merge counters:
  // let it start at once (programmatic dependent launch) on the multiprocessors left free, once
  // this grid may read the cache (the work before it done, when this call is launched as a
  // programmatic dependent too).
  wait_then_allow_dependents();
  OSCAR_DECODE_POINT(0, 0);
  using Map = TcMap<D>;
  constexpr int KT = D / 16;  // k-tiles of S^T = m-tiles of O^T
  constexpr int NS = kTcStages<D>;
  constexpr int W = kTcWarps<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  // Opaque at G <= 4, so that they stay in registers: under the register cap the compiler re-read
  // %tid in the tile loop, an S2R of ~20 cycles on the path of every tile's shared-memory
  // addresses (d 128, G 4: 121 registers instead of 111; 128K batch 1 40.3-40.7 -> 39.9-40.0 us,
  // batch 8 245.6-246.0 -> 243.1-244.5 on an H100, same machine). At G = 8 the kernel is at the
  // cap already (128 registers with them opaque, 117 without) and left as it was.
  const int warp = G <= 4 ? opaque_int(threadIdx.x >> 5) : static_cast<int>(threadIdx.x >> 5);
  const int lane = G <= 4 ? opaque_int(threadIdx.x & 31) : static_cast<int>(threadIdx.x & 31);
  const int gid = lane >> 2, t = lane & 3;
  TcTile<D>* ring = reinterpret_cast<TcTile<D>*>(smem) + warp * NS;

  // S^T = K Q^T runs on integer tensor cores: u8 codes times s8 queries, each query element as two
  // s8 terms (high and low). n-tile j of S^T (8 columns) holds heads 4j .. 4j + 3, column 2h the
  // high and 2h + 1 the low term of head 4j + h, so lane (gid, t) loads head 4j + gid / 2 for its
  // B fragment and owns the scores of head 4j + t (columns 2t, 2t + 1 of its accumulator).
  constexpr int NT = G > 4 ? 2 : 1;
  // The queries' loads go first (warp h < G loads head h, D/32 elements a lane): they are
  // independent of the length and block-table reads the first copies wait on, so their latency
  // overlaps those.
  constexpr int kQPerLane = D / 32;
  using QLoad = std::conditional_t<kQPerLane == 2, unsigned,
                                   std::conditional_t<kQPerLane == 4, uint2, uint4>>;
  QLoad q_raw{};
  if (warp < G) {
    q_raw = reinterpret_cast<const QLoad*>(
        p.q + (static_cast<std::int64_t>(b) * p.num_q_heads + kvh * G + warp) * D)[lane];
  }
  // The BF16 windows' lengths, read beside the queries (SplitRange::bf16_pages).
  WindowPages<P> window;
  if (OSCAR_TC_WINDOW_BYTES > 0 && range.bf16_pages) {
    window.sink_len = p.sink_len[b];
    window.recent_len = p.recent_len[b];
  }

  // The block-table lines the warp's first page reads will touch, prefetched while the length is
  // read: its tile range worked out from the host's bound on the pages (max_pages_per_sequence,
  // exact for a sequence of that length but for its BF16 pages, whose tiles shift the ranges by a
  // few tiles: 64 tiles either side are taken), so that those reads find the table in L1 instead
  // of memory, a round trip fewer before the first tile. A loose bound only wastes the prefetches.
  // Only for long histories (bound of 32K tokens or more): there it took 1-2% off batches 8 and
  // 32 at 128K on the H200, neutral at 32K; at 4K, batch 1, it cost up to 0.7 us in one of two
  // builds. OSCAR_TABLE_PREFETCH=0 leaves them out, for timing studies.
  const std::int32_t* table =
      p.int2_block_table + static_cast<std::int64_t>(b) * p.int2_table_stride;
  const long long bound_tokens = static_cast<long long>(max(p.max_pages_per_sequence, 0)) * P;
  if (OSCAR_TABLE_PREFETCH && bound_tokens >= kTablePrefetchMinTokens) {
    constexpr int kEntriesPerTile = kTileTokens / P, kEntriesPerLine = 32;
    const long long bound_tiles = (bound_tokens + kTileTokens - 1) / kTileTokens;
    const long long split_tiles = (bound_tiles + range.count - 1) / range.count;
    const long long begin =
        split * split_tiles + warp * ((split_tiles + W - 1) / W);  // the warp's first tile
    const long long first_line = max(0LL, (begin - 64) * kEntriesPerTile) / kEntriesPerLine;
    const long long line = first_line + lane;
    if (lane < (128 * kEntriesPerTile) / kEntriesPerLine + 1 &&
        line * kEntriesPerLine < p.int2_table_stride) {
      prefetch_l1(table + line * kEntriesPerLine);
    }
  }

  // The block's BF16 pages and the page ids of this thread's first copies of them, read before
  // the tiles' page ids so that both round trips overlap.
  int window_ids[WindowIds<D, G, P, W>::kCount];
  if (OSCAR_TC_WINDOW_BYTES > 0 && range.bf16_pages) {
    window.sink_pages = (window.sink_len + P - 1) / P;
    window.pages = window.sink_pages + (window.recent_len + P - 1) / P;
    window.split = split;
    window.count = range.count;
    WindowIds<D, G, P, W>::read(p, window, b, window_ids);
  }

  // The split's tiles, then the warp's contiguous share of them.
  const int int2_len = p.int2_len[b];
  const int tiles = (int2_len + kTileTokens - 1) / kTileTokens;
  const int per_split = (tiles + range.count - 1) / range.count;
  const int split_begin = split * per_split, split_end = min(tiles, split_begin + per_split);
  const int per_warp = (max(0, split_end - split_begin) + W - 1) / W;
  const int tile_begin = split_begin + warp * per_warp;
  const int tile_end = min(split_end, tile_begin + per_warp);
  const int count = max(0, tile_end - tile_begin);

  TileCopy<D, P> copy;
  copy.init(p, kvh, lane);
  const unsigned ring_at = shared_address(ring);
  PageIds<P> page_ids;
  page_ids.init(table, tile_begin, tile_end, int2_len, lane);
  // Issues tile `tile` into ring slot `slot`.
  auto issue = [&](int tile, int slot) {
    const int2 pages = page_ids.of(tile, table, tile_end, int2_len, lane);
    issue_tile<D, P>(p, copy, pages, kvh, tile, int2_len, lane,
                     ring_at + slot * static_cast<unsigned>(sizeof(TcTile<D>)), ring[slot]);
  };

  // Start the pipeline before the query fragment: NS - 2 tiles in flight (two slots are being
  // computed on: one tile's scores, the previous tile's values).
#pragma unroll
  for (int s = 0; s < NS - 2; ++s) {
    if (s < count) issue(tile_begin + s, s);
    cp_async_commit();
  }
  // The block's pages kept in shared memory for window_partial, out of the tile loop's registers.
  __shared__ WindowPages<P> window_sm;
  const bool with_window = OSCAR_TC_WINDOW_BYTES > 0 && range.bf16_pages && window.mine() > 0;
  // The BF16 rows' first round, a group of their own after the ring's first tiles: a wait for
  // tile i (arrive) then also finds it landed from the second tile on, which costs nothing, and
  // the ring's count of groups is otherwise unchanged.
  if (with_window) {
    if (threadIdx.x == 0) window_sm = window;
    if constexpr (OSCAR_TC_WINDOW_BYTES > 0) {
      if (warp < G) {
        reinterpret_cast<QLoad*>(
            smem + TcWindowArea<D, G>::kQueries)[warp * (D / kQPerLane) + lane] = q_raw;
      }
      issue_window_rows<D, G, P, W>(p, window, b, kvh, 0, smem, window_ids);
    }
    cp_async_commit();
  }
  OSCAR_DECODE_POINT(0, 1);

  // Query fragment: per head, step = max|q| / 127 and for each element v = q / (step u), u the
  // key register's unit (1 or 4), hi = rint(v) and lo = rint((v - hi) 256), so that
  // q = step u (hi + lo / 256) to 2^-9 step u (13 bits of max|q| or better). Lanes of even gid
  // hold hi, of odd gid lo. The scores then come as exact integers: for each token,
  // q . c = step (256 H + L) / 256 with H, L the high and low columns. Every warp of the block
  // uses the same fragment, so the block builds it once in shared memory (after the ring): warp
  // h < G quantizes head h and sums it, then all threads pack the words of every lane (once per
  // lane instead of 16 warps each quantizing every element on the slow conversion pipe).
  constexpr int kQWords = NT * Map::kKRegs * 32;
  auto* const qf_sm = reinterpret_cast<std::uint32_t*>(smem + tc_ring_bytes<D, G>());
  auto* const terms_sm = reinterpret_cast<std::int8_t(*)[2][D]>(qf_sm + kQWords);  // [G][hi, lo]
  float* const head_step = reinterpret_cast<float*>(&terms_sm[G][0][0]);
  float* const head_sum = head_step + G;  // sum of the quantized query
  if (warp < G) {
    const auto* q_bits = reinterpret_cast<const bf16_bits*>(&q_raw);
    float q_max = 0.0f;
#pragma unroll
    for (int e = 0; e < kQPerLane; ++e) q_max = fmaxf(q_max, fabsf(bf16_to_float(q_bits[e])));
    q_max = __int_as_float(int2q::warp_max(__float_as_int(q_max)));  // q_max >= 0: int order
    const float inv_step = q_max > 0.0f ? 127.0f / q_max : 0.0f;
    float sum = 0.0f;  // in units of step
#pragma unroll
    for (int e = 0; e < kQPerLane; ++e) {
      const int element = lane * kQPerLane + e;
      const float unit = static_cast<float>(Map::field_unit(element / (D / 4)));
      const QueryTerms terms = split_query(bf16_to_float(q_bits[e]) * (inv_step / unit));
      sum += unit * (terms.hi + terms.lo * (1.0f / 256.0f));
      terms_sm[warp][0][element] = static_cast<std::int8_t>(terms.hi);
      terms_sm[warp][1][element] = static_cast<std::int8_t>(terms.lo);
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      head_step[warp] = q_max / 127.0f;
      head_sum[warp] = sum * (q_max / 127.0f);
    }
  }
  __syncthreads();
  for (int word = threadIdx.x; word < kQWords; word += W * 32) {
    const int owner = word % 32, r = (word / 32) % Map::kKRegs, j = word / (32 * Map::kKRegs);
    const int head = 4 * j + (owner >> 3);
    std::uint32_t packed = 0;
    if (head < G) {
      const std::int8_t* term = &terms_sm[head][(owner >> 2) & 1][Map::key_element(owner & 3, r)];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        packed |= static_cast<std::uint32_t>(std::uint8_t(term[e])) << (8 * e);
    }
    qf_sm[word] = packed;
  }
  __syncthreads();
  OSCAR_DECODE_POINT(0, 2);
  std::uint32_t qf[NT][Map::kKRegs];
  float q_sum_log2[NT], logit_unit[NT];
  {
    const float scale_log2 = p.softmax_scale * 1.4426950408889634f;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int r = 0; r < Map::kKRegs; ++r) qf[j][r] = qf_sm[(j * Map::kKRegs + r) * 32 + lane];
      const int head = 4 * j + t;  // the head whose scores this lane owns
      q_sum_log2[j] = head < G ? head_sum[head] * scale_log2 : 0.0f;
      logit_unit[j] = head < G ? head_step[head] * (scale_log2 / 256.0f) : 0.0f;
    }
  }

  float o[KT][4];
#pragma unroll
  for (int mt = 0; mt < KT; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  float m_run[NT], l_run[NT], zero_run[NT];  // of head 4j + t
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    m_run[j] = -INFINITY;
    l_run[j] = zero_run[j] = 0.0f;
  }

  // The scores of tile i+1 are computed before tile i's softmax and value product, so that their
  // loads, code expansion and mma chain overlap that work instead of preceding it in one serial
  // chain per tile: ScoreAcc holds S^T = K Q^T of a tile (integers: high and low columns).
  using ScoreAcc = int[NT][4];
  auto scores = [&](int i, ScoreAcc& acc) {
    const TcTile<D>& tile = ring[i % NS];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
    std::uint32_t kw0[Map::kKWords], kw1[Map::kKWords];
#pragma unroll
    for (int w = 0; w < Map::kKWords; ++w) {
      kw0[w] = reinterpret_cast<const std::uint32_t*>(tile.k[gid])[t * Map::kKWords + w];
      kw1[w] = reinterpret_cast<const std::uint32_t*>(tile.k[gid + 8])[t * Map::kKWords + w];
    }
    const KeyWords<D> k0 = key_words<D>(kw0), k1 = key_words<D>(kw1);
#pragma unroll
    for (int kt = 0; kt < D / 32; ++kt) {
      const std::uint32_t a0 = key_register<D>(k0, 2 * kt), a1 = key_register<D>(k1, 2 * kt);
      const std::uint32_t a2 = key_register<D>(k0, 2 * kt + 1);
      const std::uint32_t a3 = key_register<D>(k1, 2 * kt + 1);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        mma_16832_u8s8(acc[j], a0, a1, a2, a3, qf[j][2 * kt], qf[j][2 * kt + 1]);
      }
    }
  };
  // Waits for tile i (every lane's copies: of the NS - 2 + i groups committed so far, tile i's
  // is group i, so NS - 3 may still be pending), then refills the slot of tile i - 2 (its step
  // is done) with the tile NS - 2 ahead of i.
  auto arrive = [&](int i) {
    cp_async_wait<NS - 3>();
    __syncwarp();
    const int ahead = i + NS - 2;
    if (ahead < count) issue(tile_begin + ahead, ahead % NS);
    cp_async_commit();
  };

  // Softmax and value product of tile i from its scores; last_tag (std::true_type) marks the
  // sequence's last tile when it is partial.
  auto step = [&](int i, const ScoreAcc& acc, auto last_tag) {
    const TcTile<D>& tile = ring[i % NS];
    const int token0 = (tile_begin + i) * kTileTokens;
    // Exponent arguments x[h][j] = logit - m_run (log2 units) of token gid + 8h for head 4j + t.
    // logit = ks (q . c - kz q_sum) scale log2(e) becomes two fused multiply-adds per entry with
    // the per-row factors below; 256 H + L fits 26 bits, its float rounding is 2^-24 relative.
    float row_k[2][NT], row_kz[2], vs[2], vz[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // bf16 (scale, zero) pairs: a bf16 is the top half of its float.
      const std::uint32_t ksz = tile.ksz[gid + 8 * h], vsz = tile.vsz[gid + 8 * h];
      const float ks = __uint_as_float(ksz << 16), kz = __uint_as_float(ksz & 0xffff0000u);
#pragma unroll
      for (int j = 0; j < NT; ++j) row_k[h][j] = ks * logit_unit[j];
      row_kz[h] = ks * kz;
      vs[h] = __uint_as_float(vsz << 16);
      vz[h] = __uint_as_float(vsz & 0xffff0000u);
    }
    // Only the sequence's last tile can be partial; other tiles skip the masking at compile time.
    const bool partial = decltype(last_tag)::value && token0 + kTileTokens > int2_len;
    auto exponent = [&](int h, int j, float m) {
      const float s = __int2float_rn(acc[j][2 * h] * 256 + acc[j][2 * h + 1]);
      const float x = fmaf(s, row_k[h][j], -fmaf(row_kz[h], q_sum_log2[j], m));
      return partial && token0 + gid + 8 * h >= int2_len ? -INFINITY : x;
    };
    float x[2][NT];
    float x_max = -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        x[h][j] = exponent(h, j, m_run[j]);
        x_max = fmaxf(x_max, x[h][j]);
      }
    }
    // Online softmax that rescales only when some logit exceeds its head's running maximum by
    // more than kRescaleSlack (so p <= 2^kRescaleSlack; fp32 sums and the fp16 P' = p vs have
    // room for that): after the first tiles that is rare, and the common path needs no cross-lane
    // maximum and no rescaling. m_run = -inf makes every valid x +inf: the first tile rescales.
    if (__any_sync(kFullMask, x_max > kRescaleSlack)) {
      float alpha[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float logit0 = exponent(0, j, 0.0f), logit1 = exponent(1, j, 0.0f);
        // The tile's maximum over its 16 tokens (lanes of equal t).
        float mx = fmaxf(logit0, logit1);
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 16));
        const float m_new = fmaxf(m_run[j], mx);
        alpha[j] = m_new == -INFINITY ? 1.0f : fast_exp2(m_run[j] - m_new);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        m_run[j] = m_new;
        l_run[j] *= alpha[j];
        zero_run[j] *= alpha[j];
        x[0][j] = logit0 - m_use;
        x[1][j] = logit1 - m_use;
      }
      // Output columns 2t and 2t + 1 are heads t and t + 4 (see the P' fragment below).
#pragma unroll
      for (int mt = 0; mt < KT; ++mt) {
        o[mt][0] *= alpha[0];
        o[mt][2] *= alpha[0];
        if constexpr (NT > 1) {
          o[mt][1] *= alpha[NT - 1];
          o[mt][3] *= alpha[NT - 1];
        }
      }
    }
    // P' = p * v_scale, rounded to fp16 for the mma; the zero-point sum takes the same rounded
    // values, so that each token's codes and zero point are weighted alike (unrounded ones
    // measured 0.0028 instead of 0.0025 in the end-to-end KL of tests/test_paged_decode.cpp).
    float ps[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float pr = fast_exp2(x[h][j]);
        l_run[j] += pr;
        ps[h][j] = pr * vs[h];
      }
    }
    // Row gid (gid + 8) of P'^T as an 8x8 fp16 block, columns 2t and 2t + 1 = heads t and t + 4
    // (zero when G <= 4): transposed, column n of the value mma is head n / 2 + 4 (n % 2).
    const std::uint32_t p01 = pack_half2(ps[0][0], ps[0][1]), p23 = pack_half2(ps[1][0], ps[1][1]);
    {
      const float2 r01 = __half22float2(*reinterpret_cast<const __half2*>(&p01));
      const float2 r23 = __half22float2(*reinterpret_cast<const __half2*>(&p23));
      zero_run[0] = fmaf(r01.x, vz[0], fmaf(r23.x, vz[1], zero_run[0]));
      if constexpr (NT > 1)
        zero_run[NT - 1] = fmaf(r01.y, vz[0], fmaf(r23.y, vz[1], zero_run[NT - 1]));
    }
    const std::uint32_t pb0 = transpose_8x8(p01);
    const std::uint32_t pb1 = transpose_8x8(p23);
    // O^T += V^T P'^T, in units of 2^-24.
    if (!OSCAR_DECODE_ABLATE_VALUES) {
      std::uint32_t vrow[4][Map::kVWords];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const std::uint8_t* row = tile.v[2 * t + (r % 2) + 8 * (r / 2)] + gid * Map::kVBytes;
        if constexpr (Map::kVBytes == 2) {
          vrow[r][0] = *reinterpret_cast<const std::uint16_t*>(row);
        } else {
#pragma unroll
          for (int w = 0; w < Map::kVWords; ++w) {
            vrow[r][w] = reinterpret_cast<const std::uint32_t*>(row)[w];
          }
        }
      }
      const ValueBits<D> v01 = value_bits<D>(vrow[0], vrow[1]);
      const ValueBits<D> v89 = value_bits<D>(vrow[2], vrow[3]);
#pragma unroll
      for (int mt = 0; mt < KT; ++mt) {
        mma_16816(o[mt], value_register<D>(v01, 2 * mt), value_register<D>(v01, 2 * mt + 1),
                  value_register<D>(v89, 2 * mt), value_register<D>(v89, 2 * mt + 1), pb0, pb1);
      }
    }
  };
  const bool ends_partial = count > 0 && tile_end == tiles && int2_len % kTileTokens != 0;
  if (OSCAR_DECODE_ABLATE_TILES) {
    for (int i = 0; i < count; ++i) arrive(i);
  } else if (count > 0) {
    ScoreAcc s_now, s_next;
    arrive(0);
    OSCAR_DECODE_POINT(0, 3);
    scores(0, s_now);
    for (int i = 0; i + 1 < count; ++i) {
      arrive(i + 1);
      scores(i + 1, s_next);
      step(i, s_now, std::false_type{});
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c) s_now[j][c] = s_next[j][c];
      }
    }
    if (ends_partial) {
      step(count - 1, s_now, std::true_type{});
    } else {
      step(count - 1, s_now, std::false_type{});
    }
  }
  OSCAR_DECODE_WARP_POINT();
  cp_async_wait<0>();

  // Per-head sums over the warp's 8 token rows (lanes of equal t).
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      l_run[j] += __shfl_xor_sync(kFullMask, l_run[j], off);
      zero_run[j] += __shfl_xor_sync(kFullMask, zero_run[j], off);
    }
  }
  __syncthreads();  // the ring becomes the combine area
  auto& sm_o = *reinterpret_cast<float(*)[W][G][D]>(smem);
  auto& sm_m = *reinterpret_cast<float(*)[W][G]>(smem + sizeof(float) * W * G * D);
  auto& sm_l = *reinterpret_cast<float(*)[W][G]>(smem + sizeof(float) * W * G * (D + 1));
#pragma unroll
  for (int mt = 0; mt < KT; ++mt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = c & 1, head = t + 4 * j, r = 2 * mt + (c >> 1);
      if (j < NT && head < G) {
        const float unit = kSubnormalScale / static_cast<float>(1 << (2 * (r % 4)));
        sm_o[warp][head][Map::value_element(gid, r)] = o[mt][c] * unit - zero_run[j % NT];
      }
    }
  }
  if (gid == 0) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (t + 4 * j < G) {
        sm_m[warp][t + 4 * j] = m_run[j];
        sm_l[warp][t + 4 * j] = l_run[j];
      }
    }
  }
  __syncthreads();
  OSCAR_DECODE_POINT(0, 4);
  const float* window_result = nullptr;
  if constexpr (OSCAR_TC_WINDOW_BYTES > 0) {
    if (with_window) {
      window_partial<D, G, P, W>(p, window_sm, b, kvh, p.softmax_scale * 1.4426950408889634f, smem);
      window_result = reinterpret_cast<const float*>(smem + TcWindowArea<D, G>::kResult);
    }
  }
  const unsigned ticket = take_merge_ticket(merge, b, kvh);
  __shared__ SplitPartial block_ml[G];
  write_block_partial<D, G, W>(p, sm_m, sm_l, sm_o, b, kvh, split, range, part_o, part_ml,
                               merges_by_ticket(merge) ? block_ml : nullptr, window_result);
  OSCAR_DECODE_POINT(0, 5);
  if (merge.counters != nullptr && !merge.in_windows) {
    // Shared memory of the merge: reduce (W * 32 float4), then the weights and head_l.
    auto* const reduce = reinterpret_cast<float4*>(smem);
    merge_when_last<D, G, W>(p, merge, part_o, part_ml, b, kvh, range.offset + split, ticket,
                             block_ml, reinterpret_cast<float*>(reduce + W * 32), reduce);
  }
  OSCAR_DECODE_POINT(0, 6);
}

// Log-sum-exp merge of the splits: block per (sequence, q head) of kMergeThreads threads. The
// split weights exp2(m_s - m) go to shared memory in one parallel pass; then kMergeThreads / d
// groups of d threads each sum every group-th split (independent loads, so they overlap) and the
// groups are added through shared memory. A plain loop over the splits per element was latency
// bound (tens of microseconds at 100+ splits and batch 1).
constexpr int kMergeThreads = 512;
constexpr int kMergeMaxSplits = 2048;  // shared-memory weights; more splits loop in chunks

__global__ void __launch_bounds__(kMergeThreads)
    merge_splits_kernel(const float* part_o, const SplitPartial* part_ml, int num_splits, int d,
                        bf16_bits* out) {
  wait_then_allow_dependents();
  __shared__ float weight[kMergeMaxSplits];
  __shared__ float reduce[kMergeThreads / 32];
  __shared__ float group_o[kMergeThreads];
  const std::int64_t head = blockIdx.x;
  const SplitPartial* ml = part_ml + head * num_splits;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Global maximum.
  float m = -INFINITY;
  for (int s = tid; s < num_splits; s += kMergeThreads) m = fmaxf(m, ml[s].m);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, off));
  if (lane == 0) reduce[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < kMergeThreads / 32; ++w) m = fmaxf(m, reduce[w]);
  __syncthreads();

  const int groups = kMergeThreads / d, group = tid / d, e = tid % d;
  float o = 0.0f, l = 0.0f;
  for (int chunk = 0; chunk < num_splits; chunk += kMergeMaxSplits) {
    const int count = min(kMergeMaxSplits, num_splits - chunk);
    for (int s = tid; s < count; s += kMergeThreads) {
      const SplitPartial x = ml[chunk + s];
      weight[s] = x.m == -INFINITY ? 0.0f : exp2f(x.m - m);
      l += weight[s] * x.l;  // summed over the block below
    }
    __syncthreads();
    if (group < groups) {
      const float* po = part_o + (head * num_splits + chunk) * d + e;
      // Every split slot is written (empty splits as m = -inf, l = 0, o = 0), so the loads need
      // no guard and the unrolled loop keeps eight of them in flight.
#pragma unroll 8
      for (int s = group; s < count; s += groups) {
        o = fmaf(weight[s], po[static_cast<std::int64_t>(s) * d], o);
      }
    }
    __syncthreads();
  }
  for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(kFullMask, l, off);
  if (lane == 0) reduce[warp] = l;
  group_o[tid] = group < groups ? o : 0.0f;
  __syncthreads();
  if (tid < d) {
    float total_l = 0.0f, total_o = 0.0f;
    for (int w = 0; w < kMergeThreads / 32; ++w) total_l += reduce[w];
    for (int g = 0; g < groups; ++g) total_o += group_o[g * d + tid];
    out[head * d + tid] = float_to_bf16(total_l > 0.0f ? total_o / total_l : 0.0f);
  }
}

bool supported_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

// Lets the tensor-core kernel of a shape use its shared memory (over the 48 KiB default), once;
// false (message recorded) when the device refuses.
#ifndef OSCAR_TC_CARVEOUT
#define OSCAR_TC_CARVEOUT -1
#endif
template <int D, int G, int P>
bool tc_kernel_ready() {
  static const cudaError_t result = [] {
    cudaError_t e = cudaFuncSetAttribute(decode_int2_tc_kernel<D, G, P>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(tc_smem_bytes<D, G>()));
    if (e == cudaSuccess && OSCAR_TC_CARVEOUT >= 0) {
      e = cudaFuncSetAttribute(decode_int2_tc_kernel<D, G, P>,
                               cudaFuncAttributePreferredSharedMemoryCarveout, OSCAR_TC_CARVEOUT);
    }
    return e;
  }();
  return OSCAR_CUDA_OK(result);
}

// Whether the BF16-window kernel as loaded for this device waits for the grid it runs beside
// (code for compute capability 9.0 or later: the grid-dependency instructions), which a merge in
// the window grid relies on; code from the portable PTX on a later card does not.
template <int D, int G, int P>
bool windows_wait_for_tc_grid() {
  static const bool waits = [] {
    cudaFuncAttributes attr{};
    const bool ok = cudaFuncGetAttributes(&attr, decode_kernel<D, G, P>) == cudaSuccess;
    cudaGetLastError();
    return ok && attr.ptxVersion >= 90;
  }();
  return waits;
}

// Blocks of each decode kernel that fit on one multiprocessor (registers bound them).
struct Residency {
  int tc = 1, simt = 1;
};
template <int D, int G, int P>
Residency resident_blocks_of() {
  static const Residency blocks = [] {
    Residency r;
    int n = 0;
    if (tc_kernel_ready<D, G, P>() && cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                          &n, decode_int2_tc_kernel<D, G, P>, kTcWarps<D> * 32,
                                          tc_smem_bytes<D, G>()) == cudaSuccess) {
      r.tc = std::max(n, 1);
    }
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_kernel<D, G, P>, kDecodeWarps * 32,
                                                      0) == cudaSuccess) {
      r.simt = std::max(n, 1);
    }
    cudaGetLastError();
    return r;
  }();
  return blocks;
}

template <int D, int P>
Residency resident_blocks_dim(int group) {
  switch (group) {
    case 1:
      return resident_blocks_of<D, 1, P>();
    case 2:
      return resident_blocks_of<D, 2, P>();
    case 4:
      return resident_blocks_of<D, 4, P>();
    default:
      return resident_blocks_of<D, 8, P>();
  }
}

template <int P>
Residency resident_blocks_page(int d, int group) {
  switch (d) {
    case 64:
      return resident_blocks_dim<64, P>(group);
    case 128:
      return resident_blocks_dim<128, P>(group);
    default:
      return resident_blocks_dim<256, P>(group);
  }
}

Residency resident_blocks(const DecodeParams& p) {
  const int group = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 1;
  return p.page_size == 8 ? resident_blocks_page<8>(p.head_dim, group)
                          : resident_blocks_page<16>(p.head_dim, group);
}

using decode_plan::SplitPlan;
static_assert(decode_plan::DecodeShape{}.simt_warps == kDecodeWarps &&
                  decode_plan::DecodeShape{}.tile_tokens == kTileTokens,
              "the plan's default shape (tests/test_decode_plan.cpp) is this build's");

// The plan for this device and shape (decode_plan.h).
SplitPlan plan_splits(const DecodeParams& p) {
  decode_plan::DecodeShape shape;
  shape.multiprocessors = device_multiprocessors();
  if (p.path != DecodePath::kSimt && p.num_splits <= 0) {
    const Residency residency = resident_blocks(p);
    shape.tc_blocks = residency.tc;
    shape.simt_blocks = residency.simt;
  }
  shape.tc_warps = p.head_dim >= 256 ? kTcWarps<256> : kTcWarps<128>;
  // The tensor-core blocks may read the BF16 windows themselves where the pools allow their
  // 16-byte copies.
  if (OSCAR_TC_WINDOW_BYTES > 0 && OSCAR_TC_WINDOWS_PLAN && is_aligned(p.k_bf16, 16) &&
      is_aligned(p.v_bf16, 16)) {
    shape.tc_window_tokens = OSCAR_TC_WINDOW_BYTES / (4 * std::max(p.head_dim, 1));
  }
  shape.simt_warps = kDecodeWarps;
  shape.tile_tokens = kTileTokens;
  return decode_plan::plan_splits(p, shape);
}

// Partial results a single block merges in one level, at most (bytes per (sequence, KV head)):
// the Qwen3-8B shape at batch 1 reads 43 KB (21 splits, G 4, d 128), GQA 8 about 70 KB. Above
// it the merge takes two levels of about sqrt(splits) results each (one KV head, 133 splits, G
// 8, d 256: 1.1 MB in one block; ~100 KB a block in two levels).
constexpr std::size_t kOneLevelMergeBytes = 128 * 1024;

// Slots per first-level merge group for `total` splits (0: one level); at most kMaxMergeGroups.
template <int D, int G>
int merge_group_size(int total) {
  if (sizeof(float) * G * D * static_cast<std::size_t>(total) <= kOneLevelMergeBytes) return 0;
  int group = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(total))));
  return std::max(group, (total + kMaxMergeGroups - 1) / kMaxMergeGroups);
}

// Whether the last blocks of both kernels can merge in shared memory: the weights and head sums
// (G * (width + 1) floats) in the BF16 kernel's combine area (kDecodeWarps * G * D floats), and
// in the tensor-core kernel's after its reduce area (kTcWarps * 32 float4).
template <int D, int G>
bool merges_in_block(int width) {
  const std::size_t weights = sizeof(float) * G * (static_cast<std::size_t>(width) + 1);
  return width + 1 <= kDecodeWarps * D &&
         sizeof(float4) * kTcWarps<D> * 32 + weights <= tc_smem_bytes<D, G>();
}

// Launches the kernels of one shape, the split merge included; false (message recorded) when a
// launch fails.
template <int D, int G, int P>
bool launch_decode(const DecodeParams& p, const SplitPlan& plan, float* part_o,
                   SplitPartial* part_ml, unsigned* merge_counters) {
  const unsigned hkv = static_cast<unsigned>(p.num_kv_heads),
                 batch = static_cast<unsigned>(p.batch);
  const int total = plan.total();
  const dim3 simt_grid(static_cast<unsigned>(plan.simt_splits), hkv, batch);
  const SplitRange simt_range{0, plan.simt_splits, total};
  // The merge kernel, where no block merges.
  auto merge_kernel = [&] {
    const unsigned heads = static_cast<unsigned>(p.batch) * static_cast<unsigned>(p.num_q_heads);
    merge_splits_kernel<<<heads, kMergeThreads, 0, p.stream>>>(part_o, part_ml, total, D, p.out);
    return OSCAR_CUDA_OK(cudaGetLastError());
  };
  if (!plan.tensor_core) {
    if (!OSCAR_CUDA_OK(launch_kernel(decode_kernel<D, G, P>, simt_grid, dim3(kDecodeWarps * 32), 0,
                                     p.stream, p.enable_pdl, p, part_o, part_ml, simt_range, false,
                                     MergeCount{}))) {
      return false;
    }
    return merge_kernel();
  }
  // The INT2 tiles first: their blocks take whole multiprocessors, and a BF16 block resident
  // first would delay one of them by its whole run. The BF16 windows follow, started early on
  // what is left (programmatic dependent launch, Hopper). The last block of either kernel to
  // finish merges when the split weights fit in both kernels' shared memory. Where the plan puts
  // the windows in the tensor-core grid (simt_splits 0, no windows' merge) that grid is the only
  // one, and its blocks count among themselves.
  const int group = merge_group_size<D, G>(total);
  const bool fused = merges_in_block<D, G>(merge_width(total, group));
  const bool in_windows = OSCAR_WINDOWS_MERGE && plan.windows_merge && group == 0 &&
                          windows_wait_for_tc_grid<D, G, P>();
  const bool ablate_windows = OSCAR_DECODE_ABLATE_WINDOWS && in_windows;
  MergeCount merge = fused ? MergeCount{merge_counters, total, group, in_windows,
                                        in_windows && plan.merge_dry_pass && OSCAR_MERGE_DRY_PASS}
                           : MergeCount{};
  if (ablate_windows) merge = MergeCount{merge_counters, total, 0, false, false, plan.tc_splits};
  if (!tc_kernel_ready<D, G, P>()) return false;
  SplitRange tc_range{plan.simt_splits, plan.tc_splits, total};
  tc_range.bf16_pages = plan.windows_in_tc;
  if (!OSCAR_CUDA_OK(launch_kernel(decode_int2_tc_kernel<D, G, P>,
                                   dim3(static_cast<unsigned>(plan.tc_splits), hkv, batch),
                                   dim3(kTcWarps<D> * 32), tc_smem_bytes<D, G>(), p.stream,
                                   p.enable_pdl, p, part_o, part_ml, tc_range, merge))) {
    return false;
  }
  if (ablate_windows) return true;
  if (!plan.windows_in_tc) {
    cudaLaunchAttribute overlap;
    const cudaLaunchConfig_t config =
        launch_config(simt_grid, dim3(kDecodeWarps * 32), p.stream, true, overlap);
    if (!OSCAR_CUDA_OK(cudaLaunchKernelEx(&config, decode_kernel<D, G, P>, p, part_o, part_ml,
                                          simt_range, true, merge))) {
      return false;
    }
  }
  return fused ? true : merge_kernel();
}

// Status::kUnsupported when no kernel exists for the shape, kCudaError when a launch failed.
template <int D, int P>
Status dispatch_group(const DecodeParams& p, const SplitPlan& plan, float* o, SplitPartial* ml,
                      unsigned* counters) {
  bool ok = false;
  switch (p.num_q_heads / p.num_kv_heads) {
    case 1:
      ok = launch_decode<D, 1, P>(p, plan, o, ml, counters);
      break;
    case 2:
      ok = launch_decode<D, 2, P>(p, plan, o, ml, counters);
      break;
    case 4:
      ok = launch_decode<D, 4, P>(p, plan, o, ml, counters);
      break;
    case 8:
      ok = launch_decode<D, 8, P>(p, plan, o, ml, counters);
      break;
    default:
      return Status::kUnsupported;
  }
  return ok ? Status::kOk : Status::kCudaError;
}

template <int P>
Status dispatch_dim(const DecodeParams& p, const SplitPlan& plan, float* o, SplitPartial* ml,
                    unsigned* counters) {
  switch (p.head_dim) {
    case 64:
      return dispatch_group<64, P>(p, plan, o, ml, counters);
    case 128:
      return dispatch_group<128, P>(p, plan, o, ml, counters);
    case 256:
      return dispatch_group<256, P>(p, plan, o, ml, counters);
    default:
      return Status::kUnsupported;
  }
}

// ---------------------------------------------------------------------------------------------
// store_kv on tensor cores (StoreKvPath::kTensorCore and kTensorCoreSync; d 64 and 128). Centring
// and smoothing are folded into the rotation: ((x - mean) / s) R = x R' - b with R' = diag(1 / s) R
// and b = mean R', so a row enters the product as the bf16 row it is and each warp's tile is a
// plain copy (cp.async, no per-element division). x R' of a 32-token tile is two [16, d] x [d, d]
// products per warp on bf16 tensor cores (m16n8k16, float32 accumulation) with float32 accuracy
// kept by splitting R' into high and low bf16 terms (x R' ~ x R'_hi + x R'_lo; R'_lo is 2^-9 of
// R'_hi, what it drops 2^-17). Subtracting b after the product leaves the float32 rounding of terms
// as large as x R' instead of x' R: at |mean| 30x the spread of a channel that is 2^-24 * 30 *
// sqrt(d) relative, far below the bf16 rounding of the stored row (2^-9). The block keeps R'^T's
// two terms and b in shared memory for all its tiles; each warp copies its tile in, multiplies one
// 16-token half at a time (64 accumulators at d 128, so 16 warps fit a multiprocessor at 128
// registers), writes the bf16-rounded rows back over its tile buffer, copies them to BF16 slots,
// and quantizes INT2 slots one row per thread (int2r::quantize_row), whole warp on the rows that
// the threshold form declines. Every warp's work is a serial chain (copy, product, quantize); 16
// warps per multiprocessor overlap those chains where 8 left the issue slots idle, and each warp's
// next tile is copied in while it quantizes the current one. On Hopper (kWarpgroupMma in an sm_90a
// build) the product is the warpgroup MMA: the four warps of a warpgroup multiply their halves
// together, A from registers, R'^T read from shared memory by the MMA in 8 x 8 core matrices (no
// swizzle), 16 instructions per half instead of 256 mma.sync and 128 ldmatrix, and the rows go back
// with stmatrix (32768 tokens: 162 -> 114 us on an H100).
constexpr int kStoreTcWarps = 16;
constexpr int kStoreTcTokens = 32;
constexpr int kStoreTcWarpRows = 8;  // tiles of at most this many rows: quantized row by row

template <int D>
struct StoreTcLayout {
  static constexpr int kPitch = D + 8;  // bf16 per shared row: 16-byte rows, ldmatrix conflict-free
  static constexpr std::size_t kRotationBytes =
      std::size_t{2} * D * kPitch * sizeof(__nv_bfloat16);  // R'^T high and low terms
  static constexpr std::size_t kBiasBytes = std::size_t{2} * D * sizeof(float);  // b, then mean
  static constexpr std::size_t kTileBytes =
      std::size_t{kStoreTcTokens} * kPitch * sizeof(__nv_bfloat16);
  // Per warp the slots of its tile's tokens: BF16 then INT2, 32 each.
  static constexpr std::size_t kSlotBytes = std::size_t{2} * kStoreTcTokens * sizeof(std::int64_t);
  static constexpr std::size_t kBytes =
      kRotationBytes + kBiasBytes + kStoreTcWarps * (kTileBytes + kSlotBytes);
  static_assert(kRotationBytes % 16 == 0 && kBiasBytes % 16 == 0 && kTileBytes % 16 == 0 &&
                    kSlotBytes % 16 == 0,
                "16-byte aligned shared regions");
};

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void mma_16816_bf16(float (&c)[4], const std::uint32_t (&a)[4],
                                               std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// High and low bf16 terms of v (v - hi is exact in float; its rounding is the low term).
__device__ __forceinline__ void split_bf16(float v, __nv_bfloat16& hi, __nv_bfloat16& lo) {
  hi = __float2bfloat16_rn(v);
  lo = __float2bfloat16_rn(__fsub_rn(v, __bfloat162float(hi)));
}

// Hopper warpgroup MMA (sm_90a): D (m64 x N, float) += A (m64 x k16 bf16, registers: each warp
// its 16 rows in the mma.m16n8k16 A layout) x B (k16 x N bf16, shared memory, K-major, no
// swizzle: 8 x 16-byte core matrices of 128 contiguous bytes). The accumulators of each warp are
// its 16 rows in the mma.m16n8k16 C layout, n-tile by n-tile (d[4 nt + e]).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define OSCAR_STORE_WGMMA 1
#else
#define OSCAR_STORE_WGMMA 0
#endif

template <int N>
__device__ __forceinline__ void wgmma_bf16(float (&d)[N / 2], const std::uint32_t (&a)[4],
                                           std::uint64_t b_desc, int accumulate);

#if OSCAR_STORE_WGMMA
// A shared-memory matrix descriptor without swizzle: start address, the byte distance between
// core matrices adjacent in K (leading) and in N (stride), each in 16-byte units.
__device__ __forceinline__ std::uint64_t wgmma_descriptor(const void* smem, unsigned k_stride,
                                                          unsigned n_stride) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  return static_cast<std::uint64_t>((address & 0x3ffff) >> 4) |
         static_cast<std::uint64_t>((k_stride >> 4) & 0x3fff) << 16 |
         static_cast<std::uint64_t>((n_stride >> 4) & 0x3fff) << 32;
}

template <>
__device__ __forceinline__ void wgmma_bf16<128>(float (&d)[64], const std::uint32_t (&a)[4],
                                                std::uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_bf16<64>(float (&d)[32], const std::uint32_t (&a)[4],
                                               std::uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

__device__ __forceinline__ std::uint32_t bf16x2_bits(float low, float high) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}
// The stmatrix_x4 operands of n-tiles 2 np and 2 np + 1 of a warp's warpgroup-MMA accumulators
// (lane: rows g, g + 8, columns 2 t, 2 t + 1 of each n-tile): x R' - b rounded to bf16 pairs.
template <int N>
__device__ __forceinline__ void rotated_pair_bits(const float (&acc)[N], const float* bias, int np,
                                                  int t, std::uint32_t (&packed)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int nt = 2 * np + h, col = nt * 8 + 2 * t;
    const float2 b = *reinterpret_cast<const float2*>(bias + col);
    packed[2 * h] = bf16x2_bits(__fsub_rn(acc[4 * nt], b.x), __fsub_rn(acc[4 * nt + 1], b.y));
    packed[2 * h + 1] =
        bf16x2_bits(__fsub_rn(acc[4 * nt + 2], b.x), __fsub_rn(acc[4 * nt + 3], b.y));
  }
}
// The accumulators of a warp's 16 rows (the m16n8 C layout, n-tile by n-tile) set to -b, which
// shared memory holds (build_store_rotation): the products then accumulate onto it.
template <int N>
__device__ __forceinline__ void accumulators_at_minus_b(float (&acc)[N], const float* minus_b,
                                                        int t) {
#pragma unroll
  for (int nt = 0; nt < N / 4; ++nt) {
    const float2 m = *reinterpret_cast<const float2*>(minus_b + nt * 8 + 2 * t);
    acc[4 * nt] = m.x;
    acc[4 * nt + 1] = m.y;
    acc[4 * nt + 2] = m.x;
    acc[4 * nt + 3] = m.y;
  }
}
// The stmatrix_x4 operands of n-tiles 2 np and 2 np + 1 when the accumulators hold x R' - b.
template <int N>
__device__ __forceinline__ void rounded_pair_bits(const float (&acc)[N], int np,
                                                  std::uint32_t (&packed)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int nt = 2 * np + h;
    packed[2 * h] = bf16x2_bits(acc[4 * nt], acc[4 * nt + 1]);
    packed[2 * h + 1] = bf16x2_bits(acc[4 * nt + 2], acc[4 * nt + 3]);
  }
}
__device__ __forceinline__ void stmatrix_x4(__nv_bfloat16* row, const std::uint32_t (&r)[4]) {
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
// Ties a register to this point of the program, so that the compiler neither reads an accumulator
// nor reuses an operand register while an asynchronous warpgroup MMA may still use it.
__device__ __forceinline__ void register_fence(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void register_fence(std::uint32_t& x) {
  asm volatile("" : "+r"(x)::"memory");
}
#endif

// The rows of a warp's tile that the row-per-thread quantizer declined (`declined` on their
// lanes), quantized by the whole warp from the lanes' registers: lane l takes elements l + 32 m,
// the low (even l) or high half of word l / 2 + 16 m of the row's lane.
template <int D>
__device__ __forceinline__ void quantize_declined_rows(const unsigned (&w)[D / 2], std::int64_t row,
                                                       bool declined, float clip,
                                                       std::uint8_t* codes_pool,
                                                       bf16_bits* scale_zero_pool) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  for (unsigned rest = __ballot_sync(kFullMask, declined); rest != 0; rest &= rest - 1) {
    const int r = __ffs(rest) - 1;
    const std::int64_t dst_row = __shfl_sync(kFullMask, row, r);
    float rotated[D / 32];
#pragma unroll
    for (int m = 0; m < D / 32; ++m) {
      unsigned word = 0;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const unsigned v = __shfl_sync(kFullMask, w[16 * m + j], r);
        if ((lane >> 1) == j) word = v;
      }
      rotated[m] = __uint_as_float((lane & 1) != 0 ? word & 0xffff0000u : word << 16);
    }
    quantize_row_bf16<D>(rotated, clip, codes_pool + dst_row * (D / 4),
                         scale_zero_pool + 2 * dst_row);
  }
}

// A tile of few rows (a decode step's), quantized row by row by the whole warp (a row per thread
// is a long serial chain there): row r of the tile goes to pool row `row` of lane r (< 0: none);
// element(r, i) reads element i of the tile's rotated row r from shared memory.
template <int D, typename Element>
__device__ __forceinline__ void quantize_rows_by_warp(std::int64_t row, float clip,
                                                      std::uint8_t* codes_pool,
                                                      bf16_bits* scale_zero_pool,
                                                      const Element& element) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  for (unsigned rest = __ballot_sync(kFullMask, row >= 0); rest != 0; rest &= rest - 1) {
    const int r = __ffs(rest) - 1;
    const std::int64_t dst_row = __shfl_sync(kFullMask, row, r);
    float rotated[D / 32];
#pragma unroll
    for (int m = 0; m < D / 32; ++m) rotated[m] = __bfloat162float(element(r, lane + 32 * m));
    quantize_row_bf16<D>(rotated, clip, codes_pool + dst_row * (D / 4),
                         scale_zero_pool + 2 * dst_row);
  }
}

// Pass U .. kPasses - 1 of a full tile's copies: kPassBytes further on in shared memory, `step`
// further on in global memory, per pass.
template <unsigned kPassBytes, int kPasses, int U = 0>
__device__ __forceinline__ void store_tc_copy_passes(unsigned dst, std::uint64_t from,
                                                     std::uint64_t step) {
  if constexpr (U < kPasses) {
    cp_async_16_to<U * kPassBytes>(dst, from);
    store_tc_copy_passes<kPassBytes, kPasses, U + 1>(dst, from + step, step);
  }
}

// Issues (and commits) the copies of one warp's tile: its rows as they are (zero rows past the
// store's tokens) and its tokens' BF16 and INT2 slots beside them (read from shared memory only for
// tokens below the tile's count).
template <int D>
__device__ __forceinline__ void store_tc_copy_tile(const StoreKvParams& p, const bf16_bits* src,
                                                   int head, std::int64_t tile,
                                                   __nv_bfloat16* tile_rows,
                                                   std::int64_t* tile_slots) {
  constexpr int kChunks = D / 8;  // 16-byte chunks of a row
  constexpr int P = StoreTcLayout<D>::kPitch;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t token0 = tile * kStoreTcTokens;
  const int count = static_cast<int>(p.num_tokens - token0 < kStoreTcTokens ? p.num_tokens - token0
                                                                            : kStoreTcTokens);
  if (lane < count) {
    if (p.bf16_slot != nullptr) cp_async_8(tile_slots + lane, p.bf16_slot + token0 + lane);
    if (p.int2_slot != nullptr) {
      cp_async_8(tile_slots + kStoreTcTokens + lane, p.int2_slot + token0 + lane);
    }
  }
  if (count == kStoreTcTokens) {
    // A full tile: lane's chunk column is fixed and its rows step by a constant, so one base
    // address each side and constant offsets. The general form below spent ~400 warp
    // instructions a tile on 64-bit address arithmetic (7.2 M of the d 128 store's 38.9 M for
    // 32768 tokens x 8 heads, 1.7 M now; into INT2 on an H100 93.3-93.6 -> 87.9-88.9 us).
    constexpr int kRowsPerPass = 32 / kChunks;
    const int r0 = lane / kChunks, c = (lane % kChunks) * 8;
    const std::uint64_t from =
        reinterpret_cast<std::uint64_t>(src + ((token0 + r0) * p.num_kv_heads + head) * D + c);
    const std::uint64_t step =
        static_cast<std::uint64_t>(kRowsPerPass) * p.num_kv_heads * D * sizeof(bf16_bits);
    store_tc_copy_passes<kRowsPerPass * P * 2, kStoreTcTokens / kRowsPerPass>(
        shared_address(tile_rows + r0 * P + c), from, step);
  } else {
#pragma unroll
    for (int u = 0; u < kStoreTcTokens * kChunks / 32; ++u) {
      const int idx = lane + 32 * u, t = idx / kChunks, c = (idx % kChunks) * 8;
      const bool live = t < count;
      cp_async_16(tile_rows + t * P + c,
                  live ? src + ((token0 + t) * p.num_kv_heads + head) * D + c : src, live ? 16 : 0);
    }
  }
  cp_async_commit();
}

// Bytes of one (K or V, KV head) of a prepared rotation: R'^T's high and low bf16 terms, then b
// as float32 (a multiple of 16 bytes).
__host__ __device__ constexpr std::size_t store_prepared_entry_bytes(int d) {
  return std::size_t{4} * d * d + std::size_t{4} * d;
}

// Byte offset of the entry of (K or V, KV head) in a prepared rotation: K's heads, then V's.
__device__ __forceinline__ std::int64_t store_prepared_entry_offset(int d, int num_kv_heads,
                                                                    bool is_key, int head) {
  return (static_cast<std::int64_t>(is_key ? 0 : 1) * num_kv_heads + head) *
         static_cast<std::int64_t>(store_prepared_entry_bytes(d));
}

// R'^T element (column j, row i) in the store kernel's shared memory: rows of pitch
// StoreTcLayout<D>::kPitch for ldmatrix, or 8 x 8 core matrices (128 contiguous bytes, K-major)
// for the warpgroup MMA. The prepared form (prepare_store_kv) keeps the core-matrix order.
template <int D, bool kCoreLayout>
__device__ __forceinline__ int store_rt_index(int j, int i) {
  return kCoreLayout ? (j / 8) * (D * 8) + (i / 8) * 64 + (j % 8) * 8 + (i % 8)
                     : j * StoreTcLayout<D>::kPitch + i;
}

// Chunk t (16 bytes, 8 rows i of one column j) of a prepared term in core-matrix order: column
// j = 8 (t / D) + t % 8, rows from 8 ((t % D) / 8).
template <int D>
__device__ __forceinline__ void prepared_chunk_position(int t, int& j, int& i) {
  j = (t / D) * 8 + t % 8;
  i = ((t % D) / 8) * 8;
}

// Builds R'^T's high and low terms and b in shared memory for (head, K or V) from the store's
// rotation, mean and smoothing, with all kStoreTcWarps warps of the block; what it writes is
// visible to the block on return.
template <int D, bool kCoreLayout>
__device__ __forceinline__ void build_store_rotation(const StoreKvParams& p, int head, bool is_key,
                                                     __nv_bfloat16* r_hi, __nv_bfloat16* r_lo,
                                                     float* bias, float* mean_sm) {
  constexpr int kThreads = kStoreTcWarps * 32;
  // R' = diag(1 / s) R as high / low terms, transposed; then -b, b = mean R' from those terms (so
  // that x R'_split - b is (x - mean) R'_split up to float32 rounding).
  const float* rot =
      (is_key ? p.k_rotation : p.v_rotation) + static_cast<std::int64_t>(head) * D * D;
  const float* mean = is_key ? p.k_mean : p.v_mean;
  const float* smooth = is_key ? p.k_smooth : nullptr;
  if (mean != nullptr) mean += head * D;
  if (smooth != nullptr) smooth += head * D;
  {
    // Every load of R (and of the smoothing scales) issued before the first is used: a loop of
    // load-then-store waited for memory once per iteration. A warp's lanes take consecutive rows
    // i of R and the same four columns, so that their stores into R'^T (row j, column i) are
    // consecutive: a float4 per lane along a row of R put them 1088 bytes apart, a 16-way bank
    // conflict on every store (Nsight Compute: a one-token store 27.5 -> 22.1 us without it).
    constexpr int kVectors = D * D / 4 / kThreads;  // float4 of R per thread: 8 at d 128
    static_assert(kVectors * 4 * kThreads == D * D, "R in whole float4 per thread");
    float4 r4[kVectors];
    float inv[kVectors];  // the smoothing scale, then its reciprocal
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int v = static_cast<int>(threadIdx.x) + u * kThreads, i = v % D, j = 4 * (v / D);
      r4[u] = __ldg(reinterpret_cast<const float4*>(rot + i * D + j));
      inv[u] = smooth != nullptr ? __ldg(smooth + i) : 1.0f;
    }
    // The mean goes to shared memory with the same round of loads (read from global memory in
    // b's loop below, its loads would be waited on one after another).
    const float mean_element =
        mean != nullptr && threadIdx.x < D ? __ldg(mean + threadIdx.x) : 0.0f;
    __syncwarp();  // a memory-ordering point: the compiler keeps every load above it
    if (threadIdx.x < D) mean_sm[threadIdx.x] = mean_element;
      // R'[i][j] = R[i][j] * (1 / s[i]): one reciprocal per row instead of an IEEE division per
      // element (a subroutine call each; ~10% of a one-token store). It differs from R / s by an
      // ulp at most, far below what the bf16 split keeps (2^-17).
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int v = static_cast<int>(threadIdx.x) + u * kThreads, i = v % D, j = 4 * (v / D);
      const float r[4] = {r4[u].x, r4[u].y, r4[u].z, r4[u].w};
      const float reciprocal = __frcp_rn(inv[u]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float folded = smooth != nullptr ? __fmul_rn(r[e], reciprocal) : r[e];
        split_bf16(folded, r_hi[store_rt_index<D, kCoreLayout>(j + e, i)],
                   r_lo[store_rt_index<D, kCoreLayout>(j + e, i)]);
      }
    }
  }
#if OSCAR_STORE_WGMMA
  // R' is read by the warpgroup MMA through the async proxy: order these writes before it.
  if (kCoreLayout) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
  __syncthreads();
  {
    constexpr int kParts = kThreads / D;  // threads per column of b
    const int j = static_cast<int>(threadIdx.x) / kParts,
              part = static_cast<int>(threadIdx.x) % kParts;
    float b = 0.0f;
    if (mean != nullptr) {
      for (int i = part; i < D; i += kParts) {
        const float r = __bfloat162float(r_hi[store_rt_index<D, kCoreLayout>(j, i)]) +
                        __bfloat162float(r_lo[store_rt_index<D, kCoreLayout>(j, i)]);
        b = fmaf(mean_sm[i], r, b);
      }
    }
#pragma unroll
    for (int off = kParts / 2; off > 0; off >>= 1) b += __shfl_xor_sync(kFullMask, b, off);
    // -b: the kernels start their accumulators there (0 - b: +0 where b is 0).
    if (part == 0) bias[j] = 0.0f - b;
  }
  __syncthreads();
}

// Copies a prepared rotation's R'^T terms and b for (head, K or V) into shared memory (16-byte
// cp.async, consecutive threads on consecutive chunks: contiguous in memory, and conflict-free in
// either shared layout); visible to the block on return. copies_after() issues and commits one
// more group of copies, which may still be in flight on return.
template <int D, bool kCoreLayout, typename CopiesAfter>
__device__ __forceinline__ void load_prepared_rotation(const StoreKvParams& p, int head,
                                                       bool is_key, __nv_bfloat16* r_hi,
                                                       __nv_bfloat16* r_lo, float* bias,
                                                       CopiesAfter&& copies_after) {
  constexpr int kThreads = kStoreTcWarps * 32;
  constexpr int kTermChunks = D * D / 8;  // 16-byte chunks of one term
  const auto* entry = static_cast<const unsigned char*>(p.prepared) +
                      store_prepared_entry_offset(D, p.num_kv_heads, is_key, head);
  for (int c = static_cast<int>(threadIdx.x); c < 2 * kTermChunks + D / 4; c += kThreads) {
    void* dst;
    if (c < 2 * kTermChunks) {
      int j, i;
      prepared_chunk_position<D>(c % kTermChunks, j, i);
      dst = (c < kTermChunks ? r_hi : r_lo) + store_rt_index<D, kCoreLayout>(j, i);
    } else {
      dst = bias + 4 * (c - 2 * kTermChunks);
    }
    cp_async_16(dst, entry + std::int64_t{16} * c, 16);
  }
  cp_async_commit();
  copies_after();  // commits exactly one group
  cp_async_wait<1>();
#if OSCAR_STORE_WGMMA
  // R' is read by the warpgroup MMA through the async proxy: order these writes before it.
  if (kCoreLayout) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
  __syncthreads();
}

// Builds the prepared rotation of every (K or V, KV head): one block each, R'^T's terms and b
// built in shared memory as the store kernel builds them, then written out in core-matrix order.
template <int D>
__global__ void __launch_bounds__(kStoreTcWarps * 32)
    prepare_store_kv_kernel(StoreKvParams p, void* prepared) {
  using Layout = StoreTcLayout<D>;
  constexpr int kThreads = kStoreTcWarps * 32;
  constexpr int kTermChunks = D * D / 8;
  extern __shared__ __align__(16) unsigned char store_tc_smem[];
  __nv_bfloat16* const r_hi = reinterpret_cast<__nv_bfloat16*>(store_tc_smem);
  __nv_bfloat16* const r_lo = r_hi + D * Layout::kPitch;
  float* const bias = reinterpret_cast<float*>(store_tc_smem + Layout::kRotationBytes);  // -b
  const int head = static_cast<int>(blockIdx.x);
  const bool is_key = store_side_is_key(p, blockIdx.y, gridDim.y, true);
  build_store_rotation<D, false>(p, head, is_key, r_hi, r_lo, bias, bias + D);
  auto* entry = static_cast<unsigned char*>(prepared) +
                store_prepared_entry_offset(D, p.num_kv_heads, is_key, head);
  for (int c = static_cast<int>(threadIdx.x); c < 2 * kTermChunks + D / 4; c += kThreads) {
    uint4 chunk;
    if (c < 2 * kTermChunks) {
      int j, i;
      prepared_chunk_position<D>(c % kTermChunks, j, i);
      chunk = *reinterpret_cast<const uint4*>((c < kTermChunks ? r_hi : r_lo) +
                                              store_rt_index<D, false>(j, i));
    } else {
      chunk = *reinterpret_cast<const uint4*>(bias + 4 * (c - 2 * kTermChunks));
    }
    *reinterpret_cast<uint4*>(entry + std::int64_t{16} * c) = chunk;
  }
}

// ---------------------------------------------------------------------------------------------
// store_kv for sides whose rows arrive rotated: the pair helpers first, then the kernel.
//
// Pairs of lanes per row (int2q::store_row_pair) in store_kv_rows_kernel at this head size.
template <int D>
constexpr bool kStoreRowsPairs = (D == 256 && OSCAR_STORE_ROWS256_PAIRS) ||
                                 (D == 128 && OSCAR_STORE_ROWS128_PAIRS);

// A pair lane's half of its row (u: its D / 4 words, int2q::for_each_pair_chunk's layout) written
// to BF16 pool row bf16_row and quantized with the partner into INT2 pool row int2_row (either < 0:
// none); the whole warp calls it. Returns whether the row is done: no INT2 row, or stored (false:
// the quantizer declined it, on both lanes). Shared by the d 256 store and the rows kernel.
template <int D>
__device__ __forceinline__ bool store_pair_half_row(const unsigned (&u)[D / 4], int half,
                                                    int clip_k, bool thread_path,
                                                    std::int64_t bf16_row, std::int64_t int2_row,
                                                    bf16_bits* bf16_pool, std::uint8_t* codes_pool,
                                                    bf16_bits* scale_zero_pool) {
  if (bf16_row >= 0) {
    bf16_bits* const dst = bf16_pool + bf16_row * D + half * (D / 8);
    int2q::for_each_pair_chunk<D>([&](int offset, int word) {
      *reinterpret_cast<uint4*>(dst + offset) =
          make_uint4(u[word], u[word + 1], u[word + 2], u[word + 3]);
    });
  }
#if OSCAR_STORE_ABLATE_QUANTIZE
  if (int2_row >= 0) {
    unsigned c4[4] = {0, 0, 0, 0};
#pragma unroll
    for (int m = 0; m < D / 4; ++m) c4[m % 4] ^= u[m];
    reinterpret_cast<uint4*>(codes_pool + int2_row * (D / 4) + half * (D / 8))[0] =
        make_uint4(c4[0], c4[1], c4[2], c4[3]);
    if (half == 0) reinterpret_cast<unsigned*>(scale_zero_pool)[int2_row] = c4[0];
  }
  return true;
#else
  // The pair quantizer's shuffles need the whole warp; a pass with no INT2 row (a BF16-only
  // store, the rows past a short tile) skips it as a whole.
  bool done = int2_row < 0;
  if (thread_path && __any_sync(kFullMask, int2_row >= 0)) {
    const bool served =
        int2q::store_row_pair<D>(u, half, clip_k, codes_pool, scale_zero_pool, int2_row);
    done = done || served;
  }
  return done;
#endif
}

// Whether row `lane` of a warp's 32 rows, quantized by pairs of lanes in two passes of 16, was left
// to the whole warp: it was pair lane & 15's row in pass lane >> 4, and left[pass] is that pass's
// ballot of the pairs' first lanes (bit 2 j: pair j's row left).
__device__ __forceinline__ bool pair_row_left(const unsigned (&left)[2], int lane) {
  return ((left[lane >> 4] >> (2 * (lane & 15))) & 1u) != 0;
}

// The vector path's rows by pairs of lanes (int2q::store_row_pair), as the d 256 tensor-core store
// quantizes them: pass `pass` takes the warp's rows 16 pass + j on lanes 2 j and 2 j + 1, each
// loading and holding half the row's words (half a row's registers), copying them to the row's
// BF16 slot and quantizing with its partner. Returns the rows left to the whole warp (bit t: row
// t; their BF16 copies done). bf16_row and int2_row are lane t's row t's pool rows (< 0: none).
template <int D>
__device__ __forceinline__ unsigned store_rows_by_pairs(
    const bf16_bits* src, std::int64_t src_stride, int count, std::int64_t bf16_row,
    std::int64_t int2_row, int clip_k, bool thread_path, bf16_bits* bf16_pool,
    std::uint8_t* codes_pool, bf16_bits* scale_zero_pool) {
  const int lane = static_cast<int>(threadIdx.x & 31), half = lane & 1;
  unsigned left[2] = {0, 0};  // per pass, bit 2 j: the row of pair j is left to the warp
#pragma unroll 1
  for (int pass = 0; 16 * pass < count; ++pass) {  // warp-uniform
    const int local = 16 * pass + (lane >> 1);
    const std::int64_t pair_bf16_row = __shfl_sync(kFullMask, bf16_row, local);
    const std::int64_t pair_int2_row = __shfl_sync(kFullMask, int2_row, local);
    const bool live = local < count;
    // All of a lane's loads issued before its first use (rows are read once: streamed).
    unsigned u[D / 4];
    const bf16_bits* row = src + (live ? local : 0) * src_stride + half * (D / 8);
    int2q::for_each_pair_chunk<D>([&](int offset, int word) {
      int2q::unpack_words(
          live ? __ldcs(reinterpret_cast<const uint4*>(row + offset)) : make_uint4(0, 0, 0, 0),
          &u[word]);
    });
    const bool pair_stored =
        store_pair_half_row<D>(u, half, clip_k, thread_path, pair_bf16_row, pair_int2_row,
                               bf16_pool, codes_pool, scale_zero_pool);
    const unsigned pass_left = __ballot_sync(kFullMask, !pair_stored && half == 0);
    if (pass == 0) {
      left[0] = pass_left;
    } else {
      left[1] = pass_left;
    }
  }
  return __ballot_sync(kFullMask, lane < count && pair_row_left(left, lane));
}

// store_kv for a side whose rows arrive already rotated (its rotation null: R, and the mean, folded
// into the projection that produced them): each row is copied to its BF16 slot and / or quantized
// into its INT2 slot as it is. A warp takes 32 consecutive tokens of one (KV head, K or V), or one
// token in a store of at most kStoreTcWarpRows tokens (which the warp would otherwise take row by
// row: a batch of decode steps' rows then goes through as many warps side by side).
//   - INT2 slots, 16-byte aligned pointers and more than kStoreTcWarpRows rows: each thread holds
//     its row as 16-byte vectors, writes it to its BF16 slot, and quantizes it alone (int2r, as the
//     row-per-thread demotion: no cross-lane work); at d 256 a pair of lanes does so for each row
//     (store_rows_by_pairs). The rows that quantizer declines go to the whole warp.
//   - BF16 slots only: the warp copies its rows with consecutive lanes on consecutive 16-byte
//     chunks (whole rows per instruction, where a row per thread would write 16-byte pieces of 32
//     different rows).
//   - otherwise (a decode step's few rows, or unaligned pointers): the warp takes the rows one by
//     one, lane l holding elements l + 32 m, as the float32 path does.
// store_rows_of_warp stores the warp's `tokens` tokens (32 or 1) from token0 (< num_tokens) of
// (head, K or V); the whole warp calls it.
template <int D>
__device__ void store_rows_of_warp(const StoreKvParams& p, bool is_key, int head,
                                   std::int64_t token0, int tokens, bool vectors) {
  constexpr int kChunks = D / 8;  // 16-byte chunks of a row
  const int lane = static_cast<int>(threadIdx.x & 31), hkv = p.num_kv_heads;
  const int count =
      p.num_tokens - token0 < tokens ? static_cast<int>(p.num_tokens - token0) : tokens;
  const bf16_bits* src = (is_key ? p.k : p.v) + (token0 * hkv + head) * D;  // token0's row
  const std::int64_t src_stride = static_cast<std::int64_t>(hkv) * D;       // between tokens
  bf16_bits* bf16_pool = is_key ? p.k_bf16 : p.v_bf16;
  std::uint8_t* codes_pool = is_key ? p.k_codes : p.v_codes;
  bf16_bits* scale_zero_pool = is_key ? p.k_scale_zero : p.v_scale_zero;
  const bool mine = lane < count;
  const std::int64_t bf16_row = slot_pool_row(
      p.bf16_slot != nullptr && mine ? p.bf16_slot[token0 + lane] : -1, p.page_size, hkv, head);
  const std::int64_t int2_row = slot_pool_row(
      p.int2_slot != nullptr && mine ? p.int2_slot[token0 + lane] : -1, p.page_size, hkv, head);
  const float clip = p.int2_slot != nullptr ? __ldg((is_key ? p.k_clip : p.v_clip) + head) : 1.0f;
  const int clip_k = int2q::clip_position<D>(clip);

  if (vectors && p.int2_slot == nullptr) {
    // Eight chunks a lane in flight before the first store: a load-then-store loop would wait for
    // memory once per chunk (stores may alias the loads, so they are not reordered for us).
    constexpr int kBatch = 8;
    for (int first = 0; first < count * kChunks; first += 32 * kBatch) {
      uint4 chunk[kBatch];
      std::int64_t row[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = first + 32 * b + lane, t = (idx / kChunks) & 31, c = (idx % kChunks) * 8;
        row[b] = __shfl_sync(kFullMask, bf16_row, t);
        if (idx >= count * kChunks) row[b] = -1;
        chunk[b] = row[b] >= 0 ? __ldcs(reinterpret_cast<const uint4*>(src + t * src_stride + c))
                               : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = first + 32 * b + lane, c = (idx % kChunks) * 8;
        if (row[b] >= 0) *reinterpret_cast<uint4*>(bf16_pool + row[b] * D + c) = chunk[b];
      }
    }
    return;
  }
  unsigned declined = __ballot_sync(kFullMask, int2_row >= 0 || bf16_row >= 0);
  if constexpr (kStoreRowsPairs<D>) {
    if (vectors && count > kStoreTcWarpRows) {
      const bool thread_path =
          clip_k >= 0 && int2r::top_length<D>(D - 1 - clip_k) > 0;  // warp-uniform
      declined = store_rows_by_pairs<D>(src, src_stride, count, bf16_row, int2_row, clip_k,
                                        thread_path, bf16_pool, codes_pool, scale_zero_pool);
    }
  } else if (vectors && count > kStoreTcWarpRows) {
    unsigned w[D / 2];
    const uint4* row = reinterpret_cast<const uint4*>(src + lane * src_stride);
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      int2q::unpack_words(mine ? __ldcs(row + i) : make_uint4(0, 0, 0, 0), &w[4 * i]);
    }
    if (bf16_row >= 0) {
      uint4* dst = reinterpret_cast<uint4*>(bf16_pool + bf16_row * D);
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        dst[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
    }
    const bool thread_path =
        clip_k >= 0 && int2r::top_length<D>(D - 1 - clip_k) > 0;  // warp-uniform
    const bool stored =
        int2_row < 0 || (thread_path && int2q::store_row_thread<D>(w, clip_k, codes_pool,
                                                                   scale_zero_pool, int2_row));
    declined = __ballot_sync(kFullMask, !stored);  // rows left to the warp, their BF16 copy done
  }
  for (; declined != 0; declined &= declined - 1) {
    const int t = __ffs(declined) - 1;
    const std::int64_t to_bf16 =
        vectors && count > kStoreTcWarpRows ? -1 : __shfl_sync(kFullMask, bf16_row, t);
    const std::int64_t to_int2 = __shfl_sync(kFullMask, int2_row, t);
    float x[D / 32];
#pragma unroll
    for (int m = 0; m < D / 32; ++m) {
      const bf16_bits bits = src[t * src_stride + lane + 32 * m];
      if (to_bf16 >= 0) bf16_pool[to_bf16 * D + lane + 32 * m] = bits;
      x[m] = bf16_to_float(bits);
    }
    if (to_int2 >= 0) {
      quantize_row_bf16<D>(x, clip, codes_pool + to_int2 * (D / 4), scale_zero_pool + 2 * to_int2);
    }
  }
}

constexpr int kRowStoreWarps = 8;
// A warp per token for stores of at most kStoreTcWarpRows tokens (0: a warp per 32 tokens at every
// size, as before; for comparisons).
#ifndef OSCAR_STORE_ROWS_WARP_PER_TOKEN
#define OSCAR_STORE_ROWS_WARP_PER_TOKEN 1
#endif

// Resident blocks a multiprocessor the kernel is built for: three at d 64 and for pairs of lanes at
// d 128 (at most 85 registers), two for a whole d 128 row a thread and for pairs at d 256 (at most
// 128), one for a whole d 256 row a thread. Left to itself the compiler took 210 registers at d 128
// (one block, 8 warps a multiprocessor) and 113 at d 64, and the store with both sides arriving
// lost a quarter of its speed at d 128.
template <int D>
constexpr int kRowStoreMinBlocks = D == 64                           ? 3
                                   : D == 128 && kStoreRowsPairs<D>  ? 3
                                   : D == 256 && !kStoreRowsPairs<D> ? 1
                                                                     : 2;

template <int D>
__global__ void __launch_bounds__(kRowStoreWarps * 32, kRowStoreMinBlocks<D>)
    store_kv_rows_kernel(StoreKvParams p, bool vectors, int tokens_per_warp, bool beside) {
  // Beside the store before it (see the end), it does not wait for it; that store waited for the
  // work before both when this grid starts.
  if (!beside) wait_for_prerequisite_grids();
  allow_dependent_launch();
  const std::int64_t token0 =
      (static_cast<std::int64_t>(blockIdx.x) * kRowStoreWarps + (threadIdx.x >> 5)) *
      tokens_per_warp;
  if (token0 >= p.num_tokens) return;
  store_rows_of_warp<D>(p, store_side_is_key(p, blockIdx.z, gridDim.z, false),
                        static_cast<int>(blockIdx.y), token0, tokens_per_warp, vectors);
  // Launched beside the store before it (a programmatic dependent, sharing no data with it), this
  // grid could otherwise complete first; its first block (whose first warp always has tokens)
  // waits for that store, so that whatever follows both in the stream, however it is launched,
  // finds both done.
  if (beside && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
    wait_for_prerequisite_grids();
  }
}

// The arriving side's blocks per rotating side's block (eighths) when store_kv_tc_kernel takes a
// side that arrives rotated along: its blocks skip the product and finish early with an equal
// share. 32768 tokens x 8 heads, values arriving, on an H200 (results page): 8 eighths 96.1-96.5
// us into INT2, 7 96.1-98.4, 6 89.6-89.8, 5 89.0-90.8, 4 85.7-85.9 at value clip 0.96 but
// 97.4-98.1 at 0.92 (the values' quantization then the longer part).
#ifndef OSCAR_STORE_ARRIVING_EIGHTHS
#define OSCAR_STORE_ARRIVING_EIGHTHS 6
#endif
constexpr int kStoreArrivingEighths = OSCAR_STORE_ARRIVING_EIGHTHS;
static_assert(kStoreArrivingEighths >= 1 && kStoreArrivingEighths <= 8, "1 to 8 eighths");

template <int D, bool kWarpgroupMma>
__global__ void __launch_bounds__(kStoreTcWarps * 32, 1)
    store_kv_tc_kernel(StoreKvParams p, int arriving_blocks) {
  using Layout = StoreTcLayout<D>;
  constexpr int P = Layout::kPitch;
  // The warpgroup MMA where this compilation has it (sm_90a); mma.sync otherwise.
  constexpr bool kCoreLayout = kWarpgroupMma && OSCAR_STORE_WGMMA;
  constexpr int kChunks = D / 8;  // 16-byte chunks of a row
  extern __shared__ __align__(16) unsigned char store_tc_smem[];
  // R'^T's terms, element (j, i) = R'[i][j] at store_rt_index<D, kCoreLayout>(j, i).
  __nv_bfloat16* const r_hi = reinterpret_cast<__nv_bfloat16*>(store_tc_smem);
  __nv_bfloat16* const r_lo = r_hi + D * P;
  float* const bias = reinterpret_cast<float*>(store_tc_smem + Layout::kRotationBytes);  // -b
  float* const mean_sm = bias + D;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  __nv_bfloat16* const tile_rows = reinterpret_cast<__nv_bfloat16*>(
      store_tc_smem + Layout::kRotationBytes + Layout::kBiasBytes + warp * Layout::kTileBytes);
  std::int64_t* const tile_slots = reinterpret_cast<std::int64_t*>(
      store_tc_smem + Layout::kRotationBytes + Layout::kBiasBytes +
      kStoreTcWarps * Layout::kTileBytes + warp * Layout::kSlotBytes);  // [bf16, int2][token]
  const int head = static_cast<int>(blockIdx.y), hkv = p.num_kv_heads;
  const bool is_key = store_side_is_key(p, blockIdx.z, gridDim.z, true);
  // A grid over both sides may hold one whose rows arrive rotated (its rotation null): its first
  // arriving_blocks blocks copy and quantize the rows as they arrive, with no R', no product and
  // no turns, so that one launch stores both sides at every size. The rows are the input's bits,
  // quantized by the same row quantizer as store_kv_rows_kernel's (the same bits). (The side as
  // a template parameter, two bodies in one kernel, spilled 68-396 bytes; this flag costs the
  // mma.sync build an 8-byte spill.)
  const bool rotating = (is_key ? p.k_rotation : p.v_rotation) != nullptr;
  const int tc_blocks = rotating ? static_cast<int>(gridDim.x) : arriving_blocks;
  if (static_cast<int>(blockIdx.x) >= tc_blocks) return;
  const bf16_bits* src = is_key ? p.k : p.v;
  const std::int64_t tiles = (p.num_tokens + kStoreTcTokens - 1) / kStoreTcTokens;
  // Tiles go round the blocks first, so that a store of few tiles spreads over multiprocessors.
  // The four warps of a warpgroup step through their tiles together (the warpgroup MMA takes all
  // four), for as many steps as its first warp has tiles; a warp past the last tile computes on
  // what its buffer holds and stores nothing.
  const std::int64_t first_tile = static_cast<std::int64_t>(warp) * tc_blocks + blockIdx.x;
  const std::int64_t lead_tile = static_cast<std::int64_t>(warp & ~3) * tc_blocks + blockIdx.x;
  const std::int64_t tile_step = static_cast<std::int64_t>(tc_blocks) * kStoreTcWarps;
  constexpr int kGroups = kStoreTcWarps / 4;
  constexpr bool kTurns = kCoreLayout && OSCAR_STORE_TENSOR_TURNS;
  const int group = warp >> 2;
  // The clip ratio's load goes out first: it is used only after the prologue.
  const float clip = p.int2_slot != nullptr ? __ldg((is_key ? p.k_clip : p.v_clip) + head) : 1.0f;
  const auto copy_first_tile = [&] {
    if (first_tile < tiles) {
      store_tc_copy_tile<D>(p, src, head, first_tile, tile_rows, tile_slots);
    } else {
      cp_async_commit();  // an empty group: every warp commits one
    }
  };
  if (rotating && p.prepared != nullptr) {
    // R' (from L2) goes out before the first tiles, and the block waits for it alone (it waited
    // for every warp's first tile too, which queued ahead of it). The first tiles go out
    // warpgroup by warpgroup in the order of their turns: warpgroup 0's with R', before the
    // block's barrier, the others' after it, each warpgroup after the one before (named barriers
    // after the turns' ring), so that warpgroup 0's rows arrive first and the ring starts while
    // the others' are still on their way. On an H100, 32768 tokens x 8 heads into INT2 (ablation
    // driver): 94.9-95.4 us before, R' first 93.3-93.6, with every warpgroup's first tile in
    // turn before the barrier 90.3-90.8, and with the copies of full tiles above 84.1-84.4;
    // warpgroup 0's alone before the barrier then took 84.2-85.1 against 84.8-86.1 (4096 tokens:
    // 19.8-20.4 against 21.0-21.8), value clip 0.96.
    load_prepared_rotation<D, kCoreLayout>(p, head, is_key, r_hi, r_lo, bias, [&] {
      // R' and the clip ratio are fixed inputs: the rest waits for the work before (programmatic
      // dependent launch), while they are on their way.
      wait_then_allow_dependents();
      if (!kTurns || group == 0) {
        copy_first_tile();
      } else {
        cp_async_commit();  // an empty group: the wait for R' counts one group after it
      }
    });
    if (kTurns && group > 0) {
      constexpr int kStagger = 1 + kGroups;  // barriers kStagger .. kStagger + kGroups - 3
      if (group > 1) named_barrier_sync(kStagger + group - 2, 256);
      copy_first_tile();
      if (group + 1 < kGroups) named_barrier_arrive(kStagger + group - 1, 256);
    }
  } else {
    // The first tile's copies fly while the block builds R'.
    wait_then_allow_dependents();
    copy_first_tile();
    if (rotating) build_store_rotation<D, kCoreLayout>(p, head, is_key, r_hi, r_lo, bias, mean_sm);
  }

  const int clip_k = int2q::clip_position<D>(clip);
  const bool thread_path = clip_k >= 0 && int2r::top_length<D>(D - 1 - clip_k) > 0;
  // Turns at the tensor pipe (warpgroup MMA): warpgroup g starts a tile's products only once
  // warpgroup g - 1 has issued its own for the same step (warpgroup 0 waits for the last one's
  // previous step), through a ring of named barriers 1 .. kGroups, each met by 256 threads: the
  // warpgroup handing the turn on arrives, the one taking it waits. Left to themselves the
  // warpgroups reach their products together and the pipe interleaves them, so each waits for
  // about all of them; in turns the pipe takes one warpgroup's products at a time while the
  // others quantize (32768 tokens x 8 heads on an H200: into INT2 102 -> 96-99 us, into BF16
  // 96-99 -> 84-86 us).
  int step = 0;  // steps < tiles / 16
  for (std::int64_t lead = lead_tile; lead < tiles; lead += tile_step, ++step) {
    const std::int64_t tile = lead + (first_tile - lead_tile);
    if ((!kCoreLayout || !rotating) && tile >= tiles) break;
    const std::int64_t token0 = tile * kStoreTcTokens;
    const int count =
        static_cast<int>(tile >= tiles                            ? 0
                         : p.num_tokens - token0 < kStoreTcTokens ? p.num_tokens - token0
                                                                  : kStoreTcTokens);
    const std::int64_t next_tile = tile + tile_step;

    // 1. The tile's rows and slots, copied in during the previous tile's quantization (or the
    // prologue).
    OSCAR_TRACE(0);
    cp_async_wait<0>();
    __syncwarp();
    OSCAR_TRACE(1);

    // 2. x R' - b, one 16-token half at a time (all D / 8 n-tiles in registers), rounded to bf16
    // over the half's rows (lane: rows g, g + 8, columns 2 t, 2 t + 1 of each n-tile).
    if (!rotating) {
      // rows that arrive rotated are stored as they are
    } else if constexpr (kCoreLayout) {
#if OSCAR_STORE_WGMMA
      // The warpgroup's four warps multiply their halves at once, 16 rows each, by R'^T read
      // from shared memory by the MMA itself (no fragment loads of R' and 16 MMA instructions a
      // half instead of 256).
      constexpr unsigned kCoreBytes = 128, kNStride = (D / 8) * kCoreBytes;
      const std::uint64_t desc_hi = wgmma_descriptor(r_hi, kCoreBytes, kNStride);
      const std::uint64_t desc_lo = wgmma_descriptor(r_lo, kCoreBytes, kNStride);
      // The accumulators start at -b, so that the drain only rounds (the subtraction after the
      // product was 64 instructions a half, the first half's inside the turn): the first half's
      // set before the turn is taken, the second half's once the first is drained.
      float acc[D / 2];
      accumulators_at_minus_b(acc, bias, lane & 3);
      if (kTurns && (group > 0 || step > 0))
        named_barrier_sync(1 + (group + kGroups - 1) % kGroups, 256);
      OSCAR_TRACE(2);
#pragma unroll 1
      for (int half = 0; half < 2; ++half) {
        std::uint32_t a[D / 16][4];
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          ldmatrix_x4(a[ks], tile_rows + (half * 16 + (lane & 15)) * P + ks * 16 + (lane >> 4) * 8);
        }
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          // k-step ks starts 2 core matrices (256 bytes, 16 descriptor units) further along K.
#if !OSCAR_STORE_ABLATE_PRODUCT
          if (OSCAR_STORE_ABLATE_ONE_K_STEP && ks > 0) continue;
          wgmma_bf16<D>(acc, a[ks], desc_hi + 16 * ks, 1);
#if !OSCAR_STORE_ABLATE_LOW_TERM
          wgmma_bf16<D>(acc, a[ks], desc_lo + 16 * ks, 1);
#endif
#else
          // Ablation: accumulators from the row's own fragments (no product, nothing constant).
          if (ks == 0) {
#pragma unroll
            for (int e = 0; e < D / 2; ++e) acc[e] = __uint_as_float(a[e % (D / 16)][e % 4]);
          }
#endif
        }
        wgmma_commit();
        if (kTurns && half == 1) named_barrier_arrive(1 + group, 256);
        OSCAR_TRACE(3 + 3 * half);
        wgmma_wait_all();
        OSCAR_TRACE(4 + 3 * half);
#pragma unroll
        for (int e = 0; e < D / 2; ++e) register_fence(acc[e]);
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
          for (int r = 0; r < 4; ++r) register_fence(a[ks][r]);
        }
        __syncwarp();  // the half's rows are read: they take the rotated rows
        // Two n-tiles per stmatrix: lanes 8 i .. 8 i + 7 address the rows of 8 x 8 matrix i
        // (rows 0-7 / 8-15 of n-tile 2 np, then of n-tile 2 np + 1).
        const int t = lane & 3;
        __nv_bfloat16* const row_at =
            tile_rows + (half * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * P + (lane >> 4) * 8;
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
          std::uint32_t packed[4];
          rounded_pair_bits(acc, np, packed);
          stmatrix_x4(row_at + np * 16, packed);
        }
        if (half == 0) accumulators_at_minus_b(acc, bias, t);
        OSCAR_TRACE(5 + 3 * half);
      }
#endif
    } else {
#pragma unroll 1
      for (int half = 0; half < 2; ++half) {
        float acc[D / 8][4];
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[nt][e] = bias[nt * 8 + 2 * (lane & 3) + (e & 1)];  // -b
        }
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          std::uint32_t a[4];
          ldmatrix_x4(a, tile_rows + (half * 16 + (lane & 15)) * P + ks * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int np = 0; np < D / 16; ++np) {  // n-tiles 2 np and 2 np + 1
            const int offset =
                (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * P + ks * 16 + ((lane >> 3) & 1) * 8;
            std::uint32_t b_hi[4], b_lo[4];
            ldmatrix_x4(b_hi, r_hi + offset);
            ldmatrix_x4(b_lo, r_lo + offset);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              float(&c)[4] = acc[2 * np + h];
              mma_16816_bf16(c, a, b_hi[2 * h], b_hi[2 * h + 1]);
              mma_16816_bf16(c, a, b_lo[2 * h], b_lo[2 * h + 1]);
            }
          }
        }
        __syncwarp();  // the half's rows are read: they take the rotated rows
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          const int col = nt * 8 + 2 * t, row = half * 16 + g;
          // The accumulators hold x R' - b: they started at -b.
          *reinterpret_cast<__nv_bfloat162*>(tile_rows + row * P + col) =
              __floats2bfloat162_rn(acc[nt][0], acc[nt][1]);
          *reinterpret_cast<__nv_bfloat162*>(tile_rows + (row + 8) * P + col) =
              __floats2bfloat162_rn(acc[nt][2], acc[nt][3]);
        }
      }
    }
    __syncwarp();

    // 3. BF16 slots: 16-byte copies of the rows. Lane t works out token t's pool row once (a
    // 64-bit division by the page size) and the lanes copying its chunks take it by a shuffle,
    // instead of a division for every chunk.
    if (p.bf16_slot != nullptr) {
      bf16_bits* pool = is_key ? p.k_bf16 : p.v_bf16;
      const std::int64_t token_row =
          slot_pool_row(lane < count ? tile_slots[lane] : -1, p.page_size, hkv, head);
      for (int first = 0; first < count * kChunks; first += 32) {
        const int idx = first + lane, t = (idx / kChunks) & 31, c = (idx % kChunks) * 8;
        const std::int64_t row = __shfl_sync(kFullMask, token_row, t);
        if (idx < count * kChunks && row >= 0) {
          *reinterpret_cast<uint4*>(pool + row * D + c) =
              *reinterpret_cast<const uint4*>(tile_rows + t * P + c);
        }
      }
    }

    // 4. INT2 slots: row `lane` by its thread; the rows it declines by the whole warp. Once every
    // lane holds its row in registers, the next tile's copies go out into the buffer, to arrive
    // while this tile is quantized (the copies waited on at the top of each tile had left the
    // multiprocessor's issue slots two-thirds idle).
    bool copies_issued = false;
    if (p.int2_slot != nullptr) {
      std::uint8_t* codes_pool = is_key ? p.k_codes : p.v_codes;
      bf16_bits* scale_zero_pool = is_key ? p.k_scale_zero : p.v_scale_zero;
      const std::int64_t row = slot_pool_row(lane < count ? tile_slots[kStoreTcTokens + lane] : -1,
                                             p.page_size, hkv, head);
      // A row by one thread is a serial chain of ~1,700 instructions (~9 us of a one-token store
      // in Nsight Compute), a row by the warp a short one: a tile of few rows (a decode step's
      // store) takes them one by one with the warp. Both give the same bits.
      if (thread_path && count > kStoreTcWarpRows) {
        unsigned w[D / 2];
        const uint4* mine = reinterpret_cast<const uint4*>(tile_rows + lane * P);
#pragma unroll
        for (int i = 0; i < D / 8; ++i) int2q::unpack_words(mine[i], &w[4 * i]);
        __syncwarp();  // the buffer is read
        if (next_tile < tiles) {
          store_tc_copy_tile<D>(p, src, head, next_tile, tile_rows, tile_slots);
        }
        copies_issued = true;
        const bool stored =
#if OSCAR_STORE_ABLATE_QUANTIZE
            row >= 0 && int2q::store_row_ablated<D>(w, codes_pool, scale_zero_pool, row);
#else
            row >= 0 && int2q::store_row_thread<D>(w, clip_k, codes_pool, scale_zero_pool, row);
#endif
        quantize_declined_rows<D>(w, row, row >= 0 && !stored, clip, codes_pool, scale_zero_pool);
      } else {
        quantize_rows_by_warp<D>(row, clip, codes_pool, scale_zero_pool,
                                 [&](int r, int i) { return tile_rows[r * P + i]; });
      }
    }
    if (!copies_issued && next_tile < tiles) {
      __syncwarp();  // the buffer is read
      store_tc_copy_tile<D>(p, src, head, next_tile, tile_rows, tile_slots);
    }
    OSCAR_TRACE(9);
  }
  if (kTurns && rotating) {
    // Every turn handed on is taken: a warpgroup with fewer steps than the one before it takes
    // the turns it did not wait for (warpgroup 0 never waits at its first step).
    const auto steps_of = [&](int g) -> std::int64_t {
      const std::int64_t lead = static_cast<std::int64_t>(4 * g) * tc_blocks + blockIdx.x;
      return lead < tiles ? (tiles - lead + tile_step - 1) / tile_step : 0;
    };
    const std::int64_t waited = group == 0 ? (step > 0 ? step - 1 : 0) : step;
    const std::int64_t handed = steps_of((group + kGroups - 1) % kGroups);
    for (std::int64_t i = waited; i < handed; ++i)
      named_barrier_sync(1 + (group + kGroups - 1) % kGroups, 256);
  }
}

// ---------------------------------------------------------------------------------------------
// store_kv at head_dim 256 on Hopper (warpgroup MMA, sm_90a builds). R'^T's two bf16 terms take
// 256 KB there, more than a multiprocessor's shared memory, so they are not held: the prepared
// rotation (prepare_store_kv, required) keeps R'^T in k-steps of 16 rows (both terms, 16 KB), and
// a block streams those chunks through a ring in shared memory, one bulk copy each, counted on an
// mbarrier per slot, while its warpgroup multiplies: each k-step is one m64n256k16 per term, A
// (the block's rows) and B (the chunk) read from shared memory by the MMA, the accumulators (64
// rows x 256 columns, 128 registers a thread) kept over all 16 k-steps. A block tile is 64 tokens
// of one (K or V, KV head); the rotated rows go back into the tile (bf16, in place), then each
// warp stores and quantizes 16 of them, a pair of lanes a row, and copies in its rows of the
// next tile (after the quantizer: store256_rows_of_warp says why). Two blocks share a
// multiprocessor, so one's product runs while the other quantizes. Chunks run ahead across
// tiles (the ring does not drain between them).
// The block's shape: 4 warps (one warpgroup, 64-row tiles, 16 rows a warp to quantize, two
// blocks a multiprocessor, so that one block's product can run beside the other's quantizer), or
// with OSCAR_STORE256_WARPS=8, for comparisons, the earlier shape: two warpgroups, 256-row tiles
// multiplied in two rounds of 128 rows, 32 rows a warp, one block a multiprocessor. On an H100
// (32768 tokens x 8 KV heads into INT2, value clip 0.96; results page) 397.9-399.9 against
// 410.1-415.5 us, and from one token to 5000 faster still (300 tokens 20.4 against 33.4 us).
// A warp-specialized block (a warpgroup that only multiplies, R' in slots of 128 columns, beside 8
// or 12 warps that only quantize) stored the same bits but took 518-826 us on an H200 against
// 391-400: the synchronization around its many small products, not the quantizer, held it
// (int2-kernels.md, Status).
#ifndef OSCAR_STORE256_WARPS
#define OSCAR_STORE256_WARPS 4
#endif
constexpr int kStore256Warps = OSCAR_STORE256_WARPS;
static_assert(kStore256Warps == 8 || kStore256Warps == 4, "one or two warpgroups");
constexpr int kStore256Groups = kStore256Warps / 4;
constexpr int kStore256Rounds = kStore256Groups == 2 ? 2 : 1;  // products of 64 rows a group
constexpr int kStore256Tokens = 64 * kStore256Groups * kStore256Rounds;  // a block tile
constexpr int kStore256WarpRows = kStore256Tokens / kStore256Warps;      // rows a warp quantizes
constexpr int kStore256MinBlocks = kStore256Groups == 2 ? 1 : 2;
static_assert(OSCAR_STORE256_PAIR_ROWS || kStore256WarpRows == 32, "a row a thread needs 32 rows");
// A warp's rows of a tile up to this many are quantized one by one by the whole warp, more by
// pairs of lanes: with 16 rows a warp from three (a pass of pairs costs about what two rows one by
// one do), so that a decode step's few tokens take the pairs too.
constexpr int kStore256WarpPathRows = kStore256WarpRows == 16 ? 2 : kStoreTcWarpRows;
constexpr int kStore256Stages = 4;                           // R' chunks in the ring
constexpr int kStore256KSteps = 256 / 16;                    // R' chunks: k-steps of 16
constexpr unsigned kStore256ChunkBytes = 2u * 16 * 256 * 2;  // both terms, bf16
// A side arriving rotated at head_dim 256 is stored by store_kv_rows_kernel after the rotating
// side's launch. Up to kStore256DependentMaxTokens tokens it is launched as a programmatic
// dependent, which starts at once beside the store, and the store leaves it
// kStore256ArrivingEighths of the rotating side's share of the multiprocessors (a rotating tile
// costs ~2.5 arriving ones). Values arriving, keys rotated, on an H100
// (scripts/gpu/store_ablation.cu, into INT2; results page): 1 token 29.5 -> 21.2 us, 8 tokens 51.3
// -> 30.5, 512 50.8 -> 37.7, 8192 117.5 -> 107.8; at 32768 the launch beside it was slower (396-403
// against 371 us; eighths 2: 374-378, 0: 408), so larger stores launch it after the store. (Both
// tuned with the two-warpgroup blocks and measured again with the one-warpgroup blocks on an H200,
// 1 to 32768 tokens: eighths 1 won at 8192 tokens, 85-89 against 95-96 us, and lost at 2048, 41.5
// against 35.6-36.5; eighths 5 ran level; the dependent launch at 32768 lost, 297-300 against
// 283-286. Kept.)
#ifndef OSCAR_STORE256_DEPENDENT_MAX_TOKENS
#define OSCAR_STORE256_DEPENDENT_MAX_TOKENS 8192
#endif
constexpr std::int64_t kStore256DependentMaxTokens = OSCAR_STORE256_DEPENDENT_MAX_TOKENS;
#ifndef OSCAR_STORE256_ARRIVING_EIGHTHS
#define OSCAR_STORE256_ARRIVING_EIGHTHS 3
#endif
constexpr int kStore256ArrivingEighths = OSCAR_STORE256_ARRIVING_EIGHTHS;
static_assert(kStore256ArrivingEighths >= 0 && kStore256ArrivingEighths <= 8, "0 to 8 eighths");

struct Store256Layout {
  // The tile in 8 x 8 core-matrix order (element (r, c) at store256_index(r, c)), the R' ring,
  // b, each warp's token slots (BF16 then INT2), the ring's mbarriers.
  static constexpr std::size_t kTileBytes = std::size_t{kStore256Tokens} * 256 * 2;
  static constexpr std::size_t kRingBytes = std::size_t{kStore256Stages} * kStore256ChunkBytes;
  static constexpr std::size_t kBiasBytes = 256 * sizeof(float);
  static constexpr std::size_t kSlotBytes = std::size_t{2} * kStore256Tokens * sizeof(std::int64_t);
  static constexpr std::size_t kBarrierBytes = 16 * sizeof(std::uint64_t);
  static constexpr std::size_t kRing = kTileBytes;
  static constexpr std::size_t kBias = kRing + kRingBytes;
  static constexpr std::size_t kSlots = kBias + kBiasBytes;
  static constexpr std::size_t kBarriers = kSlots + kSlotBytes;
  static constexpr std::size_t kBytes = kBarriers + kBarrierBytes;
  static_assert(kStore256Stages <= 16, "one mbarrier a slot");
};

// Element (column n, row k) of R'^T in a prepared head_dim 256 entry: chunk k / 16 (16 KB: the
// high term, then the low term at +8 KB), in it core matrix (n / 8, (k % 16) / 8).
__host__ __device__ constexpr int store256_rt_index(int n, int k, bool low) {
  return (k / 16) * (kStore256ChunkBytes / 2) + (low ? 16 * 256 : 0) +
         ((n / 8) * 2 + (k % 16) / 8) * 64 + (n % 8) * 8 + k % 8;
}

#if OSCAR_STORE_WGMMA
__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count)
               : "memory");
}
// Arms the barrier for one phase of `bytes` bytes and issues their bulk copy (global -> shared).
__device__ __forceinline__ void bulk_copy_counted(void* dst, const void* src, unsigned bytes,
                                                  std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar))
      : "memory");
}
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.b32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}
// D (m64 x n256, float) += A (m64 x k16 bf16) x B (k16 x n256 bf16), both from shared memory
// (K-major, no swizzle: descriptors as wgmma_descriptor builds them).
__device__ __forceinline__ void wgmma_bf16_ss_n256(float (&d)[128], std::uint64_t a_desc,
                                                   std::uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "
      "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "
      "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "
      "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, "
      "%104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "
      "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
#endif

// A 16-byte copy (zero-filled past src_bytes) between a shared-space address and a global one,
// each plus a constant offset: a warp's 32 copies of a row group then share two base addresses.
template <unsigned kDstOffset, unsigned kSrcOffset>
__device__ __forceinline__ void cp_async_16_at(unsigned dst, std::uint64_t gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0+%3], [%1+%4], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(src_bytes), "n"(kDstOffset), "n"(kSrcOffset));
}

#if OSCAR_STORE_WGMMA  // what only the warpgroup-MMA kernel below calls
// Element (r, c) of a head_dim 256 tile (or of a warpgroup's rows as the MMA's A operand): core
// matrix (r / 8, c / 8), its 8 rows of 16 bytes contiguous, K-adjacent matrices 128 bytes apart,
// M-adjacent ones 4 KB apart.
__device__ __forceinline__ int store256_index(int r, int c) {
  return ((r >> 3) * 32 + (c >> 3)) * 64 + (r & 7) * 8 + (c & 7);
}

// Copies in warp `warp`'s rows of tile `tile` (kStore256WarpRows; zeros past the store's tokens)
// and its tokens' slots; commits them as one cp.async group. Each instruction copies 4 chunks of 8
// rows: 64 contiguous bytes of each row, 512 contiguous bytes of shared memory.
template <int U = 0>
__device__ __forceinline__ void store256_copy_chunks(unsigned dst, std::uint64_t src, int bytes) {
  if constexpr (U < 8) {
    cp_async_16_at<U * 512, U * 64>(dst, src, bytes);
    store256_copy_chunks<U + 1>(dst, src, bytes);
  }
}
__device__ __forceinline__ void store256_copy_rows(const StoreKvParams& p, const bf16_bits* src,
                                                   int head, std::int64_t tile, int warp,
                                                   __nv_bfloat16* tile_rows, std::int64_t* slots) {
  constexpr int kRows = kStore256WarpRows;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t token0 = tile * kStore256Tokens + warp * kRows;
  const std::int64_t left = p.num_tokens - token0;
  const int count = left <= 0 ? 0 : left < kRows ? static_cast<int>(left) : kRows;
  if (lane < count) {
    if (p.bf16_slot != nullptr) {
      cp_async_8(slots + warp * kRows + lane, p.bf16_slot + token0 + lane);
    }
    if (p.int2_slot != nullptr) {
      cp_async_8(slots + kStore256Tokens + warp * kRows + lane, p.int2_slot + token0 + lane);
    }
  }
  const unsigned tile_base = shared_address(tile_rows);
#pragma unroll
  for (int g = 0; g < kRows / 8; ++g) {  // rows 8 g + (lane & 7), chunks 4 u + (lane >> 3)
    const int t = g * 8 + (lane & 7), c = (lane >> 3) * 8;
    const bool live = t < count;
    const bf16_bits* row = live ? src + ((token0 + t) * p.num_kv_heads + head) * 256 + c : src;
    store256_copy_chunks(tile_base + 2 * store256_index(warp * kRows + t, c),
                         reinterpret_cast<std::uint64_t>(row), live ? 16 : 0);
  }
  cp_async_commit();
}

// Stores warp `warp`'s rotated rows of a head_dim 256 tile (kStore256WarpRows; the whole warp
// calls it): by pairs of lanes (or, with 32 rows a warp, row `lane` by its thread) into their BF16
// and INT2 slots, the rows the quantizer declines (and the rows of a warp's tile of at most
// kStore256WarpPathRows) by the whole warp from the tile; then the warp's rows
// of `next_tile` (>= 0) are copied in. The quantizer needs about every register at d 256, so the
// copies go out only after it (issued while it held its row, as the d 64 / 128 kernel does, they
// kept the row live for the declined ones: 7 KB of spills a thread), and the function is not
// inlined (the kernel's loop state is saved around the call once a tile, not spilled inside it).
__device__ __forceinline__ void store256_rows_of_warp(const StoreKvParams& p, bool is_key, int head,
                                                      std::int64_t tile, std::int64_t next_tile,
                                                      float clip, __nv_bfloat16* tile_rows,
                                                      std::int64_t* slots) {
  constexpr int D = 256;
  constexpr int kRows = kStore256WarpRows;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int hkv = p.num_kv_heads;
  const std::int64_t token0 = tile * kStore256Tokens + warp * kRows;
  const std::int64_t left = p.num_tokens - token0;
  const int count = left <= 0 ? 0 : left < kRows ? static_cast<int>(left) : kRows;
  const int my_row = warp * kRows + lane;  // lane < count
  const std::int64_t bf16_row = slot_pool_row(
      p.bf16_slot != nullptr && lane < count ? slots[my_row] : -1, p.page_size, hkv, head);
  const std::int64_t int2_row =
      slot_pool_row(p.int2_slot != nullptr && lane < count ? slots[kStore256Tokens + my_row] : -1,
                    p.page_size, hkv, head);
  std::uint8_t* codes_pool = is_key ? p.k_codes : p.v_codes;
  bf16_bits* scale_zero_pool = is_key ? p.k_scale_zero : p.v_scale_zero;
  bf16_bits* bf16_pool = is_key ? p.k_bf16 : p.v_bf16;
  const bf16_bits* src = is_key ? p.k : p.v;
  const int clip_k = int2q::clip_position<D>(clip);
  const bool thread_path = clip_k >= 0 && int2r::top_length<D>(D - 1 - clip_k) > 0;
  const auto element = [&](int r, int i) { return tile_rows[store256_index(warp * kRows + r, i)]; };
  bool stored = int2_row < 0;
  if (OSCAR_STORE256_PAIR_ROWS && count > kStore256WarpPathRows) {
    // A pair of lanes per row (lanes 2 j and 2 j + 1: row 16 pass + j), a pass per 16 rows: each
    // lane holds half the row's words, for every quarter f of the row its elements
    // f D / 4 + half D / 8 + [0, D / 8) (int2r::quantize_words).
    const int half = lane & 1;
    unsigned declined[2] = {0u, 0u};
#pragma unroll 1
    for (int pass = 0; pass < kRows / 16; ++pass) {
      const int local = 16 * pass + (lane >> 1), tile_row = warp * kRows + local;
      const bool live = local < count;
      const std::int64_t pair_bf16_row = slot_pool_row(
          p.bf16_slot != nullptr && live ? slots[tile_row] : -1, p.page_size, hkv, head);
      const std::int64_t pair_int2_row =
          slot_pool_row(p.int2_slot != nullptr && live ? slots[kStore256Tokens + tile_row] : -1,
                        p.page_size, hkv, head);
      unsigned u[D / 4];
      int2q::for_each_pair_chunk<D>([&](int offset, int word) {
        const int column = half * (D / 8) + offset;
        int2q::unpack_words(
            *reinterpret_cast<const uint4*>(tile_rows + store256_index(tile_row, column)),
            &u[word]);
      });
      const bool pair_stored =
          store_pair_half_row<D>(u, half, clip_k, thread_path, pair_bf16_row, pair_int2_row,
                                 bf16_pool, codes_pool, scale_zero_pool);
      // Bit 2 j: the row of pair j is left to the warp.
      declined[pass] = __ballot_sync(kFullMask, !pair_stored && half == 0);
    }
    stored = stored || !pair_row_left(declined, lane);
  } else if (kRows == 32 && count > kStoreTcWarpRows) {
    unsigned w[D / 2];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      int2q::unpack_words(
          *reinterpret_cast<const uint4*>(tile_rows + store256_index(my_row, 8 * i)), &w[4 * i]);
    }
    if (bf16_row >= 0) {
      uint4* dst = reinterpret_cast<uint4*>(bf16_pool + bf16_row * D);
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        dst[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
    }
#if OSCAR_STORE_ABLATE_QUANTIZE
    stored = stored || int2q::store_row_ablated<D>(w, codes_pool, scale_zero_pool, int2_row);
#else
    stored = stored || (thread_path && int2q::store_row_thread<D>(w, clip_k, codes_pool,
                                                                  scale_zero_pool, int2_row));
#endif
  } else if (bf16_row >= 0) {
    uint4* dst = reinterpret_cast<uint4*>(bf16_pool + bf16_row * D);
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      dst[i] = *reinterpret_cast<const uint4*>(tile_rows + store256_index(my_row, 8 * i));
  }
  // Rows declined (and a decode step's few rows): the whole warp, one by one, from the tile.
  quantize_rows_by_warp<D>(stored ? -1 : int2_row, clip, codes_pool, scale_zero_pool, element);
  __syncwarp();  // the warp's rows are read: its rows of the next tile come in
  if (next_tile >= 0) store256_copy_rows(p, src, head, next_tile, warp, tile_rows, slots);
}
#endif

__global__ void __launch_bounds__(kStore256Warps * 32, kStore256MinBlocks)
    store_kv_tc256_kernel(const __grid_constant__ StoreKvParams p) {
#if OSCAR_STORE_WGMMA
  using Layout = Store256Layout;
  constexpr int D = 256;
  constexpr int kThreads = kStore256Warps * 32;
  extern __shared__ __align__(16) unsigned char store256_smem[];
  auto* const tile_rows = reinterpret_cast<__nv_bfloat16*>(store256_smem);
  unsigned char* const ring = store256_smem + Layout::kRing;
  float* const bias = reinterpret_cast<float*>(store256_smem + Layout::kBias);
  auto* const slots = reinterpret_cast<std::int64_t*>(store256_smem + Layout::kSlots);
  auto* const full = reinterpret_cast<std::uint64_t*>(store256_smem + Layout::kBarriers);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int head = static_cast<int>(blockIdx.y), hkv = p.num_kv_heads;
  const bool is_key = store_side_is_key(p, blockIdx.z, gridDim.z, true);
  const bf16_bits* src = is_key ? p.k : p.v;
  const std::int64_t tiles = (p.num_tokens + kStore256Tokens - 1) / kStore256Tokens;
  // The launch gives every block at least one tile.
  const std::int64_t my_tiles =
      (tiles - blockIdx.x + gridDim.x - 1) / static_cast<std::int64_t>(gridDim.x);
  // Chunks this block multiplies by.
  const std::int64_t chunks = my_tiles * kStore256Rounds * kStore256KSteps;
  const auto* entry = static_cast<const unsigned char*>(p.prepared) +
                      store_prepared_entry_offset(D, hkv, is_key, head);

  // The fixed inputs first (R' chunks, b, the clip ratio); the rest waits for the work before
  // (programmatic dependent launch) while they are on their way.
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStore256Stages; ++s) mbarrier_init(full + s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int s = 0; s < kStore256Stages; ++s) {
      bulk_copy_counted(ring + s * kStore256ChunkBytes, entry + s * kStore256ChunkBytes,
                        kStore256ChunkBytes, full + s);
    }
  }
  bias[threadIdx.x] = __ldg(
      reinterpret_cast<const float*>(entry + kStore256KSteps * kStore256ChunkBytes) + threadIdx.x);
  if constexpr (kThreads < D) {
    bias[threadIdx.x + kThreads] =
        __ldg(reinterpret_cast<const float*>(entry + kStore256KSteps * kStore256ChunkBytes) +
              threadIdx.x + kThreads);
  }
  const float clip = p.int2_slot != nullptr ? __ldg((is_key ? p.k_clip : p.v_clip) + head) : 1.0f;
  // A store of the side arriving rotated, launched next, shares no data with this one: let it
  // start now (programmatic dependent launch) on the multiprocessors left free.
  wait_then_allow_dependents();
  store256_copy_rows(p, src, head, blockIdx.x, warp, tile_rows, slots);
  const int group = warp >> 2, group_warp = warp & 3;
  std::int64_t q = 0;  // chunks multiplied so far

#pragma unroll 1
  for (std::int64_t i = 0; i < my_tiles; ++i) {
    const std::int64_t tile = blockIdx.x + i * gridDim.x;
    // 1. The tile's rows (each warp's copies) landed, and are visible to the MMA (async proxy).
    cp_async_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    // 2. x R' - b, in rounds of 64 rows a warpgroup (warpgroup g: rows 64 (groups round + g)).
#pragma unroll 1
    for (int round = 0; round < kStore256Rounds; ++round) {
      const int row0 = 64 * (kStore256Groups * round + group);
      const std::uint64_t a_desc = wgmma_descriptor(tile_rows + store256_index(row0, 0), 128, 4096);
      float acc[128];
#pragma unroll 1
      for (int ks = 0; ks < kStore256KSteps; ++ks, ++q) {
        const int slot = static_cast<int>(q % kStore256Stages);
        if (!OSCAR_STORE256_ABLATE_STREAM || q < kStore256Stages)
          mbarrier_wait(full + slot, static_cast<unsigned>((q / kStore256Stages) & 1));
        unsigned char* const chunk = ring + slot * kStore256ChunkBytes;
        wgmma_fence();
#if OSCAR_STORE_ABLATE_PRODUCT
        if (ks == 0) {
#pragma unroll
          for (int e = 0; e < 128; ++e) acc[e] = static_cast<float>(e + (lane & 7)) * 0.0625f;
        }
#else
        // k-step ks starts 2 core matrices (256 bytes, 16 descriptor units) further along K.
        wgmma_bf16_ss_n256(acc, a_desc + 16 * ks, wgmma_descriptor(chunk, 128, 256), ks > 0);
#endif
#if !OSCAR_STORE_ABLATE_LOW_TERM && !OSCAR_STORE_ABLATE_PRODUCT
        wgmma_bf16_ss_n256(acc, a_desc + 16 * ks,
                           wgmma_descriptor(chunk + kStore256ChunkBytes / 2, 128, 256), 1);
#endif
        wgmma_commit();
        // The previous chunk's products are done in this warpgroup; once every warpgroup's are,
        // its slot takes the chunk kStore256Stages on.
        wgmma_wait<1>();
        named_barrier_sync(1, kThreads);
        if (!OSCAR_STORE256_ABLATE_STREAM && threadIdx.x == 0 && q >= 1 &&
            q - 1 + kStore256Stages < chunks) {
          const std::int64_t next = q - 1 + kStore256Stages;
          const int free_slot = static_cast<int>((q - 1) % kStore256Stages);
          bulk_copy_counted(ring + free_slot * kStore256ChunkBytes,
                            entry + (next % kStore256KSteps) * kStore256ChunkBytes,
                            kStore256ChunkBytes, full + free_slot);
        }
        __syncwarp();
      }
      wgmma_wait<0>();
#pragma unroll
      for (int e = 0; e < 128; ++e) register_fence(acc[e]);
      // The warp's 16 rows back into the tile as bf16, two n-tiles per stmatrix (as in
      // store_kv_tc_kernel); the MMA has read them.
      const int t = lane & 3, r = row0 + group_warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        std::uint32_t packed[4];
        rotated_pair_bits(acc, bias, np, t, packed);
        stmatrix_x4(tile_rows + store256_index(r, np * 16 + (lane >> 4) * 8), packed);
      }
    }
    __syncthreads();  // every rotated row is in the tile

    // 3. The warp's rows into their slots, and its rows of the next tile copied in.
    store256_rows_of_warp(p, is_key, head, tile, i + 1 < my_tiles ? tile + gridDim.x : -1, clip,
                          tile_rows, slots);
  }
#else
  // Built without the warpgroup MMA: the host never launches this kernel (store256_slots).
  wait_then_allow_dependents();
  __shared__ volatile int lacks_warpgroup_mma[4];
  if (threadIdx.x == 0) lacks_warpgroup_mma[0] = 1;
#endif
}

// Builds the prepared rotation of every (K or V, KV head) at head_dim 256 in its chunked order
// (store256_rt_index): thread n builds column n of R' = diag(1 / s) R, split into high and low bf16
// terms, and b[n] = sum over k of mean[k] (high + low)[k][n], in k order.
__global__ void __launch_bounds__(256) prepare_store_kv256_kernel(StoreKvParams p, void* prepared) {
  constexpr int D = 256;
  const int head = static_cast<int>(blockIdx.x), n = static_cast<int>(threadIdx.x);
  const bool is_key = store_side_is_key(p, blockIdx.y, gridDim.y, true);
  const float* rot =
      (is_key ? p.k_rotation : p.v_rotation) + static_cast<std::int64_t>(head) * D * D;
  const float* mean = is_key ? p.k_mean : p.v_mean;
  const float* smooth = is_key ? p.k_smooth : nullptr;
  auto* entry = static_cast<unsigned char*>(prepared) +
                store_prepared_entry_offset(D, p.num_kv_heads, is_key, head);
  auto* terms = reinterpret_cast<__nv_bfloat16*>(entry);
  float b = 0.0f;
  for (int k = 0; k < D; ++k) {
    const float r = __ldg(rot + k * D + n);  // consecutive threads, consecutive columns
    const float folded =
        smooth != nullptr ? __fmul_rn(r, __frcp_rn(__ldg(smooth + head * D + k))) : r;
    __nv_bfloat16 hi, lo;
    split_bf16(folded, hi, lo);
    terms[store256_rt_index(n, k, false)] = hi;
    terms[store256_rt_index(n, k, true)] = lo;
    if (mean != nullptr)
      b = fmaf(__ldg(mean + head * D + k), __bfloat162float(hi) + __bfloat162float(lo), b);
  }
  reinterpret_cast<float*>(entry + kStore256KSteps * kStore256ChunkBytes)[n] = b;
}

// The sides (keys, values) of a store that carry a rotation; the others arrive rotated.
int rotated_sides(const StoreKvParams& p) {
  return (p.k_rotation != nullptr ? 1 : 0) + (p.v_rotation != nullptr ? 1 : 0);
}

// Multiprocessors times resident blocks of `kernel` (`threads` threads, `bytes` of dynamic shared
// memory) on the current device, worked out once per device into `cache` (the shared-memory
// opt-in and the occupancy query cost host time that a store per decode step would pay every
// call); 0 when the device cannot give a block that shared memory (or has no CUDA device).
constexpr int kCachedDevices = 64;
int kernel_wave_slots(const void* kernel, std::size_t bytes, int threads,
                      std::atomic<int> (&cache)[kCachedDevices]) {
  constexpr int kUnsupportedDevice = -1;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  int slots = device < kCachedDevices ? cache[device].load(std::memory_order_relaxed) : 0;
  if (slots == 0) {
    int sms = 0, per_sm = 0, optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess ||
        static_cast<std::size_t>(optin) < bytes ||
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes) !=
            cudaSuccess ||
        per_sm < 1) {
      cudaGetLastError();
      slots = kUnsupportedDevice;
    } else {
      slots = sms * per_sm;
    }
    if (device < kCachedDevices) cache[device].store(slots, std::memory_order_relaxed);
  }
  return slots == kUnsupportedDevice ? 0 : slots;
}

template <int D, bool kWarpgroupMma>
int store_tc_slots() {
  static std::atomic<int> cache[kCachedDevices] = {};
  return kernel_wave_slots(reinterpret_cast<const void*>(store_kv_tc_kernel<D, kWarpgroupMma>),
                           StoreTcLayout<D>::kBytes, kStoreTcWarps * 32, cache);
}

// The same for store_kv_tc256_kernel, and 0 where it cannot run: a device other than Hopper, or a
// build without its sm_90a code (that build's kernel declares a small static shared array).
int store256_slots() {
  static std::atomic<int> cache[kCachedDevices] = {};
  if (device_compute_major() != 9) return 0;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, store_kv_tc256_kernel) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (attr.sharedSizeBytes != 0) return 0;
  return kernel_wave_slots(reinterpret_cast<const void*>(store_kv_tc256_kernel),
                           Store256Layout::kBytes, kStore256Warps * 32, cache);
}

// Launches store_kv_tc256_kernel: an equal share of one wave of blocks per (KV head, K or V),
// each with at least one tile; with room for a side arriving rotated that follows at once
// (arriving_follows), the share leaves it kStore256ArrivingEighths of a rotating side's.
Status launch_store_kv_tc256(const StoreKvParams& p, bool arriving_follows) {
  const int slots = store256_slots();
  const std::int64_t tiles = (p.num_tokens + kStore256Tokens - 1) / kStore256Tokens;
  const std::int64_t pairs = static_cast<std::int64_t>(p.num_kv_heads) * rotated_sides(p);
  const std::int64_t share =
      arriving_follows ? slots / pairs * 8 / (8 + kStore256ArrivingEighths) : slots / pairs;
  const std::int64_t blocks = std::min(tiles, std::max<std::int64_t>(1, share));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(rotated_sides(p)));
  OSCAR_CUDA_CHECK(launch_kernel(store_kv_tc256_kernel, grid, dim3(kStore256Warps * 32),
                                 Store256Layout::kBytes, p.stream, p.enable_pdl, p));
  return Status::kOk;
}

// Launches store_kv_tc_kernel<D>: as many blocks per (KV head, K or V) as fill the GPU in one wave.
template <int D, bool kWarpgroupMma>
Status launch_store_kv_tc(const StoreKvParams& p, bool& arriving_stored) {
  constexpr std::size_t kBytes = StoreTcLayout<D>::kBytes;
  constexpr int kThreads = kStoreTcWarps * 32;
  const int slots = store_tc_slots<D, kWarpgroupMma>();
  if (slots == 0) {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess) {
      cudaGetLastError();
    }
    set_last_error(
        "store_kv: the tensor-core path needs %zu bytes of shared memory per block at head_dim %d "
        "(this device allows %d): use StoreKvPath::kFloat32",
        kBytes, D, optin);
    return Status::kUnsupported;
  }
  const std::int64_t tiles = (p.num_tokens + kStoreTcTokens - 1) / kStoreTcTokens;
  // A side arriving rotated rides along in blocks of its own (16-byte aligned rows, as the
  // kernel's tile copies need; otherwise store_kv_rows_kernel follows).
  const bf16_bits* arriving_rows = p.k_rotation == nullptr ? p.k : p.v;
  const bool take_arriving =
      !arriving_stored && rotated_sides(p) == 1 && is_aligned(arriving_rows, 16);
  // A block per tile up to a wave: few tiles run one per multiprocessor (a warp per tile), not
  // side by side in one block. Of each KV head's share of the wave, an arriving side takes
  // kStoreArrivingEighths of a rotating side's blocks.
  const std::int64_t per_head = std::max<std::int64_t>(1, slots / p.num_kv_heads);
  const std::int64_t fill =
      take_arriving ? std::max<std::int64_t>(1, per_head * 8 / (8 + kStoreArrivingEighths))
      : rotated_sides(p) == 2 ? std::max<std::int64_t>(1, per_head / 2)
                              : per_head;
  const std::int64_t tc_blocks = std::min(fill, tiles);
  const std::int64_t arriving_blocks =
      take_arriving ? std::min(tiles, std::max<std::int64_t>(1, per_head - fill)) : 0;
  if (take_arriving) arriving_stored = true;
  const dim3 grid(static_cast<unsigned>(std::max(tc_blocks, arriving_blocks)),
                  static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(take_arriving ? 2 : rotated_sides(p)));
  OSCAR_CUDA_CHECK(launch_kernel(store_kv_tc_kernel<D, kWarpgroupMma>, grid, dim3(kThreads), kBytes,
                                 p.stream, p.enable_pdl, p, static_cast<int>(arriving_blocks)));
  return Status::kOk;
}

// Launches store_kv_columns_kernel<D>: D / 16 column slices for each token tile, per (KV head, K
// or V).
template <int D>
Status launch_store_kv_columns(const StoreKvParams& p) {
  constexpr std::int64_t kSlices = D / kColumnStoreColumns, kTokens = column_store_tokens<D>();
  const std::int64_t tiles = (p.num_tokens + kTokens - 1) / kTokens;
  if (tiles * kSlices > std::int64_t{0x7fffffff}) {
    set_last_error("store_kv: %lld tokens are too many for the column path in one launch",
                   static_cast<long long>(p.num_tokens));
    return Status::kInvalidArgument;
  }
  const dim3 grid(static_cast<unsigned>(tiles * kSlices), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(rotated_sides(p)));
  OSCAR_CUDA_CHECK(launch_kernel(store_kv_columns_kernel<D>, grid, dim3(kColumnStoreThreads), 0,
                                 p.stream, p.enable_pdl, p));
  return Status::kOk;
}

// Launches store_kv_rows_kernel<D> over the `sides` sides whose rows arrive rotated: a warp per
// 32 tokens of each (KV head, K or V), or per token in a store of at most kStoreTcWarpRows tokens
// (the warp would take them row by row anyway). (A warp per 4 tokens taken one by one, for stores
// that give few warps a multiprocessor, measured slower: results page.)
// `dependent`: launched as a programmatic dependent of the store before it (which shares no data
// with it), so that it runs beside that store on the multiprocessors it leaves free (Hopper).
template <int D>
Status launch_store_kv_rows(const StoreKvParams& p, int sides, bool vectors, bool dependent) {
  const int tokens_per_warp =
      OSCAR_STORE_ROWS_WARP_PER_TOKEN && p.num_tokens <= kStoreTcWarpRows ? 1 : kStoreTcTokens;
  const std::int64_t tokens_per_block = std::int64_t{kRowStoreWarps} * tokens_per_warp;
  const dim3 grid(static_cast<unsigned>((p.num_tokens + tokens_per_block - 1) / tokens_per_block),
                  static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(sides));
  cudaLaunchAttribute overlap;
  const cudaLaunchConfig_t config =
      launch_config(grid, dim3(kRowStoreWarps * 32), p.stream, dependent || p.enable_pdl, overlap);
  OSCAR_CUDA_CHECK(
      cudaLaunchKernelEx(&config, store_kv_rows_kernel<D>, p, vectors, tokens_per_warp, dependent));
  return Status::kOk;
}

// Whether the pools a store writes take its vector accesses: BF16 rows and codes as 16-byte
// vectors, (scale, zero) pairs as 4-byte words (pools of a slot mapping left null are not read).
bool store_pools_aligned(const StoreKvParams& p) {
  return (p.bf16_slot == nullptr || (is_aligned(p.k_bf16, 16) && is_aligned(p.v_bf16, 16))) &&
         (p.int2_slot == nullptr ||
          (is_aligned(p.k_codes, 16) && is_aligned(p.v_codes, 16) &&
           is_aligned(p.k_scale_zero, 4) && is_aligned(p.v_scale_zero, 4)));
}

bool is_device_pointer(const void* ptr) {
  if (ptr == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

}  // namespace

namespace {
Status store_rotated(const StoreKvParams& p, bool& arriving_stored, bool& arriving_dependent);
}  // namespace

Status store_kv(const StoreKvParams& p) {
  if (p.num_tokens < 0 || p.num_kv_heads < 1 || !supported_head_dim(p.head_dim) ||
      (p.page_size != 8 && p.page_size != 16) || p.k == nullptr || p.v == nullptr) {
    set_last_error("store_kv: bad shape or missing input (head_dim %d, page_size %d, %d KV heads)",
                   p.head_dim, p.page_size, p.num_kv_heads);
    return Status::kInvalidArgument;
  }
  // A side without a rotation arrives rotated; a mean or smoothing left for it to apply would be
  // dropped silently, so it must have been folded with the rotation.
  const bool keys_unfolded =
      p.k_rotation == nullptr && (p.k_mean != nullptr || p.k_smooth != nullptr);
  if (keys_unfolded || (p.v_rotation == nullptr && p.v_mean != nullptr)) {
    set_last_error(
        "store_kv: %s given without %s: rows that arrive rotated must arrive centred%s too (fold "
        "it into the projection with the rotation, or pass the rotation)",
        !keys_unfolded        ? "v_mean"
        : p.k_mean != nullptr ? "k_mean"
                              : "k_smooth",
        keys_unfolded ? "k_rotation" : "v_rotation", keys_unfolded ? " and smoothed" : "");
    return Status::kInvalidArgument;
  }
  if ((p.bf16_slot != nullptr && (p.k_bf16 == nullptr || p.v_bf16 == nullptr)) ||
      (p.int2_slot != nullptr &&
       (p.k_codes == nullptr || p.v_codes == nullptr || p.k_scale_zero == nullptr ||
        p.v_scale_zero == nullptr || p.k_clip == nullptr || p.v_clip == nullptr))) {
    set_last_error("store_kv: a slot mapping is given without the pool it writes to");
    return Status::kInvalidArgument;
  }
  if (static_cast<int>(p.path) < 0 ||
      static_cast<int>(p.path) > static_cast<int>(StoreKvPath::kFloat32Columns)) {
    set_last_error("store_kv: unknown path %d", static_cast<int>(p.path));
    return Status::kInvalidArgument;
  }
  if (p.prepared != nullptr && !is_aligned(p.prepared, 16)) {
    set_last_error("store_kv: the prepared rotation must be 16-byte aligned");
    return Status::kInvalidArgument;
  }
  const auto aligned = [](const void* ptr) { return is_aligned(ptr, 16); };
  // The sides that arrive rotated: copied and quantized as they are, after the rotated sides'
  // launch (so that a refused path launches nothing).
  const int arriving_sides = 2 - rotated_sides(p);
  const bool arriving =
      arriving_sides > 0 && p.num_tokens > 0 && (p.bf16_slot != nullptr || p.int2_slot != nullptr);
  const bool vectors = (p.k_rotation != nullptr || aligned(p.k)) &&
                       (p.v_rotation != nullptr || aligned(p.v)) && store_pools_aligned(p);
  // The rotated sides first, so that a refused path launches nothing; the tensor-core kernel takes
  // an arriving side along in the same launch.
  bool arriving_stored = !arriving, dependent = false;
  if (arriving_sides < 2) {
    const Status rotated = store_rotated(p, arriving_stored, dependent);
    if (rotated != Status::kOk) return rotated;
  }
  if (arriving_stored) return Status::kOk;
  switch (p.head_dim) {
    case 64:
      return launch_store_kv_rows<64>(p, arriving_sides, vectors, dependent);
    case 128:
      return launch_store_kv_rows<128>(p, arriving_sides, vectors, dependent);
    default:
      return launch_store_kv_rows<256>(p, arriving_sides, vectors, dependent);
  }
}

namespace {
// store_kv's sides that carry a rotation (store_kv has validated p): the path, then its launch.
// The tensor-core kernel stores the side arriving rotated too where its rows are 16-byte aligned,
// and then sets arriving_stored; at head_dim 256 the arriving side follows, for a small store as a
// dependent launch that runs beside it (arriving_dependent).
Status store_rotated(const StoreKvParams& p, bool& arriving_stored, bool& arriving_dependent) {
  const auto aligned = [](const void* ptr) { return is_aligned(ptr, 16); };
  const bool tc_aligned = (p.k_rotation == nullptr || aligned(p.k)) &&
                          (p.v_rotation == nullptr || aligned(p.v)) && aligned(p.k_rotation) &&
                          aligned(p.v_rotation) && store_pools_aligned(p);
  const bool hopper = device_compute_major() == 9;
  StoreKvPath path = p.path;
  if (path == StoreKvPath::kAuto) {
    // The tensor-core kernels wherever they run: on an H100 they are faster from one token on
    // (14.3 against 22.4 us for 1, 16.6 against 32.5 for 512, 113 against 910 for 32768; results
    // page); there the warpgroup MMA from kStoreWgmmaMinTokens on (mma.sync 16.6 against 17.5 us
    // for 512 tokens, wgmma 20.9 against 21.6 for 2048), and at every token count when the
    // rotation is prepared (one token 8.8 against 10.9 us, 512 tokens 11.0 against 15.6).
    // head_dim 256 (no mma.sync store) takes the warpgroup MMA where it runs with a prepared
    // rotation (32768 tokens x 8 KV heads on an H100: results page).
    const bool tc = tc_aligned && (p.head_dim == 256 ? p.prepared != nullptr && store256_slots() > 0
                                   : p.head_dim == 64 ? store_tc_slots<64, false>() > 0
                                                      : store_tc_slots<128, false>() > 0);
    const bool wgmma = hopper && (p.prepared != nullptr || p.num_tokens >= kStoreWgmmaMinTokens);
    path = !tc     ? StoreKvPath::kFloat32
           : wgmma ? StoreKvPath::kTensorCore
                   : StoreKvPath::kTensorCoreSync;
    // A few BF16 rows (a decode step's) go by columns unless the rotation is prepared for the
    // tensor cores. On an H100, into BF16 (results page): d 128 without a prepared rotation one
    // token 8.3 us against 13.3 (mma.sync), 64 tokens 10.1 against 14.0, 128 tokens 16.2 against
    // 14.0; with one, 8.3 against 8.0 (warpgroup MMA); d 256 (float32 path otherwise) one token
    // 11.3 against 44.2, 64 tokens 31.3 against 57.5.
    // At d 256 a prepared rotation takes the warpgroup MMA at every token count (one token 9.7
    // against 11.3 us, 8 tokens 9.7 against 11.5, 32 tokens 10.7 against 18.8).
    if (p.int2_slot == nullptr && p.num_tokens <= kStoreColumnsMaxTokens &&
        (path == StoreKvPath::kFloat32 || p.prepared == nullptr)) {
      path = StoreKvPath::kFloat32Columns;
    }
  }
  if (path == StoreKvPath::kFloat32Columns) {
    if (p.int2_slot != nullptr) {
      set_last_error(
          "store_kv: the column path stores BF16 rows only (int2_slot must be null; use kAuto)");
      return Status::kUnsupported;
    }
    if (p.num_tokens == 0 || p.bf16_slot == nullptr) return Status::kOk;
    switch (p.head_dim) {
      case 64:
        return launch_store_kv_columns<64>(p);
      case 128:
        return launch_store_kv_columns<128>(p);
      default:
        return launch_store_kv_columns<256>(p);
    }
  }
  if (path == StoreKvPath::kTensorCore || path == StoreKvPath::kTensorCoreSync) {
    if (p.head_dim == 256 && path == StoreKvPath::kTensorCoreSync) {
      set_last_error("store_kv: the mma.sync store serves head_dim 64 and 128 (use kTensorCore)");
      return Status::kUnsupported;
    }
    if (p.head_dim == 256 && p.prepared == nullptr) {
      set_last_error(
          "store_kv: the head_dim 256 tensor-core path streams a prepared rotation: build it once "
          "with prepare_store_kv and pass it as `prepared` (or use kAuto)");
      return Status::kInvalidArgument;
    }
    if (p.head_dim == 256 && store256_slots() == 0) {
      set_last_error(
          "store_kv: at head_dim 256 the tensor-core path is the warpgroup MMA, which needs a "
          "Hopper "
          "GPU and a build with sm_90a code (use kFloat32 or kAuto)");
      return Status::kUnsupported;
    }
    if (!tc_aligned) {
      set_last_error(
          "store_kv: the tensor-core path needs 16-byte aligned K/V inputs, rotations, BF16 and "
          "code pools (4-byte aligned scale pools)");
      return Status::kInvalidArgument;
    }
    if (p.num_tokens == 0) return Status::kOk;
    if (p.head_dim == 256) {
      // The side arriving rotated (if any) follows, for a small store as a dependent launch beside
      // this one.
      arriving_dependent = !arriving_stored && p.num_tokens <= kStore256DependentMaxTokens;
      return launch_store_kv_tc256(p, arriving_dependent);
    }
    // Hopper takes the warpgroup MMA (a build without sm_90a code falls back to mma.sync inside
    // the same kernel).
    if (hopper && path == StoreKvPath::kTensorCore) {
      return p.head_dim == 64 ? launch_store_kv_tc<64, true>(p, arriving_stored)
                              : launch_store_kv_tc<128, true>(p, arriving_stored);
    }
    return p.head_dim == 64 ? launch_store_kv_tc<64, false>(p, arriving_stored)
                            : launch_store_kv_tc<128, false>(p, arriving_stored);
  }
  if (p.num_tokens == 0) return Status::kOk;
  const dim3 grid(static_cast<unsigned>((p.num_tokens + kStoreTokens - 1) / kStoreTokens),
                  static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(rotated_sides(p)));
  const auto kernel = p.head_dim == 64    ? store_kv_kernel<64>
                      : p.head_dim == 128 ? store_kv_kernel<128>
                                          : store_kv_kernel<256>;
  OSCAR_CUDA_CHECK(launch_kernel(kernel, grid, dim3(kStoreThreads), 0, p.stream, p.enable_pdl, p));
  return Status::kOk;
}
}  // namespace

Status demote_pages(const DemotePagesParams& p) {
  if (p.num_pages < 0 || p.num_kv_heads < 1 || !supported_head_dim(p.head_dim) ||
      (p.page_size != 8 && p.page_size != 16) || p.page_pairs == nullptr || p.k_bf16 == nullptr ||
      p.v_bf16 == nullptr || p.k_codes == nullptr || p.v_codes == nullptr ||
      p.k_scale_zero == nullptr || p.v_scale_zero == nullptr || p.k_clip == nullptr ||
      p.v_clip == nullptr || static_cast<int>(p.kernel) < 0 ||
      static_cast<int>(p.kernel) > static_cast<int>(DemoteKernel::kWarpPerRow)) {
    set_last_error("demote_pages: bad shape or missing buffer (head_dim %d, page_size %d)",
                   p.head_dim, p.page_size);
    return Status::kInvalidArgument;
  }
  const bool rowwise_aligned = is_aligned(p.k_bf16, 16) && is_aligned(p.v_bf16, 16) &&
                               is_aligned(p.k_codes, 16) && is_aligned(p.v_codes, 16) &&
                               is_aligned(p.k_scale_zero, 4) && is_aligned(p.v_scale_zero, 4);
  DemotePagesParams resolved = p;
  if (p.kernel == DemoteKernel::kAuto) {
    // A warp per row for a decode step's few pages (a row by one thread is a long serial chain);
    // beyond, row per thread is about twice as fast (results page); the batched kernel serves
    // pools it cannot read as 16-byte vectors.
    const std::int64_t rows =
        std::int64_t{2} * p.num_pages * p.num_kv_heads * static_cast<std::int64_t>(p.page_size);
    resolved.kernel = rows <= kDemoteWarpPerRowMaxRows ? DemoteKernel::kWarpPerRow
                      : rowwise_aligned                ? DemoteKernel::kRowPerThread
                                                       : DemoteKernel::kWarpBatched;
  }
  if (p.kernel == DemoteKernel::kRowPerThread) {
    if (!rowwise_aligned) {
      set_last_error(
          "demote_pages: the row-per-thread kernel needs 16-byte aligned BF16 and code pools and "
          "4-byte aligned scale pools");
      return Status::kInvalidArgument;
    }
  }
  if (p.num_pages == 0) return Status::kOk;
  return launch_demote_pages_fast(resolved);
}

std::size_t store_kv_prepared_bytes(int num_kv_heads, int head_dim) {
  if (num_kv_heads < 1 || !supported_head_dim(head_dim)) return 0;
  return std::size_t{2} * static_cast<std::size_t>(num_kv_heads) *
         store_prepared_entry_bytes(head_dim);
}

namespace {
template <int D>
Status launch_prepare_store_kv(const StoreKvParams& p, void* prepared) {
  constexpr std::size_t kBytes = StoreTcLayout<D>::kRotationBytes + StoreTcLayout<D>::kBiasBytes;
  if (cudaFuncSetAttribute(prepare_store_kv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kBytes)) != cudaSuccess) {
    cudaGetLastError();
    set_last_error("prepare_store_kv: this device cannot give a block %zu bytes of shared memory",
                   kBytes);
    return Status::kUnsupported;
  }
  const dim3 grid(static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(rotated_sides(p)));
  prepare_store_kv_kernel<D><<<grid, kStoreTcWarps * 32, kBytes, p.stream>>>(p, prepared);
  OSCAR_CUDA_CHECK(cudaGetLastError());
  return Status::kOk;
}
}  // namespace

Status prepare_store_kv(const StoreKvParams& p, void* prepared) {
  if (p.num_kv_heads < 1 || prepared == nullptr) {
    set_last_error("prepare_store_kv: missing destination or no KV heads (%d KV heads)",
                   p.num_kv_heads);
    return Status::kInvalidArgument;
  }
  if (!supported_head_dim(p.head_dim)) {
    set_last_error("prepare_store_kv: head_dim %d has no tensor-core store (64, 128 and 256 do)",
                   p.head_dim);
    return Status::kUnsupported;
  }
  if (!is_aligned(prepared, 16) || !is_aligned(p.k_rotation, 16) || !is_aligned(p.v_rotation, 16)) {
    set_last_error("prepare_store_kv: the rotations and the destination must be 16-byte aligned");
    return Status::kInvalidArgument;
  }
  if (rotated_sides(p) == 0) return Status::kOk;  // both sides arrive rotated: nothing to prepare
  if (p.head_dim == 256) {
    // Built straight into device memory in its chunked order (R'^T does not fit shared memory).
    const dim3 grid(static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(rotated_sides(p)));
    prepare_store_kv256_kernel<<<grid, 256, 0, p.stream>>>(p, prepared);
    OSCAR_CUDA_CHECK(cudaGetLastError());
    return Status::kOk;
  }
  return p.head_dim == 64 ? launch_prepare_store_kv<64>(p, prepared)
                          : launch_prepare_store_kv<128>(p, prepared);
}

int decode_num_splits(const DecodeParams& p) { return plan_splits(p).total(); }

std::size_t decode_counter_bytes(const DecodeParams& p) {
  // A counter per (sequence, KV head) and kMaxMergeGroups more for two-level merges, then, in a
  // build with merges by ticket, their ready slots: a (max, sum) pair per q head and slot.
  const std::size_t pairs = static_cast<std::size_t>(std::max(p.batch, 0)) *
                            static_cast<std::size_t>(std::max(p.num_kv_heads, 0));
  const std::size_t group =
      p.num_kv_heads > 0 ? static_cast<std::size_t>(std::max(p.num_q_heads, 0) / p.num_kv_heads)
                         : 0;
  const std::size_t ready_bytes =
      OSCAR_MERGE_TICKETS ? pairs * group * kMaxMergeGroups * sizeof(unsigned long long) : 0;
  const std::size_t bytes = ready_slots_offset(pairs) * sizeof(unsigned) + ready_bytes;
  return (bytes + 255) / 256 * 256;
}

std::size_t decode_workspace_bytes(const DecodeParams& p) {
  const std::size_t heads =
      static_cast<std::size_t>(p.batch) * static_cast<std::size_t>(p.num_q_heads);
  const std::size_t splits = static_cast<std::size_t>(decode_num_splits(p));
  // Merge counters (decode_counter_bytes, padded to 256 bytes), partial outputs and
  // (max, sum) pairs per split.
  return decode_counter_bytes(p) +
         heads * splits *
             (static_cast<std::size_t>(p.head_dim) * sizeof(float) + sizeof(SplitPartial));
}

Status decode_attention(const DecodeParams& p) {
  if (p.batch < 1 || p.num_kv_heads < 1 || p.num_q_heads % p.num_kv_heads != 0 ||
      !supported_head_dim(p.head_dim) || (p.page_size != 8 && p.page_size != 16) ||
      p.max_pages_per_sequence < 0) {
    set_last_error(
        "decode_attention: unsupported shape (batch %d, %d q / %d KV heads, head_dim %d, page "
        "size %d): head_dim 64/128/256, GQA ratio 1/2/4/8, page size 8/16",
        p.batch, p.num_q_heads, p.num_kv_heads, p.head_dim, p.page_size);
    return Status::kInvalidArgument;
  }
  const int group = p.num_q_heads / p.num_kv_heads;
  if (group != 1 && group != 2 && group != 4 && group != 8) {
    set_last_error("decode_attention: GQA ratio %d is not supported (1, 2, 4 or 8)", group);
    return Status::kUnsupported;
  }
  if (p.q == nullptr || p.out == nullptr || p.sink_len == nullptr || p.int2_len == nullptr ||
      p.recent_len == nullptr || p.bf16_block_table == nullptr || p.int2_block_table == nullptr ||
      p.k_bf16 == nullptr || p.v_bf16 == nullptr || p.k_codes == nullptr || p.v_codes == nullptr ||
      p.k_scale_zero == nullptr || p.v_scale_zero == nullptr) {
    set_last_error("decode_attention: a required buffer is null");
    return Status::kInvalidArgument;
  }
  const SplitPlan plan = plan_splits(p);
  const int splits = plan.total();
  auto misaligned = [](const void* ptr) { return !is_aligned(ptr, 16); };
  if (plan.tensor_core &&
      (misaligned(p.k_codes) || misaligned(p.v_codes) || misaligned(p.k_scale_zero) ||
       misaligned(p.v_scale_zero) || misaligned(p.q))) {
    set_last_error(
        "decode_attention: the INT2 pools and the queries must be 16-byte aligned (tensor-core "
        "path)");
    return Status::kInvalidArgument;
  }
  const std::size_t need = decode_workspace_bytes(p);
  if (p.workspace == nullptr || p.workspace_bytes < need || !is_device_pointer(p.workspace) ||
      !is_aligned(p.workspace, 16)) {
    set_last_error(
        "decode_attention: a 16-byte aligned workspace of %zu bytes on the device is needed, got "
        "%zu",
        need, p.workspace_bytes);
    return Status::kInvalidArgument;
  }
  const std::size_t heads =
      static_cast<std::size_t>(p.batch) * static_cast<std::size_t>(p.num_q_heads);
  auto* counters = static_cast<unsigned*>(p.workspace);
  float* part_o =
      reinterpret_cast<float*>(static_cast<char*>(p.workspace) + decode_counter_bytes(p));
  auto* part_ml = reinterpret_cast<SplitPartial*>(part_o + heads * splits * p.head_dim);
  const Status launched = p.page_size == 8 ? dispatch_dim<8>(p, plan, part_o, part_ml, counters)
                                           : dispatch_dim<16>(p, plan, part_o, part_ml, counters);
  if (launched == Status::kUnsupported)
    set_last_error("decode_attention: no kernel for this shape");
  return launched;
}

#if OSCAR_DECODE_TRACE
// Timing studies only (OSCAR_DECODE_TRACE): clears the decode timeline, and prints, in µs from
// the first block's start, the spread (min / median / max over blocks) of each point.
Status decode_trace_clear() {
  static unsigned long long zeros[2 * kDecodeTraceBlocks * kDecodeTracePoints] = {};
  static unsigned long long warp_zeros[kDecodeTraceBlocks * kDecodeTraceWarps] = {};
  OSCAR_CUDA_CHECK(cudaMemcpyToSymbol(g_decode_trace, zeros, sizeof(zeros)));
  OSCAR_CUDA_CHECK(cudaMemcpyToSymbol(g_decode_trace_warps, warp_zeros, sizeof(warp_zeros)));
  return Status::kOk;
}
Status decode_trace_report(const char* label) {
  static unsigned long long t[2][kDecodeTraceBlocks][kDecodeTracePoints];
  static unsigned long long w[kDecodeTraceBlocks][kDecodeTraceWarps];
  OSCAR_CUDA_CHECK(cudaMemcpyFromSymbol(t, g_decode_trace, sizeof(t)));
  OSCAR_CUDA_CHECK(cudaMemcpyFromSymbol(w, g_decode_trace_warps, sizeof(w)));
  unsigned long long t0 = ~0ull;
  for (int k = 0; k < 2; ++k)
    for (int b = 0; b < kDecodeTraceBlocks; ++b)
      if (t[k][b][0] != 0) t0 = std::min(t0, t[k][b][0]);
  if (t0 == ~0ull) return Status::kOk;
  auto spread = [&](std::vector<double> v) {
    if (v.empty()) return std::string("-");
    std::sort(v.begin(), v.end());
    char text[64];
    std::snprintf(text, sizeof(text), "%.2f / %.2f / %.2f", v.front(), v[v.size() / 2], v.back());
    return std::string(text);
  };
  auto us = [&](unsigned long long x) { return 1e-3 * static_cast<double>(x - t0); };
  const char* tc_points[] = {"start",         "first issues", "query built", "first tile",
                             "loop end (w0)", "partial",      "done"};
  const char* simt_points[] = {"start", "done", "INT2 waited", "partial"};
  for (int k = 0; k < 2; ++k) {
    const int points = k == 0 ? 7 : 4;
    std::printf("trace %s %s kernel:", label, k == 0 ? "INT2" : "windows");
    int blocks = 0;
    for (int b = 0; b < kDecodeTraceBlocks; ++b) blocks += t[k][b][0] != 0;
    std::printf(" %d blocks\n", blocks);
    for (int q = 0; q < points; ++q) {
      std::vector<double> v;
      for (int b = 0; b < kDecodeTraceBlocks; ++b)
        if (t[k][b][0] != 0 && t[k][b][q] != 0) v.push_back(us(t[k][b][q]));
      std::printf("  %-14s %s\n", k == 0 ? tc_points[q] : simt_points[q], spread(v).c_str());
    }
    // The merging blocks: their partial (INT2 kernel) or done point, their count done, their
    // split weights in shared memory, and their end.
    for (int b = 0; b < kDecodeTraceBlocks; ++b) {
      if (t[k][b][0] == 0 || t[k][b][kMergeCountedPoint] == 0) continue;
      std::printf("  merging block %d: written %.2f, counted %.2f, weights %.2f, merged %.2f\n", b,
                  us(t[k][b][k == 0 ? 5 : 3]), us(t[k][b][kMergeCountedPoint]),
                  us(t[k][b][kMergeWeightsPoint]), us(t[k][b][k == 0 ? 6 : 1]));
    }
    if (k == 0) {
      // Per block: its warps' first and last loop ends, and its loop time (first tile -> last
      // warp end) with its multiprocessor.
      std::vector<double> first, last, spans;
      std::vector<std::pair<double, int>> by_sm;
      for (int b = 0; b < kDecodeTraceBlocks; ++b) {
        if (t[0][b][0] == 0) continue;
        double lo = 1e30, hi = 0;
        for (int x = 0; x < kDecodeTraceWarps; ++x) {
          if (w[b][x] == 0) continue;
          lo = std::min(lo, us(w[b][x]));
          hi = std::max(hi, us(w[b][x]));
        }
        if (hi == 0) continue;
        first.push_back(lo);
        last.push_back(hi);
        spans.push_back(hi - lo);
        if (t[0][b][3] != 0) {
          by_sm.push_back({hi - us(t[0][b][3]), static_cast<int>(t[0][b][kDecodeTracePoints - 1])});
        }
      }
      std::printf("  %-14s %s\n  %-14s %s\n  %-14s %s\n", "warps' 1st end", spread(first).c_str(),
                  "warps' last end", spread(last).c_str(), "warp spread", spread(spans).c_str());
      std::sort(by_sm.begin(), by_sm.end());
      std::printf("  loop time by SM (first tile -> last warp end), fastest:");
      for (std::size_t i = 0; i < std::min<std::size_t>(6, by_sm.size()); ++i)
        std::printf(" sm%d %.2f", by_sm[i].second, by_sm[i].first);
      std::printf("; slowest:");
      for (std::size_t i = by_sm.size() > 6 ? by_sm.size() - 6 : 0; i < by_sm.size(); ++i)
        std::printf(" sm%d %.2f", by_sm[i].second, by_sm[i].first);
      std::printf("\n");
    }
  }
  return Status::kOk;
}
#endif

#if OSCAR_STORE_TRACE
// Timing studies only (OSCAR_STORE_TRACE): clears the store's timeline, and prints the mean
// length of each part of a step over the traced warpgroups' steady steps (neither a warpgroup's
// first step nor its last), and the gap between a warpgroup handing the turn on and the next one
// taking it.
Status store_trace_clear() {
  static const long long zeros[sizeof(g_store_trace) / sizeof(long long)] = {};
  OSCAR_CUDA_CHECK(cudaMemcpyToSymbol(g_store_trace, zeros, sizeof(zeros)));
  return Status::kOk;
}
Status store_trace_report(const char* label) {
  static_assert(kTraceGroups * 4 == kStoreTcWarps, "a warpgroup is four warps");
  constexpr int kN = sizeof(g_store_trace) / sizeof(long long);
  static long long t[kN];
  OSCAR_CUDA_CHECK(cudaMemcpyFromSymbol(t, g_store_trace, sizeof(t)));
  const char* parts[] = {"rows wait",   "turn wait", "h0 ldm+issue",
                         "h0 MMA wait", "h0 drain",  "h1 ldm+issue",
                         "h1 MMA wait", "h1 drain",  "quantize+copies"};
  const auto at = [&](int z, int b, int g, int s, int point) {
    return t[(((z * kTraceBlocks + b) * kTraceGroups + g) * kTraceSteps + s) * kTracePoints +
             point];
  };
  for (int z = 0; z < 2; ++z) {
    double sum[kTracePoints] = {}, step_sum = 0, gap_sum = 0;
    long long count = 0, gaps = 0;
    for (int b = 0; b < kTraceBlocks; ++b) {
      for (int g = 0; g < kTraceGroups; ++g) {
        for (int s = 1; s + 1 < kTraceSteps; ++s) {
          bool full = at(z, b, g, s + 1, 0) != 0;
          for (int q = 0; q < kTracePoints; ++q) full = full && at(z, b, g, s, q) != 0;
          if (!full) continue;
          for (int q = 0; q + 1 < kTracePoints; ++q)
            sum[q] += static_cast<double>(at(z, b, g, s, q + 1) - at(z, b, g, s, q));
          step_sum += static_cast<double>(at(z, b, g, s + 1, 0) - at(z, b, g, s, 0));
          ++count;
          // The turn: taken (point 2) after the previous warpgroup handed it on (point 6).
          const int pg = (g + kTraceGroups - 1) % kTraceGroups, ps = g == 0 ? s - 1 : s;
          if (at(z, b, pg, ps, 6) != 0) {
            gap_sum += static_cast<double>(at(z, b, g, s, 2) - at(z, b, pg, ps, 6));
            ++gaps;
          }
        }
      }
    }
    std::printf("trace %s %s: %lld steady steps, mean cycles:", label, z == 0 ? "K" : "V", count);
    for (int q = 0; q + 1 < kTracePoints; ++q)
      std::printf(" %s %.0f,", parts[q], count ? sum[q] / count : 0.0);
    std::printf(" step %.0f; turn handed on -> taken %.0f\n", count ? step_sum / count : 0.0,
                gaps ? gap_sum / gaps : 0.0);
  }
  return Status::kOk;
}
#endif

}  // namespace oscar::kernels
