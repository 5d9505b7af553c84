// Fast INT2 quantization of BF16 rows (bit-identical to the plain warp quantizer) and the demotion
// kernel built on it. Included by int2_cache.cu inside its anonymous namespace, after bf16_to_float,
// float_to_bf16, round_bf16 and kFullMask; it includes nothing itself.
//
// The clip threshold is an order statistic of the row's magnitudes. Every input is a bf16 value, so
// a magnitude is a 15-bit key (float bits 30..16; bits 15..0 are zero) and keys order like the
// magnitudes. Two exact selections of the same key:
//   - top rounds (r = d - 1 - k < kTopRounds, i.e. clip ratios near 1): each lane sorts its keys,
//     and every round takes the warp maximum of the lanes' heads and pops it from the lanes holding
//     it, until the r-th largest key is reached: at most r + 1 rounds of one redux and one ballot;
//   - radix (any k): the largest T with #(key < T) <= k, decided bit by bit over the 15 key bits,
//     counting two keys per 32-bit word at once (16-bit fields, no carry between them).
// The float part (clamp, range, scale, zero, codes) performs the same operations in the same order
// as int2::quantize_group (docs/int2-format.md), with round-to-nearest intrinsics so that nothing is
// contracted into a fused multiply-add.

namespace int2q {

// Rounds of the top selection beyond which the radix selection is cheaper.
constexpr int kTopRounds = 16;

__device__ __forceinline__ int warp_max(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(kFullMask, v);
#else
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, off));
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

// Ascending position of the clip threshold, exactly as the reference computes it (float64).
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

// Sorting networks (descending) for the E = 2, 4 and 8 keys of a lane.
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

// The r-th largest key of the warp (0 <= r < 32 E). Invariant: the popped keys are the largest ones
// and the answer is the r-th largest of the rest; a round's maximum `top` is held by `count` lane
// heads, so if r < count the answer is `top`, else those count copies are the next largest keys.
template <int E>
__device__ __forceinline__ int select_top(int (&s)[E], int r) {
  sort_descending(s);
  for (;;) {
    const int top = warp_max(s[0]);
    const bool hit = s[0] == top;
    const int count = __popc(__ballot_sync(kFullMask, hit));
    if (r < count) return top;
    r -= count;
    if (hit) {
#pragma unroll
      for (int m = 0; m + 1 < E; ++m) s[m] = s[m + 1];
      s[E - 1] = -1;  // below every key: an exhausted lane never holds the maximum
    }
  }
}

// The largest key T (the r-th largest key) with at least r + 1 keys >= T. Two keys share a word as
// 16-bit fields 0x8000 + key; subtracting T (1 <= T <= 0x7fff) from both fields cannot borrow across
// them, and bit 15 of a field is then set exactly when key >= T.
template <int E>
__device__ __forceinline__ int select_radix(const int (&key)[E], int r) {
  unsigned packed[E / 2];
#pragma unroll
  for (int j = 0; j < E / 2; ++j) {
    packed[j] = static_cast<unsigned>(key[2 * j]) | (static_cast<unsigned>(key[2 * j + 1]) << 16) |
                0x80008000u;
  }
  unsigned prefix = 0;  // the threshold found so far, in both fields
#pragma unroll
  for (int bit = 14; bit >= 0; --bit) {
    const unsigned trial = prefix + (0x10001u << bit);
    unsigned at_least = 0;
#pragma unroll
    for (int j = 0; j < E / 2; ++j) at_least += __popc((packed[j] - trial) & 0x80008000u);
    if (warp_add(at_least) > static_cast<unsigned>(r)) prefix = trial;
  }
  return static_cast<int>(prefix & 0xffffu);
}

