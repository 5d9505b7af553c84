// Fast INT2 quantization of BF16 rows, bit-identical to the plain warp quantizer, and the demotion
// kernel built on it. Included by int2_cache.cu inside its anonymous namespace, after
// bf16_to_float, float_to_bf16, round_bf16, kFullMask, is_aligned, wait_then_allow_dependents,
// device_multiprocessors and launch_kernel; it includes only int2_row_thread.h and
// int2_thresholds.h (which include nothing else).
//
// Clip threshold: the magnitude at ascending position k. Inputs are bf16 values, so magnitudes
// order like their 15-bit keys (bits 30..16) and the threshold is the order statistic of the keys,
// found by one of two exact selections (r = d - 1 - k, the position from the top):
//   - top rounds (r < kTopRounds, clip ratios near 1): each lane sorts its keys; each of r rounds
//     pops the warp maximum (one redux), then the maximum left is the answer;
//   - radix (any k): the largest T with at least r + 1 keys >= T, bit by bit over 15 bits, two
//     keys per 32-bit word compared with T at once.
// Range, scale, zero and codes follow int2::quantize_group (docs/int2-format.md) operation by
// operation, with round-to-nearest intrinsics so that nothing is contracted into a fused
// multiply-add. Divisions by 3 and by the stored scale go through a reciprocal and one exact
// remainder correction where that is proven to give the same bits (see divide_by).

#include "int2_row_thread.h"  // NOLINT(build/include)
#include "int2_thresholds.h"  // NOLINT(build/include)

namespace int2q {

// Rounds of the top selection below which it is cheaper than the 15 radix steps.
constexpr int kTopRounds = 18;

__device__ __forceinline__ int warp_max(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(kFullMask, v);
#else
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
#endif
}

__device__ __forceinline__ int warp_min(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_min_sync(kFullMask, v);
#else
  for (int off = 16; off > 0; off >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
#endif
}

__device__ __forceinline__ unsigned warp_add(unsigned v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_add_sync(kFullMask, v);
#else
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
#endif
}

// Ascending position of the clip threshold, computed as the reference does (float64, clamped).
template <int D>
__device__ __forceinline__ int clip_position(float clip_ratio) {
  const double position = floor(static_cast<double>(clip_ratio) * static_cast<double>(D));
  return position >= static_cast<double>(D - 1) ? D - 1 : static_cast<int>(position);
}

__device__ __forceinline__ void order_descending(int& a, int& b) {
  const int high = max(a, b);
  b = min(a, b);
  a = high;
}

// Sorting networks (descending) for the E = 2, 4 or 8 values of a lane.
template <int E>
__device__ __forceinline__ void sort_descending(int (&s)[E]) {
  static_assert(E == 2 || E == 4 || E == 8, "rows of 64, 128 or 256 elements");
  if constexpr (E == 2) {
    order_descending(s[0], s[1]);
  } else if constexpr (E == 4) {
    order_descending(s[0], s[1]);
    order_descending(s[2], s[3]);
    order_descending(s[0], s[2]);
    order_descending(s[1], s[3]);
    order_descending(s[1], s[2]);
  } else {
    constexpr int kNetwork[19][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 4}, {1, 5}, {2, 6},
                                     {3, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}, {2, 4}, {3, 5},
                                     {1, 4}, {3, 6}, {1, 2}, {3, 4}, {5, 6}};
#pragma unroll
    for (int i = 0; i < 19; ++i) order_descending(s[kNetwork[i][0]], s[kNetwork[i][1]]);
  }
}

// The 15-bit key of a bf16 value's magnitude (bits 30..16), moved to bits kShift .. kShift + 14.
template <int kShift>
__device__ __forceinline__ unsigned magnitude_key(float v) {
  return (__float_as_uint(v) >> (16 - kShift)) & (0x7fffu << kShift);
}

// One pop round: the lane whose head is the warp maximum drops it.
template <int E>
__device__ __forceinline__ void pop_warp_max(int (&s)[E]) {
  if (s[0] == warp_max(s[0])) {
#pragma unroll
    for (int m = 0; m + 1 < E; ++m) s[m] = s[m + 1];
    s[E - 1] = -1;  // below every tagged key: an exhausted lane never holds the maximum
  }
}

// r pop rounds (r < kTopRounds) on each of N lists, the N rounds of a step side by side (their
// reduction chains are independent), unrolled and entered at round kTopRounds - 1 - r.
template <int N, int E>
__device__ __forceinline__ void pop_rounds(int (&s)[N][E], int r) {
  static_assert(kTopRounds == 18, "the switch below has kTopRounds - 1 cases");
#define INT2Q_POP_CASE(n)                           \
  case n:                                           \
    for (int i = 0; i < N; ++i) pop_warp_max(s[i]); \
    [[fallthrough]]
  switch (r) {
    INT2Q_POP_CASE(17);
    INT2Q_POP_CASE(16);
    INT2Q_POP_CASE(15);
    INT2Q_POP_CASE(14);
    INT2Q_POP_CASE(13);
    INT2Q_POP_CASE(12);
    INT2Q_POP_CASE(11);
    INT2Q_POP_CASE(10);
    INT2Q_POP_CASE(9);
    INT2Q_POP_CASE(8);
    INT2Q_POP_CASE(7);
    INT2Q_POP_CASE(6);
    INT2Q_POP_CASE(5);
    INT2Q_POP_CASE(4);
    INT2Q_POP_CASE(3);
    INT2Q_POP_CASE(2);
    INT2Q_POP_CASE(1);
    default:
      break;
  }
#undef INT2Q_POP_CASE
}

// The r-th largest (0-based) key of the warp's values, 0 <= r < 32 E. Each lane sorts its keys,
// tagged with its lane number (key << 5 | lane), so that all tagged keys are distinct and order
// like the keys. Each of r rounds takes the warp maximum and pops it from the one lane whose head
// it is; the maximum of what is left is then the r-th largest. The rounds are unrolled and entered
// at round kTopRounds - 1 - r (a switch falling through), so that no round pays for a loop test.
template <int E>
__device__ __forceinline__ unsigned select_top(const float (&x)[E], int r) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  int s[1][E];
#pragma unroll
  for (int m = 0; m < E; ++m) s[0][m] = static_cast<int>(magnitude_key<5>(x[m])) | lane;
  sort_descending(s[0]);
  pop_rounds(s, r);
  return static_cast<unsigned>(warp_max(s[0][0])) >> 5;
}

// The r-th largest key of the warp's values: the largest T with at least r + 1 keys >= T, decided
// from bit 14 down. Two keys share a word as 16-bit fields 0x8000 + key; subtracting T
// (1 <= T <= 0x7fff) from both fields cannot borrow across them, and bit 15 of a field is then set
// exactly when key >= T.
template <int E>
__device__ __forceinline__ unsigned select_radix(const float (&x)[E], int r) {
  unsigned packed[E / 2];
#pragma unroll
  for (int j = 0; j < E / 2; ++j) {
    packed[j] = magnitude_key<0>(x[2 * j]) | magnitude_key<16>(x[2 * j + 1]) | 0x80008000u;
  }
  unsigned prefix = 0;  // the threshold so far, in both fields
#pragma unroll
  for (int bit = 14; bit >= 0; --bit) {
    const unsigned trial = prefix + (0x10001u << bit);
    unsigned at_least = 0;
#pragma unroll
    for (int j = 0; j < E / 2; ++j) at_least += __popc((packed[j] - trial) & 0x80008000u);
    if (warp_add(at_least) > static_cast<unsigned>(r)) prefix = trial;
  }
  return prefix & 0xffffu;
}

// RN(1/3).
constexpr float kReciprocalOf3 = 0x1.555556p-2f;

// x / s from inverse = RN(1/s): the rounded product and one correction by the exact remainder, each
// step an explicit round-to-nearest operation. Not correctly rounded in general; where it is used,
// an exhaustive check (all operands of the domain, on the CPU with the same IEEE operations) showed
// it gives the same result as __fdiv_rn for everything that is stored:
//   - x / 3 for every float x: the same bits except x = -0 and x = +-inf, where both quotients make
//     the scale 1 (zero, infinite or NaN);
//   - c / s for s a positive bf16 >= 2^-90 and c a finite bf16 with |c| <= 1024 s (any finite c
//     when s = 1): the same bits except quotients below 2^-29 in magnitude, whose codes are the
//     same for every bf16 zero, and whose bf16 rounding is the same once the sign of c is copied.
__device__ __forceinline__ float divide_by(float x, float s, float inverse) {
  const float q = __fmul_rn(x, inverse);
  return __fmaf_rn(__fmaf_rn(-q, s, x), inverse, q);
}

// The code of a quotient c / scale, as in the reference: clamp(floor(c / s + zero + 0.5), 0, 3), a
// float holding 0, 1, 2 or 3 (possibly -0).
__device__ __forceinline__ float code_of(float quotient, float zero) {
  const float v = floorf(__fadd_rn(__fadd_rn(quotient, zero), 0.5f));
  return fminf(fmaxf(v, 0.0f), 3.0f);
}

// The byte c0 | c1 << 2 | c2 << 4 | c3 << 6 of four codes: the sum c0 + 4 c1 + 16 c2 + 64 c3 is an
// exact small integer in float (fused multiply-adds of integers below 2^8), and adding 2^23 moves
// it into the low mantissa bits (-0 included).
__device__ __forceinline__ unsigned pack_codes(float c0, float c1, float c2, float c3) {
  const float sum = __fmaf_rn(c3, 64.0f, __fmaf_rn(c2, 16.0f, __fmaf_rn(c1, 4.0f, c0)));
  return __float_as_uint(__fadd_rn(sum, 0x1p23f)) & 0xffu;
}

// One row quantized by a warp; lane l holds elements l + 32 m. Returns the lane's packed bytes
// (D = 64: byte l for lanes < 16; D = 128: byte l; D = 256: byte l in bits 0..7 and byte l + 32 in
// bits 8..15) and the bf16 scale and zero, the same in every lane. k = clip_position<D>(clip).
template <int D>
__device__ __forceinline__ unsigned quantize_row_codes(const float (&x)[D / 32], int k,
                                                       bf16_bits& scale_bits,
                                                       bf16_bits& zero_bits) {
  constexpr int E = D / 32;
  static_assert(D == 64 || D == 128 || D == 256, "rows of 64, 128 or 256 elements");
  // A negative k (clip ratio <= 0) selects nothing, as in the reference bit search: threshold +0.
  // Otherwise the threshold is the r-th largest magnitude, r = D - 1 - k. Bits 15..0 of a bf16
  // value are zero, so the magnitudes order like their 15-bit keys (bits 30..16) and the key of the
  // order statistic is the order statistic of the keys. (A NaN with other low bits could only
  // change the threshold's NaN payload, which fminf / fmaxf never pass on.)
  unsigned threshold = 0;
  if (k >= 0) {
    const int r = D - 1 - k;
    threshold = (r < kTopRounds ? select_top(x, r) : select_radix(x, r)) << 16;
  }
  const float t = __uint_as_float(threshold);

  float c[E];
  float lo = INFINITY, hi = -INFINITY;
#pragma unroll
  for (int m = 0; m < E; ++m) {
    c[m] = fminf(fmaxf(x[m], -t), t);
    lo = fminf(lo, c[m]);
    hi = fmaxf(hi, c[m]);
  }
  for (int off = 16; off > 0; off >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(kFullMask, lo, off));
    hi = fmaxf(hi, __shfl_xor_sync(kFullMask, hi, off));
  }
  lo = __fadd_rn(lo, 0.0f);  // a zero minimum is +0 in every lane, as in int2::quantize_group
  float scale = round_bf16(divide_by(__fsub_rn(hi, lo), 3.0f, kReciprocalOf3));
  if (!(scale > 0.0f) || isinf(scale)) scale = 1.0f;
  // The domain on which dividing through RN(1/scale) gives the same zero and codes (see divide_by):
  // lo and hi finite (so is every non-NaN c), scale >= 2^-90, |c| <= 1024 scale or scale = 1. Rows
  // with lo < hi and such a scale always are (bf16 spacing keeps |c| / scale below 3 * 2^8 * 1.01);
  // the rest divide.
  const float extent = fmaxf(fabsf(lo), fabsf(hi));
  const bool reciprocal = scale >= 0x1p-90f && (extent <= 1024.0f * scale ||
                                                (scale == 1.0f && extent <= 0x1.fffffep127f));
  float zero, inverse = 0.0f;
  if (reciprocal) {
    inverse = __frcp_rn(scale);
    // |lo / scale| <= 1024, or scale = 1 and the quotient is -lo: never infinite.
    zero = round_bf16(copysignf(divide_by(-lo, scale, inverse), -lo));
  } else {
    zero = round_bf16(__fdiv_rn(-lo, scale));
    if (isinf(zero)) {
      scale = 1.0f;
      zero = round_bf16(-lo);
    }
  }
  scale_bits = float_to_bf16(scale);
  zero_bits = float_to_bf16(zero);

  float code[E];
  if (reciprocal) {
#pragma unroll
    for (int m = 0; m < E; ++m) code[m] = code_of(divide_by(c[m], scale, inverse), zero);
  } else {
#pragma unroll
    for (int m = 0; m < E; ++m) code[m] = code_of(__fdiv_rn(c[m], scale), zero);
  }
  if constexpr (D == 64) {
    // Byte j < 16 holds elements j, j + 16, j + 32, j + 48: lane j has j and j + 32 (fields 0, 2),
    // lane j + 16 has j + 16 and j + 48 (fields 1, 3).
    const unsigned half = pack_codes(code[0], 0.0f, code[1], 0.0f);
    return half | (__shfl_down_sync(kFullMask, half, 16) << 2);
  } else if constexpr (D == 128) {
    // Byte l holds elements l, l + 32, l + 64, l + 96: all of lane l.
    return pack_codes(code[0], code[1], code[2], code[3]);
  } else {
    // Byte l holds elements l + 64 f (m = 0, 2, 4, 6), byte l + 32 elements l + 32 + 64 f (m odd).
    return pack_codes(code[0], code[2], code[4], code[6]) |
           (pack_codes(code[1], code[3], code[5], code[7]) << 8);
  }
}