// One row quantized by a warp: lane l holds elements l + 32 m. Returns the lane's packed bytes
// (D = 64: byte l for lanes < 16; D = 128: byte l; D = 256: byte l in bits 0..7 and byte l + 32 in
// bits 8..15) and the bf16 scale and zero, the same in every lane. k is clip_position<D>(clip).
template <int D>
__device__ __forceinline__ unsigned quantize_row_codes(const float (&x)[D / 32], int k,
                                                       bf16_bits& scale_bits, bf16_bits& zero_bits) {
  constexpr int E = D / 32;
  static_assert(D == 64 || D == 128 || D == 256, "rows of 64, 128 or 256 elements");
  int key[E];
#pragma unroll
  for (int m = 0; m < E; ++m) key[m] = static_cast<int>((__float_as_uint(x[m]) >> 16) & 0x7fffu);
  // Ascending position k = d - 1 - r. A negative k (clip ratio <= 0) selects nothing, as in the
  // reference bit search: threshold +0.
  int threshold_key = 0;
  if (k >= 0) {
    const int r = D - 1 - k;
    if (r < kTopRounds) {
      int sorted[E];
#pragma unroll
      for (int m = 0; m < E; ++m) sorted[m] = key[m];
      threshold_key = select_top(sorted, r);
    } else {
      threshold_key = select_radix(key, r);
    }
  }
  const float t = __uint_as_float(static_cast<unsigned>(threshold_key) << 16);

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
  float scale = round_bf16(__fdiv_rn(__fsub_rn(hi, lo), 3.0f));
  if (!(scale > 0.0f) || isinf(scale)) scale = 1.0f;
  float zero = round_bf16(__fdiv_rn(-lo, scale));
  if (isinf(zero)) {
    scale = 1.0f;
    zero = round_bf16(-lo);
  }
  scale_bits = float_to_bf16(scale);
  zero_bits = float_to_bf16(zero);

  // Codes as exact small integers in float (0..3, possibly -0); a lane's fields are summed as
  // code0 + 4 code1 + ... (exact), and adding 2^23 puts the integer in the low mantissa bits.
  float q[E];
#pragma unroll
  for (int m = 0; m < E; ++m) {
    const float v = floorf(__fadd_rn(__fadd_rn(__fdiv_rn(c[m], scale), zero), 0.5f));
    q[m] = fminf(fmaxf(v, 0.0f), 3.0f);
  }
  auto as_int = [](float v) { return __float_as_uint(__fadd_rn(v, 8388608.0f)) & 0xffu; };
  if constexpr (D == 64) {
    // Byte j < 16 holds elements j, j + 16, j + 32, j + 48: lane j has j and j + 32 (fields 0, 2),
    // lane j + 16 has j + 16 and j + 48 (fields 1, 3).
    const unsigned half = as_int(__fmaf_rn(q[1], 16.0f, q[0]));
    return half | (__shfl_down_sync(kFullMask, half, 16) << 2);
  } else if constexpr (D == 128) {
    // Byte l holds elements l, l + 32, l + 64, l + 96: all of lane l.
    return as_int(__fmaf_rn(q[3], 64.0f, __fmaf_rn(q[2], 16.0f, __fmaf_rn(q[1], 4.0f, q[0]))));
  } else {
    // Byte l holds elements l + 64 f (m = 0, 2, 4, 6), byte l + 32 elements l + 32 + 64 f (m odd).
    const unsigned even =
        as_int(__fmaf_rn(q[6], 64.0f, __fmaf_rn(q[4], 16.0f, __fmaf_rn(q[2], 4.0f, q[0]))));
    const unsigned odd =
        as_int(__fmaf_rn(q[7], 64.0f, __fmaf_rn(q[5], 16.0f, __fmaf_rn(q[3], 4.0f, q[1]))));
    return even | (odd << 8);
  }
}

// Stores a row's packed bytes (one coalesced byte store per 32 bytes) and its (scale, zero) pair
// (lanes 0 and 1 in one instruction, 2-byte aligned like the pool).
template <int D>
__device__ __forceinline__ void store_row(unsigned bytes, bf16_bits scale_bits, bf16_bits zero_bits,
                                          std::uint8_t* packed_out, bf16_bits* scale_zero_out) {
  const int lane = threadIdx.x & 31;
  if (D != 64 || lane < 16) packed_out[lane] = static_cast<std::uint8_t>(bytes);
  if (D == 256) packed_out[lane + 32] = static_cast<std::uint8_t>(bytes >> 8);
  if (lane < 2) scale_zero_out[lane] = lane == 0 ? scale_bits : zero_bits;
}

// Demotion work: a segment is the page_size rows of one (page pair, KV head, K or V), contiguous in
// both pools; a task is `chunk` consecutive rows of a segment.
struct DemoteTask {
  const bf16_bits* src;
  std::uint8_t* codes;
  bf16_bits* scale_zero;
  float clip;
};

template <int D>
__device__ __forceinline__ DemoteTask demote_task(const DemotePagesParams& p, std::int64_t task,
                                                  int tasks_per_segment_log2, int chunk) {
  const std::int64_t segment = task >> tasks_per_segment_log2;
  const int first = static_cast<int>(task & ((1 << tasks_per_segment_log2) - 1)) * chunk;
  const bool is_key = (segment & 1) == 0;
  const std::int64_t pair_head = segment >> 1;
  const std::int64_t pair = pair_head / p.num_kv_heads;
  const int head = static_cast<int>(pair_head - pair * p.num_kv_heads);
  const std::int64_t src_page = p.page_pairs[2 * pair], dst_page = p.page_pairs[2 * pair + 1];
  const std::int64_t src_row = (src_page * p.num_kv_heads + head) * p.page_size + first;
  const std::int64_t dst_row = (dst_page * p.num_kv_heads + head) * p.page_size + first;
  return {(is_key ? p.k_bf16 : p.v_bf16) + src_row * D,
          (is_key ? p.k_codes : p.v_codes) + dst_row * (D / 4),
          (is_key ? p.k_scale_zero : p.v_scale_zero) + dst_row * 2,
          (is_key ? p.k_clip : p.v_clip)[head]};
}