// Stores a row: the packed bytes (coalesced byte stores; lane_packed points at the lane's byte) and
// the (scale, zero) pair (lanes 0 and 1, one store instruction).
template <int D>
__device__ __forceinline__ void store_row(unsigned bytes, bf16_bits scale_bits, bf16_bits zero_bits,
                                          std::uint8_t* lane_packed, bf16_bits* scale_zero) {
  const int lane = threadIdx.x & 31;
  if (D != 64 || lane < 16) lane_packed[0] = static_cast<std::uint8_t>(bytes);
  if (D == 256) lane_packed[32] = static_cast<std::uint8_t>(bytes >> 8);
  if (lane < 2) scale_zero[lane] = lane == 0 ? scale_bits : zero_bits;
}

// Demotion work: a segment is the page_size rows of one (page pair, KV head, K or V), contiguous in
// both pools; a task is `chunk` consecutive rows of a segment. A launch has fewer than 2^30 rows.
struct DemoteTask {
  int pair, head, first;  // page pair, KV head, first row of the segment
  bool is_key;
};

__device__ __forceinline__ DemoteTask demote_task(const DemotePagesParams& p, int task,
                                                  int tasks_per_segment_log2, int chunk) {
  const int segment = task >> tasks_per_segment_log2;
  const int pair = (segment >> 1) / p.num_kv_heads;
  return {pair, (segment >> 1) - pair * p.num_kv_heads,
          (task & ((1 << tasks_per_segment_log2) - 1)) * chunk, (segment & 1) == 0};
}

// Whether page pair `pair` is padding (a negative source or destination page): skipped, so that a
// demotion captured in a CUDA graph can take a fixed-length list with unused entries.
__device__ __forceinline__ bool padding_pair(const DemotePagesParams& p, int pair) {
  return p.page_pairs[2 * pair] < 0 || p.page_pairs[2 * pair + 1] < 0;
}

// The first task from `task` on (in steps of `warps`) whose page pair is not padding, or one at
// or past `tasks`.
__device__ __forceinline__ int live_task(const DemotePagesParams& p, int task, int warps, int tasks,
                                         int tasks_per_segment_log2) {
  while (task < tasks && padding_pair(p, ((task >> tasks_per_segment_log2) >> 1) / p.num_kv_heads))
    task += warps;
  return task;
}

// Lane l's element l of the task's first source row.
template <int D>
__device__ __forceinline__ const bf16_bits* task_source(const DemotePagesParams& p,
                                                        const DemoteTask& t) {
  const std::int64_t row =
      (static_cast<std::int64_t>(p.page_pairs[2 * t.pair]) * p.num_kv_heads + t.head) *
          p.page_size +
      t.first;
  return (t.is_key ? p.k_bf16 : p.v_bf16) + row * D + (threadIdx.x & 31);
}

// The task's first destination row: lane l's byte of its packed codes and its (scale, zero) pair.
template <int D>
__device__ __forceinline__ void task_destination(const DemotePagesParams& p, const DemoteTask& t,
                                                 std::uint8_t*& lane_codes,
                                                 bf16_bits*& scale_zero) {
  const std::int64_t row =
      (static_cast<std::int64_t>(p.page_pairs[2 * t.pair + 1]) * p.num_kv_heads + t.head) *
          p.page_size +
      t.first;
  lane_codes = (t.is_key ? p.k_codes : p.v_codes) + row * (D / 4) + (threadIdx.x & 31);
  scale_zero = (t.is_key ? p.k_scale_zero : p.v_scale_zero) + row * 2;
}

// Lane l's elements l + 32 m of a row; read once, so streamed past the caches.
template <int D>
__device__ __forceinline__ void load_row(const bf16_bits* lane_src, bf16_bits (&raw)[D / 32]) {
#pragma unroll
  for (int m = 0; m < D / 32; ++m) raw[m] = __ldcs(lane_src + 32 * m);
}

constexpr int kDemoteWarps = 8;
// Resident blocks per multiprocessor the kernel is built for (registers: 40 per thread at 6 blocks
// of 256 threads, 64 at 4).
template <int D>
constexpr int demote_min_blocks() {
  return D == 256 ? 4 : 6;
}

}  // namespace int2q

// Quantizes one row held by a warp (lane l: elements l + 32 m) into packed_out (D / 4 bytes) and
// scale_zero_out (bf16 scale, zero); the whole warp calls it. Every x[m] must be a bf16 value (a
// float whose low 16 bits are zero). Bit-identical to the generic warp quantizer.
template <int D>
__device__ void quantize_row_bf16(const float (&x)[D / 32], float clip_ratio,
                                  std::uint8_t* packed_out, bf16_bits* scale_zero_out) {
  bf16_bits scale_bits, zero_bits;
  const unsigned bytes =
      int2q::quantize_row_codes<D>(x, int2q::clip_position<D>(clip_ratio), scale_bits, zero_bits);
  int2q::store_row<D>(bytes, scale_bits, zero_bits, packed_out + (threadIdx.x & 31),
                      scale_zero_out);
}

// The start and end of every demotion kernel. Launched the ordinary way or as a programmatic
// dependent, the grid waits for the work before it first (the page pairs and pools may be its),
// then lets its own dependents start. Beside the call before it (DemotePagesParams::
// overlap_previous) it does not wait: its inputs are none of that call's, and that call's kernels
// signal only after they have waited for the work before them, so a grid their signal starts may
// read what came before. Each block then lets the dependents start once its own work is done,
// and block 0 waits for that call before it exits, so that the grid completes only after it (and
// a dependent's wait returns only then). A decode step on an H200 (36 layers, one graph, d 128):
// with the signal at the grid's top instead, the next call's blocks sat waiting on the
// multiprocessors while the store ran (4K, batch 32: 1.07x the step without the overlap, against
// 0.95x this way); at its exit, the next call's launch was no longer hidden (128K, batch 1: 1.15x
// against 0.99x).
__device__ __forceinline__ void demotion_begin(bool beside) {
  if (!beside) wait_then_allow_dependents();
}
__device__ __forceinline__ void demotion_end(bool beside) {
  if (beside) {
    allow_dependent_launch();
    if (blockIdx.x == 0) wait_for_prerequisite_grids();
  }
}