template <int D>
__device__ __forceinline__ void load_row(const bf16_bits* src, bf16_bits (&raw)[D / 32]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < D / 32; ++m) raw[m] = __ldcs(src + lane + 32 * m);  // read once: stream
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
// scale_zero_out (bf16 scale, zero). Every x[m] must be a bf16 value (low 16 bits zero; NaN aside).
// Bit-identical to the generic warp quantizer; needs the whole warp.
template <int D>
__device__ void quantize_row_bf16(const float (&x)[D / 32], float clip_ratio,
                                  std::uint8_t* packed_out, bf16_bits* scale_zero_out) {
  bf16_bits scale_bits, zero_bits;
  const unsigned bytes =
      int2q::quantize_row_codes<D>(x, int2q::clip_position<D>(clip_ratio), scale_bits, zero_bits);
  int2q::store_row<D>(bytes, scale_bits, zero_bits, packed_out, scale_zero_out);
}

// Demotion: every warp walks tasks (chunks of a segment's rows) with a grid stride and loads the
// next row before quantizing the current one, so a row's load overlaps a row's arithmetic. The
// chunk shrinks from a page to one row while there are fewer tasks than warps, so that small
// demotions (one page, one head) still spread over many warps.
template <int D>
__global__ void __launch_bounds__(int2q::kDemoteWarps * 32, int2q::demote_min_blocks<D>())
    demote_pages_fast_kernel(DemotePagesParams p) {
  constexpr int E = D / 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * int2q::kDemoteWarps;
  const std::int64_t segments = static_cast<std::int64_t>(p.num_pages) * p.num_kv_heads * 2;
  int chunk = p.page_size, tasks_per_segment_log2 = 0;
  while (chunk > 1 && (segments << tasks_per_segment_log2) < warps) {
    chunk >>= 1;
    ++tasks_per_segment_log2;
  }
  const std::int64_t tasks = segments << tasks_per_segment_log2;
  std::int64_t task = static_cast<std::int64_t>(blockIdx.x) * int2q::kDemoteWarps + (threadIdx.x >> 5);
  if (task >= tasks) return;

  int2q::DemoteTask current = int2q::demote_task<D>(p, task, tasks_per_segment_log2, chunk);
  int k = int2q::clip_position<D>(current.clip);
  bf16_bits next[E];
  int2q::load_row<D>(current.src, next);
  for (int row = 0;;) {
    float x[E];
#pragma unroll
    for (int m = 0; m < E; ++m) x[m] = bf16_to_float(next[m]);
    // Prefetch the following row: the next of this task or the first of the warp's next task.
    int2q::DemoteTask following = current;
    const bool same_task = row + 1 < chunk;
    bool more = true;
    if (same_task) {
      int2q::load_row<D>(current.src + (row + 1) * D, next);
    } else {
      task += warps;
      more = task < tasks;
      if (more) {
        following = int2q::demote_task<D>(p, task, tasks_per_segment_log2, chunk);
        int2q::load_row<D>(following.src, next);
      }
    }
    bf16_bits scale_bits, zero_bits;
    const unsigned bytes = int2q::quantize_row_codes<D>(x, k, scale_bits, zero_bits);
    int2q::store_row<D>(bytes, scale_bits, zero_bits, current.codes + row * (D / 4),
                        current.scale_zero + 2 * row);
    if (same_task) {
      ++row;
    } else {
      if (!more) break;
      current = following;
      k = int2q::clip_position<D>(current.clip);
      row = 0;
    }
  }
}

// Launches the demotion of p (already validated by demote_pages): one warp per row at most, up to
// the blocks that fit on the device at once.
inline Status launch_demote_pages_fast(const DemotePagesParams& p) {
  const std::int64_t rows =
      static_cast<std::int64_t>(p.num_pages) * p.num_kv_heads * 2 * p.page_size;
  if (rows <= 0) return Status::kOk;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      sms < 1) {
    cudaGetLastError();
    sms = 132;
  }
  auto blocks = [&](int min_blocks) {
    const std::int64_t wanted = (rows + int2q::kDemoteWarps - 1) / int2q::kDemoteWarps;
    return static_cast<unsigned>(std::min<std::int64_t>(wanted, std::int64_t{sms} * min_blocks));
  };
  constexpr unsigned kThreads = int2q::kDemoteWarps * 32;
  switch (p.head_dim) {
    case 64:
      demote_pages_fast_kernel<64>
          <<<blocks(int2q::demote_min_blocks<64>()), kThreads, 0, p.stream>>>(p);
      break;
    case 128:
      demote_pages_fast_kernel<128>
          <<<blocks(int2q::demote_min_blocks<128>()), kThreads, 0, p.stream>>>(p);
      break;
    default:
      demote_pages_fast_kernel<256>
          <<<blocks(int2q::demote_min_blocks<256>()), kThreads, 0, p.stream>>>(p);
      break;
  }
  OSCAR_CUDA_CHECK(cudaGetLastError());
  return Status::kOk;
}