// Demotion: every warp walks tasks (chunks of a segment's rows) with a grid stride and loads the
// next row before quantizing the current one, so a row's load overlaps a row's arithmetic. The
// chunk shrinks from a page to one row while there are fewer tasks than warps, so that small
// demotions (one page, one head) still spread over many warps.
template <int D>
__device__ __forceinline__ void demote_pages_fast(const DemotePagesParams& p) {
  constexpr int E = D / 32;
  const int warps = static_cast<int>(gridDim.x) * int2q::kDemoteWarps;
  const int segments = p.num_pages * p.num_kv_heads * 2;
  int chunk = p.page_size, tasks_per_segment_log2 = 0;
  while (chunk > 1 && (segments << tasks_per_segment_log2) < warps) {
    chunk >>= 1;
    ++tasks_per_segment_log2;
  }
  const int tasks = segments << tasks_per_segment_log2;
  int task = int2q::live_task(
      p, static_cast<int>(blockIdx.x) * int2q::kDemoteWarps + static_cast<int>(threadIdx.x >> 5),
      warps, tasks, tasks_per_segment_log2);
  if (task >= tasks) return;

  // Per task: the source row to prefetch, the destination and k; a new task's destination and k
  // are worked out after the row in flight is quantized, to keep registers free.
  int2q::DemoteTask current = int2q::demote_task(p, task, tasks_per_segment_log2, chunk);
  const bf16_bits* lane_src = int2q::task_source<D>(p, current);
  std::uint8_t* lane_codes;
  bf16_bits* scale_zero;
  int2q::task_destination<D>(p, current, lane_codes, scale_zero);
  int k = int2q::clip_position<D>((current.is_key ? p.k_clip : p.v_clip)[current.head]);
  bf16_bits next[E];
  int2q::load_row<D>(lane_src, next);
  for (int row = 0;;) {
    float x[E];
#pragma unroll
    for (int m = 0; m < E; ++m) x[m] = bf16_to_float(next[m]);
    // Prefetch the following row: the next of this task or the first of the warp's next task
    // (task + warps < 2^31: fewer than 2^30 rows per launch).
    const bool same_task = row + 1 < chunk;
    bool more = true;
    if (same_task) {
      int2q::load_row<D>(lane_src + (row + 1) * D, next);
    } else {
      task = int2q::live_task(p, task + warps, warps, tasks, tasks_per_segment_log2);
      more = task < tasks;
      if (more) {
        current = int2q::demote_task(p, task, tasks_per_segment_log2, chunk);
        lane_src = int2q::task_source<D>(p, current);
        int2q::load_row<D>(lane_src, next);
      }
    }
    bf16_bits scale_bits, zero_bits;
    const unsigned bytes = int2q::quantize_row_codes<D>(x, k, scale_bits, zero_bits);
    int2q::store_row<D>(bytes, scale_bits, zero_bits, lane_codes + row * (D / 4),
                        scale_zero + 2 * row);
    if (same_task) {
      ++row;
    } else {
      if (!more) break;
      int2q::task_destination<D>(p, current, lane_codes, scale_zero);
      k = int2q::clip_position<D>((current.is_key ? p.k_clip : p.v_clip)[current.head]);
      row = 0;
    }
  }
}

// kBeside: launched beside the call before it (DemotePagesParams::overlap_previous), as a
// template parameter so that the ordinary kernel keeps its registers.
template <int D, bool kBeside>
__global__ void __launch_bounds__(int2q::kDemoteWarps * 32, int2q::demote_min_blocks<D>())
    demote_pages_fast_kernel(DemotePagesParams p) {
  demotion_begin(kBeside);
  demote_pages_fast<D>(p);
  demotion_end(kBeside);
}

// ---------------------------------------------------------------------------------------------
// Batched demotion by thresholds. A warp takes B consecutive rows of a task at a time:
//   1. per row, the warp-wide work: clip threshold, raw minimum and maximum (NaN-propagating, so a
//      NaN anywhere shows in the maximum);
//   2. per batch, the row scalars, with the L = 32 / B lanes of row i (lanes i L ..) each working
//      out one threshold (int2t::row_scalars, row_threshold): scalar work once per row, not once
//      per lane;
//   3. per row, three packed bf16 comparisons per pair of elements give the codes.
// A row the thresholds cannot serve (NaN, a scale outside divide_by's domain, an undecided
// threshold) is quantized by quantize_row_codes from a fresh load, as in demote_pages_fast_kernel.
// Lane l holds the 32-bit words at elements 2 l + 64 m (m < D / 64): bf16 pairs (2 l + 64 m,
// 2 l + 64 m + 1). In the packed row, element e is field e / (D / 4) of byte e % (D / 4), so lane l
// fills fields of bytes 2 l' and 2 l' + 1 (l' = l % (D / 8)) and lanes l ^ (D / 8) .. complete
// them.

namespace int2q {

template <int D>
__host__ __device__ constexpr int demote_batch() {
  return D == 256 ? 4 : 8;
}
template <int D>
constexpr int demote_batched_min_blocks() {
  return 4;  // 64 registers per thread: a batch of rows lives in registers
}

// Signed integers ordered like the floats they come from (-0 just below +0; NaNs beyond the
// infinities), and back.
__device__ __forceinline__ int float_order(float v) {
  const int s = __float_as_int(v);
  return s ^ ((s >> 31) & 0x7fffffff);
}
__device__ __forceinline__ float order_float(int k) {
  return __int_as_float(k ^ ((k >> 31) & 0x7fffffff));
}

__device__ __forceinline__ float min_nan(float a, float b) {
  float d;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float max_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// Tagged magnitude keys of a word's two bf16 values (three instructions for both, no shifts): the
// 15 magnitude bits at bits 30..16 and the lane number below them, so that all tagged keys of a
// warp are distinct, non-negative and order like the magnitudes; the key's float bits are then the
// tagged key with the low half cleared.
__device__ __forceinline__ void tagged_keys(unsigned word, unsigned lane, int& low, int& high) {
  low = static_cast<int>(__byte_perm(word & 0x7fffu, lane, 0x1054));
  high = static_cast<int>((word & 0x7fff0000u) | lane);
}

// select_top for N rows at once, given as bf16 pairs (lane l: word m of row i is rows[i][m]),
// returning the thresholds' float bits (key << 16). With N = 2 the rows' pop rounds are independent
// chains of warp reductions, interleaved so that one's latency hides the other's.
template <int N, int W>
__device__ __forceinline__ void select_top_rows(const unsigned (*rows)[W], int r,
                                                unsigned (&threshold)[N]) {
  constexpr int E = 2 * W;
  const unsigned lane = threadIdx.x & 31;
  int s[N][E];
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int m = 0; m < W; ++m) tagged_keys(rows[i][m], lane, s[i][2 * m], s[i][2 * m + 1]);
    sort_descending(s[i]);
  }
  pop_rounds(s, r);
#pragma unroll
  for (int i = 0; i < N; ++i) threshold[i] = static_cast<unsigned>(warp_max(s[i][0])) & 0xffff0000u;
}

// The field (0..3) that lane `lane`'s word m fills in its bytes.
template <int D>
__device__ __forceinline__ int word_field(int lane, int m) {
  if constexpr (D == 256) {
    return m;
  } else if constexpr (D == 128) {
    return 2 * m + (lane >> 4);
  } else {
    return lane >> 3;
  }
}

// A row quantized by the per-element quantizer from a fresh load (lane l: elements l + 32 m): the
// batched kernel's rare path.
template <int D>
__device__ __forceinline__ void demote_row_exact(const bf16_bits* row, int k, std::uint8_t* codes,
                                                 bf16_bits* scale_zero) {
  constexpr int E = D / 32;
  const int lane = static_cast<int>(threadIdx.x & 31);
  bf16_bits raw[E];
  load_row<D>(row + lane, raw);
  float x[E];
#pragma unroll
  for (int m = 0; m < E; ++m) x[m] = bf16_to_float(raw[m]);
  bf16_bits scale_bits, zero_bits;
  const unsigned bytes = quantize_row_codes<D>(x, k, scale_bits, zero_bits);
  store_row<D>(bytes, scale_bits, zero_bits, codes + lane, scale_zero);
}

template <int D>
__device__ __forceinline__ void demote_pages_batched(const DemotePagesParams& p) {
  constexpr int E = D / 32, W = D / 64, B = demote_batch<D>(), L = 32 / B;
  constexpr unsigned kRowLanes = (1u << L) - 1u;
  // Rows whose clip thresholds are selected together: pairs, unless registers run short (D = 256;
  // D = 128 before sm_90, where pairs spill).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  constexpr int G = D == 64 ? 2 : 1;
#else
  constexpr int G = D == 256 ? 1 : 2;
#endif
  static_assert(B % G == 0, "step 1 takes whole groups of rows");
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int my_row = lane / L;                // the batch row whose scalars this lane finds
  const int my_level = min(lane % L + 1, 3);  // and the threshold (lanes past 3 repeat 3)
  // Bit masks placing a word's two codes: bit 0 of the low element's code at bit 2 f, of the
  // high element's at bit 24 + 2 f (folded to 8 + 2 f at the end).
  unsigned field_bit0[W];
#pragma unroll
  for (int m = 0; m < W; ++m) field_bit0[m] = 0x01000001u << (2 * word_field<D>(lane, m));

  const int warps = static_cast<int>(gridDim.x) * kDemoteWarps;
  const int segments = p.num_pages * p.num_kv_heads * 2;
  int chunk = p.page_size, tasks_per_segment_log2 = 0;
  while (chunk > 1 && (segments << tasks_per_segment_log2) < warps) {
    chunk >>= 1;
    ++tasks_per_segment_log2;
  }
  const int tasks = segments << tasks_per_segment_log2;
  for (int task = static_cast<int>(blockIdx.x) * kDemoteWarps + static_cast<int>(threadIdx.x >> 5);
       task < tasks; task += warps) {
    const DemoteTask current = demote_task(p, task, tasks_per_segment_log2, chunk);
    if (padding_pair(p, current.pair)) continue;
    const bf16_bits* task_src = task_source<D>(p, current) - lane;  // row 0, element 0
    std::uint8_t* task_codes;
    bf16_bits* task_scale_zero;
    task_destination<D>(p, current, task_codes, task_scale_zero);
    task_codes -= lane;
    const int k = clip_position<D>((current.is_key ? p.k_clip : p.v_clip)[current.head]);
    if (k >= 0 && D - 1 - k >= kTopRounds) {  // clip ratios far below 1: the radix selection
      for (int row = 0; row < chunk; ++row) {
        demote_row_exact<D>(task_src + static_cast<std::int64_t>(row) * D, k,
                            task_codes + static_cast<std::int64_t>(row) * (D / 4),
                            task_scale_zero + 2 * row);
      }
      continue;
    }
    for (int first = 0; first < chunk; first += B) {
      const int count = min(B, chunk - first);
      const bf16_bits* batch_src = task_src + static_cast<std::int64_t>(first) * D;
      unsigned w[B][W];
#pragma unroll
      for (int i = 0; i < B; ++i) {
        const unsigned* row = reinterpret_cast<const unsigned*>(batch_src + i * D) + lane;
#pragma unroll
        for (int m = 0; m < W; ++m) w[i][m] = i < count ? __ldcs(row + 32 * m) : 0u;
      }
      // 1. Per row: threshold and raw range, kept by the lanes of the row. Rows go in groups of
      // G (a row past count is zeros, and its results are never used); the range stays in
      // float_order form until the loop is done (one conversion per batch, not per row).
      float my_t = 0.0f;
      int my_min_order = 0, my_max_order = 0;
#pragma unroll
      for (int i = 0; i < B; i += G) {
        if (i < count) {
          unsigned threshold[G] = {};
          if (k >= 0) select_top_rows<G>(&w[i], D - 1 - k, threshold);
#pragma unroll
          for (int h = 0; h < G; ++h) {
            float x[E];
#pragma unroll
            for (int m = 0; m < W; ++m) {
              x[2 * m] = __uint_as_float(w[i + h][m] << 16);
              x[2 * m + 1] = __uint_as_float(w[i + h][m] & 0xffff0000u);
            }
            float lane_min = x[0], lane_max = x[0];
#pragma unroll
            for (int m = 1; m < E; ++m) {
              lane_min = min_nan(lane_min, x[m]);
              lane_max = max_nan(lane_max, x[m]);
            }
            const int row_min_order = warp_min(float_order(lane_min));
            const int row_max_order = warp_max(float_order(lane_max));
            if (my_row == i + h) {
              my_t = __uint_as_float(threshold[h]);
              my_min_order = row_min_order;
              my_max_order = row_max_order;
            }
          }
        }
      }
      // 2. Per batch: scalars and thresholds of row my_row.
      const float my_min = order_float(my_min_order), my_max = order_float(my_max_order);
      const int2t::RowScalars rs = int2t::row_scalars(my_min, my_max, my_t);
      bool decided = false;
      unsigned short level_bits = int2t::kNoElement;
      if (rs.reciprocal && !int2t::is_nan(my_max)) {
        level_bits = int2t::row_threshold(rs, my_level, &decided);
      }
      const unsigned undecided = __ballot_sync(kFullMask, !decided);
      const unsigned level_pair = level_bits * 0x10001u;
      if (lane % L == 0 && my_row < count && ((undecided >> (my_row * L)) & kRowLanes) == 0) {
        bf16_bits* sz = task_scale_zero + 2 * (first + my_row);
        sz[0] = float_to_bf16(rs.scale);
        sz[1] = float_to_bf16(rs.zero);
      }
      // 3. Per row: codes.
#pragma unroll
      for (int i = 0; i < B; ++i) {
        if (i >= count) break;
        std::uint8_t* row_codes = task_codes + static_cast<std::int64_t>(first + i) * (D / 4);
        if (((undecided >> (i * L)) & kRowLanes) != 0) continue;  // below
        const unsigned t1 = __shfl_sync(kFullMask, level_pair, i * L);
        const unsigned t2 = __shfl_sync(kFullMask, level_pair, i * L + 1);
        const unsigned t3 = __shfl_sync(kFullMask, level_pair, i * L + 2);
        unsigned fields = 0;
#pragma unroll
        for (int m = 0; m < W; ++m) {
          const unsigned g1 = int2r::ge_mask(w[i][m], t1), g2 = int2r::ge_mask(w[i][m], t2);
          const unsigned g3 = int2r::ge_mask(w[i][m], t3);
          // code = g1 + g2 + g3 (each 0 or 1, g1 >= g2 >= g3): bit 1 is g2, bit 0 g1 ^ g2 ^ g3.
          fields |= ((g1 ^ g2 ^ g3) & field_bit0[m]) | (g2 & (field_bit0[m] << 1));
        }
        unsigned pair = __byte_perm(fields, 0, 0x4430);  // bytes 0 and 3: the lane's two bytes
        if constexpr (D == 64) {
          pair |= __shfl_xor_sync(kFullMask, pair, 8);
          pair |= __shfl_xor_sync(kFullMask, pair, 16);
        } else if constexpr (D == 128) {
          pair |= __shfl_xor_sync(kFullMask, pair, 16);
        }
        if (lane < D / 8) {
          reinterpret_cast<unsigned short*>(row_codes)[lane] = static_cast<unsigned short>(pair);
        }
      }
      // Rows the thresholds cannot serve (rare; kept out of the unrolled loop above).
      for (int i = 0; i < count && undecided != 0; ++i) {
        if (((undecided >> (i * L)) & kRowLanes) != 0) {
          demote_row_exact<D>(batch_src + i * D, k,
                              task_codes + static_cast<std::int64_t>(first + i) * (D / 4),
                              task_scale_zero + 2 * (first + i));
        }
      }
    }
  }
}

template <int D, bool kBeside>
__global__ void __launch_bounds__(kDemoteWarps * 32, demote_batched_min_blocks<D>())
    demote_pages_batched_kernel(DemotePagesParams p) {
  demotion_begin(kBeside);
  demote_pages_batched<D>(p);
  demotion_end(kBeside);
}

// ---------------------------------------------------------------------------------------------
// Row-per-thread demotion, for large demotions. A warp takes 32 consecutive rows of one (K or V,
// KV head) across pages, so the clip ratio is the same for the whole warp, and each thread
// quantizes one row alone (int2r::quantize_row: the row's words in its registers, the clip
// threshold from top lists of magnitude keys, the scalars and code thresholds once per row), with
// no cross-lane reduction. The batched kernel's warp-wide work per row (pop rounds, range
// reductions, scalars shared out across lanes) is ~160 warp instructions; here a row costs its
// thread ~1500 instructions at a clip ratio of 0.96, ~48 warp instructions per row. Rows the
// thresholds cannot serve and clip ratios whose top list would be too long (int2r::top_length)
// go through demote_row_exact, the whole warp on one row. At d 256 and 128 a pair of lanes takes
// each row (store_row_pair; kRowwiseRows below).

// The four 32-bit words (bf16 pairs) of a 16-byte vector, into w[0..3].
__device__ __forceinline__ void unpack_words(const uint4& v, unsigned* w) {
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}

// Quantizes the row this thread holds (bf16 pairs; clip position k with int2r::top_length<D>(D -
// 1 - k) > 0) and stores it at `row` of the pools: the codes as 16-byte vectors (16-byte aligned
// pool), (scale, zero) as one word. Returns false, storing nothing, for a row the threshold form
// declines (the caller quantizes it with the warp).
template <int D>
__device__ __forceinline__ bool store_row_thread(const unsigned (&w)[D / 2], int k,
                                                 std::uint8_t* codes_pool,
                                                 bf16_bits* scale_zero_pool, std::int64_t row) {
  const unsigned key = int2r::threshold_key<D>(w, D - 1 - k);
  unsigned codes[D / 16], scale_zero;
  if (!int2r::quantize_row<D>(w, key, codes, scale_zero)) return false;
  uint4* dst = reinterpret_cast<uint4*>(codes_pool + row * (D / 4));
#pragma unroll
  for (int i = 0; i < D / 64; ++i) {
    dst[i] = make_uint4(codes[4 * i], codes[4 * i + 1], codes[4 * i + 2], codes[4 * i + 3]);
  }
  reinterpret_cast<unsigned*>(scale_zero_pool)[row] = scale_zero;
  return true;
}

// A pair of lanes (lane and lane ^ 1, both active) quantizes one row, each holding D / 4 of its
// words (int2r::quantize_words gives the layout; `half` = lane & 1): its top list and range are
// merged with the partner's by shuffles, both work out the same scalars and code thresholds, and
// each writes its half of the codes, lane `half` 0 the (scale, zero) word. Half the registers of
// the row-per-thread form: at d 256 that form holds 128 words a thread and spilled in the
// tensor-core store. The list length follows the clip position, uniform across the warp.
template <int H, int L>
__device__ __forceinline__ unsigned pair_key_of_length(const unsigned (&u)[H], int r) {
  unsigned mine[L], partner[L];
  int2r::top_list_blocks<H, L>(u, mine);
#pragma unroll
  for (int i = 0; i < L; ++i) partner[i] = __shfl_xor_sync(kFullMask, mine[i], 1);
  return int2r::pair_list_key<L>(mine, partner, r);
}

template <int D>
__device__ __forceinline__ unsigned pair_threshold_key(const unsigned (&u)[D / 4], int r) {
  return int2r::with_block_list<D>(int2r::pair_top_length<D>(r), [&](auto list) {
    return pair_key_of_length<D / 4, decltype(list)::value>(u, r);
  });
}

// Calls fn(offset, word) for each 16-byte chunk a lane of a pair holds (int2r::quantize_words'
// layout): the chunk starts `offset` elements after the lane's first element of the row (element
// half D / 8) and at word `word` of the lane's D / 4 words.
template <int D, typename Fn>
__device__ __forceinline__ void for_each_pair_chunk(Fn&& fn) {
#pragma unroll
  for (int f = 0; f < 4; ++f) {
#pragma unroll
    for (int c = 0; c < D / 64; ++c) fn(f * (D / 4) + 8 * c, f * (D / 16) + 4 * c);
  }
}

// Quantizes the row a lane pair holds (clip position k with int2r::top_length<D>(D - 1 - k) > 0;
// every lane of the warp calls it) and stores it at `row` of the pools (none where row < 0).
// Returns false, storing nothing, for a row the threshold form declines, on both lanes.
template <int D>
__device__ __forceinline__ bool store_row_pair(const unsigned (&u)[D / 4], int half, int k,
                                               std::uint8_t* codes_pool, bf16_bits* scale_zero_pool,
                                               std::int64_t row) {
  static_assert(D >= 128, "a half row's codes as 16-byte vectors");
  const unsigned key = pair_threshold_key<D>(u, D - 1 - k);
  unsigned low, high;
  int2r::range_of_words<D / 4>(u, low, high);
  // The partner's minima and maxima fold in as two more words of the row.
  const unsigned partner_low = __shfl_xor_sync(kFullMask, low, 1);
  const unsigned partner_high = __shfl_xor_sync(kFullMask, high, 1);
  int2r::range_update(low, high, partner_low);
  int2r::range_update(low, high, partner_high);
  unsigned codes[D / 32], scale_zero;
  if (!int2r::quantize_words<D / 4, true>(u, low, high, key, codes, scale_zero)) return false;
  if (row >= 0) {
    uint4* dst = reinterpret_cast<uint4*>(codes_pool + row * (D / 4) + half * (D / 8));
#pragma unroll
    for (int i = 0; i < D / 128; ++i) {
      dst[i] = make_uint4(codes[4 * i], codes[4 * i + 1], codes[4 * i + 2], codes[4 * i + 3]);
    }
    if (half == 0) reinterpret_cast<unsigned*>(scale_zero_pool)[row] = scale_zero;
  }
  return true;
}

#if OSCAR_STORE_ABLATE_QUANTIZE
// Ablation of the store's quantization (timing only): the row's words folded into its codes and
// (scale, zero), so that its loads and stores stay and the clip selection, range, thresholds and
// codes go.
template <int D>
__device__ __forceinline__ bool store_row_ablated(const unsigned (&w)[D / 2],
                                                  std::uint8_t* codes_pool,
                                                  bf16_bits* scale_zero_pool, std::int64_t row) {
  unsigned c[4] = {0, 0, 0, 0};
#pragma unroll
  for (int m = 0; m < D / 2; ++m) c[m % 4] ^= w[m];
  uint4* dst = reinterpret_cast<uint4*>(codes_pool + row * (D / 4));
#pragma unroll
  for (int i = 0; i < D / 64; ++i) dst[i] = make_uint4(c[0], c[1], c[2], c[3]);
  reinterpret_cast<unsigned*>(scale_zero_pool)[row] = c[0];
  return true;
}
#endif

constexpr int kRowwiseWarps = 8;
// Rows a warp of the row-per-thread demotion takes: at d 256 a pair of lanes per row
// (store_row_pair), whose 64 words a lane leave room for two blocks a multiprocessor where a whole
// row a thread (128 words) took 255 registers and allowed one.
#ifndef OSCAR_DEMOTE256_PAIR_ROWS
#define OSCAR_DEMOTE256_PAIR_ROWS 1
#endif
// At d 128 too since pairs fit three blocks a multiprocessor (80 registers) where a whole row a
// thread fits two; pairs with two blocks ran level with the row a thread.
#ifndef OSCAR_DEMOTE128_PAIR_ROWS
#define OSCAR_DEMOTE128_PAIR_ROWS 1
#endif
// Whether the row-per-thread demotion takes each row by a pair of lanes (16 rows a warp).
template <int D>
constexpr bool kRowwisePairs = (D == 256 && OSCAR_DEMOTE256_PAIR_ROWS) ||
                               (D == 128 && OSCAR_DEMOTE128_PAIR_ROWS);
template <int D>
constexpr int kRowwiseRows = kRowwisePairs<D> ? 16 : 32;
inline int rowwise_rows_per_warp(int head_dim) {
  return head_dim == 256   ? kRowwiseRows<256>
         : head_dim == 128 ? kRowwiseRows<128>
                           : kRowwiseRows<64>;
}

// Resident blocks a multiprocessor of the d 64 row a thread: three (80 registers, no spills)
// where two (117) ran 5% slower (16384 pages x 8 heads on an H100: 256.4-259.7 against
// 270.9-274.5 us; results page). OSCAR_DEMOTE64_MIN_BLOCKS=2 builds the two for comparisons.
#ifndef OSCAR_DEMOTE64_MIN_BLOCKS
#define OSCAR_DEMOTE64_MIN_BLOCKS 3
#endif
// Two blocks a multiprocessor (128 registers), except three at d 64 (above) and for pairs at
// d 128 (80 registers), and one for a whole d 256 row a thread.
template <int D>
constexpr int kRowwiseMinBlocks = D == 64                         ? OSCAR_DEMOTE64_MIN_BLOCKS
                                  : D == 128 && kRowwisePairs<D>  ? 3
                                  : D == 256 && !kRowwisePairs<D> ? 1
                                                                  : 2;

// One warp per 32 rows (kRowwiseRows) of one (K or V, KV head); rows run over pages in page order.
// Needs 16-byte aligned pools (the launcher checks).
template <int D>
__device__ __forceinline__ void demote_pages_rowwise(const DemotePagesParams& p,
                                                     int page_size_log2) {
  constexpr int kRows = kRowwiseRows<D>;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int rows_per_group = p.num_pages << page_size_log2;  // < 2^30 per launch
  const int warps_per_group = (rows_per_group + kRows - 1) / kRows;
  const std::int64_t warp_task =
      static_cast<std::int64_t>(blockIdx.x) * kRowwiseWarps + (threadIdx.x >> 5);
  if (warp_task >= std::int64_t{2} * p.num_kv_heads * warps_per_group) return;
  const int group = static_cast<int>(warp_task / warps_per_group);
  const int first = static_cast<int>(warp_task - std::int64_t{group} * warps_per_group) * kRows;
  const bool is_key = group < p.num_kv_heads;
  const int head = is_key ? group : group - p.num_kv_heads;
  const int k = clip_position<D>((is_key ? p.k_clip : p.v_clip)[head]);
  const bf16_bits* source = is_key ? p.k_bf16 : p.v_bf16;
  std::uint8_t* codes_pool = is_key ? p.k_codes : p.v_codes;
  bf16_bits* scale_zero_pool = is_key ? p.k_scale_zero : p.v_scale_zero;

  const int half = lane & 1;  // pairs: which half of the row's words
  const int row = first + (kRows == 16 ? lane >> 1 : lane);
  bool active = row < rows_per_group;
  std::int64_t src_row = 0, dst_row = 0;
  if (active) {
    const int page = row >> page_size_log2, offset = row & ((1 << page_size_log2) - 1);
    const int src_page = p.page_pairs[2 * page], dst_page = p.page_pairs[2 * page + 1];
    active = src_page >= 0 && dst_page >= 0;  // a padding pair: skipped
    src_row =
        ((static_cast<std::int64_t>(src_page) * p.num_kv_heads + head) << page_size_log2) + offset;
    dst_row =
        ((static_cast<std::int64_t>(dst_page) * p.num_kv_heads + head) << page_size_log2) + offset;
  }
  const bool thread_path = k >= 0 && int2r::top_length<D>(D - 1 - k) > 0;  // warp-uniform
  bool stored = false;
  if constexpr (kRows == 16) {
    if (thread_path) {
      unsigned u[D / 4];
      const bf16_bits* src = source + src_row * D + half * (D / 8);
      for_each_pair_chunk<D>([&](int offset, int word) {
        const uint4* chunk = reinterpret_cast<const uint4*>(src + offset);
        unpack_words(active ? __ldcs(chunk) : make_uint4(0, 0, 0, 0), &u[word]);
      });
      stored = store_row_pair<D>(u, half, k, codes_pool, scale_zero_pool, active ? dst_row : -1) &&
               active;
    }
  } else if (thread_path) {
    unsigned w[D / 2];
    const uint4* src = reinterpret_cast<const uint4*>(source + src_row * D);
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      unpack_words(active ? __ldcs(src + i) : make_uint4(0, 0, 0, 0), &w[4 * i]);
    }
    stored = active && store_row_thread<D>(w, k, codes_pool, scale_zero_pool, dst_row);
  }
  // The rest, one row at a time by the whole warp (a pair's row counted once).
  const bool reports = kRows == 32 || half == 0;
  for (unsigned rest = __ballot_sync(kFullMask, active && !stored && reports); rest != 0;
       rest &= rest - 1) {
    const int i = __ffs(rest) - 1;
    const std::int64_t s = __shfl_sync(kFullMask, src_row, i);
    const std::int64_t d = __shfl_sync(kFullMask, dst_row, i);
    demote_row_exact<D>(source + s * D, k, codes_pool + d * (D / 4), scale_zero_pool + 2 * d);
  }
}

template <int D, bool kBeside>
__global__ void __launch_bounds__(kRowwiseWarps * 32, kRowwiseMinBlocks<D>)
    demote_pages_rowwise_kernel(DemotePagesParams p, int page_size_log2) {
  demotion_begin(kBeside);
  demote_pages_rowwise<D>(p, page_size_log2);
  demotion_end(kBeside);
}

}  // namespace int2q

// Launches the demotion of p (already validated by demote_pages): one warp per row at most, up to
// the blocks that fit on the device at once, in page ranges of fewer than 2^30 rows (a page of
// 2 * num_kv_heads * page_size rows is far below that).
inline Status launch_demote_pages_fast(const DemotePagesParams& p) {
  if (p.num_pages <= 0) return Status::kOk;
  int sms = device_multiprocessors();
  if (sms < 1) sms = 132;
  const std::int64_t rows_per_page = std::int64_t{2} * p.num_kv_heads * p.page_size;
  const std::int64_t pages_per_launch =
      std::max<std::int64_t>(1, ((std::int64_t{1} << 30) - 1) / rows_per_page);
  constexpr unsigned kThreads = int2q::kDemoteWarps * 32;
  // The batched kernel reads bf16 pairs as 32-bit words and writes code bytes in pairs; where it
  // cannot, and for kWarpPerRow, a warp per row.
  const bool batched = p.kernel != DemoteKernel::kWarpPerRow && is_aligned(p.k_bf16, 4) &&
                       is_aligned(p.v_bf16, 4) && is_aligned(p.k_codes, 2) &&
                       is_aligned(p.v_codes, 2);
  // The row-per-thread kernel reads and writes rows as 16-byte vectors (demote_pages checks).
  const bool rowwise = p.kernel == DemoteKernel::kRowPerThread;
  // Beside the call before it: only as a programmatic dependent (launch_config ignores it before
  // Hopper, where the grid then starts after that call and its waits pass at once).
  const bool beside = p.enable_pdl && p.overlap_previous;
  for (std::int64_t first = 0; first < p.num_pages; first += pages_per_launch) {
    DemotePagesParams part = p;
    part.num_pages =
        static_cast<int>(std::min<std::int64_t>(pages_per_launch, p.num_pages - first));
    part.page_pairs = p.page_pairs + 2 * first;
    const std::int64_t row_warps =
        (part.num_pages * rows_per_page + int2q::kDemoteWarps - 1) / int2q::kDemoteWarps;
    auto blocks = [&](int min_blocks) {
      return static_cast<unsigned>(
          std::min<std::int64_t>(row_warps, std::int64_t{sms} * min_blocks));
    };
    // Every kernel waits for the work before it (launched as a programmatic dependent or not),
    // or, beside the call before it (overlap_previous), for that call at its end: `kernels` is
    // the pair of forms, ordinary and beside.
    const auto launch = [&](auto kernels, unsigned grid, unsigned threads, auto... args) {
      return launch_kernel(beside ? kernels.second : kernels.first, dim3(grid), dim3(threads), 0,
                           p.stream, p.enable_pdl, part, args...);
    };
    const auto forms = [](auto ordinary, auto beside_form) {
      return std::make_pair(ordinary, beside_form);
    };
    cudaError_t launched;
    if (rowwise) {
      const int page_size_log2 = p.page_size == 16 ? 4 : 3;
      const int warp_rows = int2q::rowwise_rows_per_warp(p.head_dim);
      const std::int64_t warp_tasks =
          2 * std::int64_t{p.num_kv_heads} *
          ((std::int64_t{part.num_pages} * p.page_size + warp_rows - 1) / warp_rows);
      const auto rowwise_blocks =
          static_cast<unsigned>((warp_tasks + int2q::kRowwiseWarps - 1) / int2q::kRowwiseWarps);
      constexpr unsigned kRowwiseThreads = int2q::kRowwiseWarps * 32;
      const auto rowwise_kernels =
          p.head_dim == 64    ? forms(int2q::demote_pages_rowwise_kernel<64, false>,
                                      int2q::demote_pages_rowwise_kernel<64, true>)
          : p.head_dim == 128 ? forms(int2q::demote_pages_rowwise_kernel<128, false>,
                                      int2q::demote_pages_rowwise_kernel<128, true>)
                              : forms(int2q::demote_pages_rowwise_kernel<256, false>,
                                      int2q::demote_pages_rowwise_kernel<256, true>);
      launched = launch(rowwise_kernels, rowwise_blocks, kRowwiseThreads, page_size_log2);
    } else if (batched) {
      launched = p.head_dim == 64 ? launch(forms(int2q::demote_pages_batched_kernel<64, false>,
                                                 int2q::demote_pages_batched_kernel<64, true>),
                                           blocks(int2q::demote_batched_min_blocks<64>()), kThreads)
                 : p.head_dim == 128
                     ? launch(forms(int2q::demote_pages_batched_kernel<128, false>,
                                    int2q::demote_pages_batched_kernel<128, true>),
                              blocks(int2q::demote_batched_min_blocks<128>()), kThreads)
                     : launch(forms(int2q::demote_pages_batched_kernel<256, false>,
                                    int2q::demote_pages_batched_kernel<256, true>),
                              blocks(int2q::demote_batched_min_blocks<256>()), kThreads);
    } else {
      launched = p.head_dim == 64    ? launch(forms(demote_pages_fast_kernel<64, false>,
                                                    demote_pages_fast_kernel<64, true>),
                                              blocks(int2q::demote_min_blocks<64>()), kThreads)
                 : p.head_dim == 128 ? launch(forms(demote_pages_fast_kernel<128, false>,
                                                    demote_pages_fast_kernel<128, true>),
                                              blocks(int2q::demote_min_blocks<128>()), kThreads)
                                     : launch(forms(demote_pages_fast_kernel<256, false>,
                                                    demote_pages_fast_kernel<256, true>),
                                              blocks(int2q::demote_min_blocks<256>()), kThreads);
    }
    OSCAR_CUDA_CHECK(launched);
  }
  return Status::kOk;
}
