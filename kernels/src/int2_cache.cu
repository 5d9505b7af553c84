// CUDA kernels of the paged mixed-precision KV cache: store (rotate, quantize, pack), demotion and
// split-KV decode attention with a log-sum-exp merge.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "oscar/kernels/cuda_check.h"
#include "oscar/kernels/int2_cache.h"

namespace oscar::kernels {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float bf16_to_float(bf16_bits x) {
  return __bfloat162float(__ushort_as_bfloat16(x));
}
__device__ __forceinline__ bf16_bits float_to_bf16(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

// ---------------------------------------------------------------------------------------------
// INT2 quantization of one row held by a warp: lane l owns elements l + 32 m, m < E. The same
// float32 operations in the same order as int2::quantize_group (docs/int2-format.md), written with
// round-to-nearest intrinsics so that nvcc cannot contract them into fused multiply-adds.
template <int E>
__device__ void quantize_row_warp(const float (&x)[E], int d, float clip_ratio,
                                  std::uint8_t* codes_smem, std::uint8_t* packed_out,
                                  bf16_bits* scale_zero_out) {
  const int lane = threadIdx.x & 31;
  // Clip threshold: the magnitude at ascending position k, by a radix select on the float bits
  // (non-negative floats order as their bit patterns).
  const double position = floor(static_cast<double>(clip_ratio) * static_cast<double>(d));
  int k = position >= static_cast<double>(d - 1) ? d - 1 : static_cast<int>(position);
  unsigned bits[E];
#pragma unroll
  for (int m = 0; m < E; ++m) bits[m] = __float_as_uint(x[m]) & 0x7fffffffu;
  unsigned prefix = 0;
  for (int bit = 30; bit >= 0; --bit) {
    const unsigned high_mask = ~((2u << bit) - 1u);
    int count = 0;
#pragma unroll
    for (int m = 0; m < E; ++m) {
      count += ((bits[m] & high_mask) == prefix && ((bits[m] >> bit) & 1u) == 0u) ? 1 : 0;
    }
    count = warp_sum(count);
    if (k >= count) {
      prefix |= 1u << bit;
      k -= count;
    }
  }
  const float t = __uint_as_float(prefix);
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
#pragma unroll
  for (int m = 0; m < E; ++m) {
    const float q = floorf(__fadd_rn(__fadd_rn(__fdiv_rn(c[m], scale), zero), 0.5f));
    codes_smem[lane + 32 * m] = static_cast<std::uint8_t>(fminf(fmaxf(q, 0.0f), 3.0f));
  }
  __syncwarp();
  const int quarter = d / 4;
  for (int j = lane; j < quarter; j += 32) {
    packed_out[j] = static_cast<std::uint8_t>(codes_smem[j] | (codes_smem[j + quarter] << 2) |
                                              (codes_smem[j + 2 * quarter] << 4) |
                                              (codes_smem[j + 3 * quarter] << 6));
  }
  if (lane == 0) {
    scale_zero_out[0] = float_to_bf16(scale);
    scale_zero_out[1] = float_to_bf16(zero);
  }
  __syncwarp();
}

// ---------------------------------------------------------------------------------------------
// store_kv: block (token, KV head), warp 0 keys, warp 1 values.
template <int D>
__global__ void store_kv_kernel(StoreKvParams p) {
  constexpr int E = D / 32;
  __shared__ float row[2][D];
  __shared__ std::uint8_t codes[2][D];
  const int token = blockIdx.x, head = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool is_key = warp == 0;
  const int hkv = p.num_kv_heads;
  const bf16_bits* src = (is_key ? p.k : p.v) + (static_cast<std::int64_t>(token) * hkv + head) * D;
  const float* mean = is_key ? p.k_mean : p.v_mean;
  const float* smooth = is_key ? p.k_smooth : nullptr;
  for (int e = lane; e < D; e += 32) {
    float x = bf16_to_float(src[e]);
    if (mean != nullptr) x = __fsub_rn(x, mean[head * D + e]);
    if (smooth != nullptr) x = __fdiv_rn(x, smooth[head * D + e]);
    row[warp][e] = x;
  }
  __syncwarp();
  const float* rot =
      (is_key ? p.k_rotation : p.v_rotation) + static_cast<std::int64_t>(head) * D * D;
  float rotated[E];
#pragma unroll
  for (int m = 0; m < E; ++m) {
    const int j = lane + 32 * m;
    float acc = 0.0f;
    for (int i = 0; i < D; ++i) acc = fmaf(row[warp][i], rot[i * D + j], acc);
    rotated[m] = round_bf16(acc);
  }
  const std::int64_t bslot = p.bf16_slot != nullptr ? p.bf16_slot[token] : -1;
  if (bslot >= 0) {
    const std::int64_t page = bslot / p.page_size, offset = bslot % p.page_size;
    bf16_bits* dst = (is_key ? p.k_bf16 : p.v_bf16) +
                     ((page * hkv + head) * p.page_size + offset) * static_cast<std::int64_t>(D);
#pragma unroll
    for (int m = 0; m < E; ++m) dst[lane + 32 * m] = float_to_bf16(rotated[m]);
  }
  const std::int64_t islot = p.int2_slot != nullptr ? p.int2_slot[token] : -1;
  if (islot >= 0) {
    const std::int64_t page = islot / p.page_size, offset = islot % p.page_size;
    const std::int64_t row_index = (page * hkv + head) * p.page_size + offset;
    quantize_row_warp<E>(rotated, D, (is_key ? p.k_clip : p.v_clip)[head], codes[warp],
                         (is_key ? p.k_codes : p.v_codes) + row_index * (D / 4),
                         (is_key ? p.k_scale_zero : p.v_scale_zero) + row_index * 2);
  }
}

// demote_pages: block (page pair, KV head); 8 warps walk the page's K rows then its V rows.
template <int D>
__global__ void demote_pages_kernel(DemotePagesParams p) {
  constexpr int E = D / 32;
  constexpr int kWarps = 8;
  __shared__ std::uint8_t codes[kWarps][D];
  const int pair = blockIdx.x, head = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::int64_t src_page = p.page_pairs[2 * pair], dst_page = p.page_pairs[2 * pair + 1];
  const int hkv = p.num_kv_heads, ps = p.page_size;
  for (int r = warp; r < 2 * ps; r += kWarps) {
    const bool is_key = r < ps;
    const int offset = is_key ? r : r - ps;
    const bf16_bits* src = (is_key ? p.k_bf16 : p.v_bf16) +
                           ((src_page * hkv + head) * ps + offset) * static_cast<std::int64_t>(D);
    float x[E];
#pragma unroll
    for (int m = 0; m < E; ++m) x[m] = bf16_to_float(src[lane + 32 * m]);
    const std::int64_t row_index = (dst_page * hkv + head) * ps + offset;
    quantize_row_warp<E>(x, D, (is_key ? p.k_clip : p.v_clip)[head], codes[warp],
                         (is_key ? p.k_codes : p.v_codes) + row_index * (D / 4),
                         (is_key ? p.k_scale_zero : p.v_scale_zero) + row_index * 2);
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

template <int D, int G, int P>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    decode_kernel(DecodeParams p, float* part_o, SplitPartial* part_ml, int num_splits) {
  using Map = RowMap<D>;
  constexpr int L = Map::kLanesPerRow, R = Map::kRowsPerStep;
  static_assert(P % R == 0, "page size must be a multiple of the rows a warp reads per step");
  const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = lane % L, row_in_step = lane / L;
  const int hkv = p.num_kv_heads;

  const int sink_len = p.sink_len[b], int2_len = p.int2_len[b], recent_len = p.recent_len[b];
  const int sink_pages = (sink_len + P - 1) / P, int2_pages = (int2_len + P - 1) / P,
            recent_pages = (recent_len + P - 1) / P;
  const int total_pages = sink_pages + int2_pages + recent_pages;
  const int per_split = (total_pages + num_splits - 1) / num_splits;
  const int page_begin = split * per_split;
  const int page_end = min(total_pages, page_begin + per_split);

  // Queries of the group (G heads), the lane's 16 elements each, and their full sums.
  float q[G][16];
  float q_sum[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const bf16_bits* qh = p.q + (static_cast<std::int64_t>(b) * p.num_q_heads + kvh * G + g) * D;
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

  float m_run[G], l_run[G], acc[G][16], acc_zero[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.0f;
    acc_zero[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[g][j] = 0.0f;
  }
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f;  // exp(x) = exp2(x log2 e)

  for (int vp = page_begin + warp; vp < page_end; vp += kDecodeWarps) {
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
      process_page<D, G, P, true>(p, row0, valid, r, row_in_step, q, q_sum, scale_log2, m_run,
                                  l_run, acc, acc_zero);
    } else {
      process_page<D, G, P, false>(p, row0, valid, r, row_in_step, q, q_sum, scale_log2, m_run,
                                   l_run, acc, acc_zero);
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[g][j] -= acc_zero[g];
  }

  // Combine the rows of the warp (lanes with the same r hold the same elements).
#pragma unroll
  for (int g = 0; g < G; ++g) {
    for (int off = L; off < 32; off <<= 1) {
      l_run[g] += __shfl_xor_sync(kFullMask, l_run[g], off);
#pragma unroll
      for (int j = 0; j < 16; ++j) acc[g][j] += __shfl_xor_sync(kFullMask, acc[g][j], off);
    }
  }
  // Combine the warps of the block through shared memory.
  __shared__ float sm_m[kDecodeWarps][G], sm_l[kDecodeWarps][G];
  __shared__ float sm_o[kDecodeWarps][G][D];
  if (lane < L) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int f = 0; f < 4; ++f) sm_o[warp][g][Map::element(r, i, f)] = acc[g][i * 4 + f];
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      sm_m[warp][g] = m_run[g];
      sm_l[warp][g] = l_run[g];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    const int g = idx / D, e = idx % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) m = fmaxf(m, sm_m[w][g]);
    float o = 0.0f, l = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float f = sm_m[w][g] == -INFINITY ? 0.0f : exp2f(sm_m[w][g] - m);
      o += f * sm_o[w][g][e];
      l += f * sm_l[w][g];
    }
    const std::int64_t head = static_cast<std::int64_t>(b) * p.num_q_heads + kvh * G + g;
    part_o[(head * num_splits + split) * D + e] = o;
    if (e == 0) part_ml[head * num_splits + split] = {m, l};
  }
}

// Log-sum-exp merge of the splits: block per (sequence, q head), one thread per element.
__global__ void merge_splits_kernel(const float* part_o, const SplitPartial* part_ml,
                                    int num_splits, int d, bf16_bits* out) {
  const std::int64_t head = blockIdx.x;
  const int e = threadIdx.x;
  float m = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, part_ml[head * num_splits + s].m);
  float o = 0.0f, l = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const SplitPartial ml = part_ml[head * num_splits + s];
    if (ml.m == -INFINITY) continue;
    const float f = exp2f(ml.m - m);
    l += f * ml.l;
    o += f * part_o[(head * num_splits + s) * d + e];
  }
  out[head * d + e] = float_to_bf16(l > 0.0f ? o / l : 0.0f);
}

int device_multiprocessors() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 132;
  }
  return sms;
}

bool supported_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

template <int D, int G, int P>
void launch_decode(const DecodeParams& p, int splits, float* part_o, SplitPartial* part_ml) {
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(p.batch));
  decode_kernel<D, G, P><<<grid, kDecodeWarps * 32, 0, p.stream>>>(p, part_o, part_ml, splits);
}

template <int D, int P>
bool dispatch_group(const DecodeParams& p, int splits, float* o, SplitPartial* ml) {
  switch (p.num_q_heads / p.num_kv_heads) {
    case 1:
      launch_decode<D, 1, P>(p, splits, o, ml);
      return true;
    case 2:
      launch_decode<D, 2, P>(p, splits, o, ml);
      return true;
    case 4:
      launch_decode<D, 4, P>(p, splits, o, ml);
      return true;
    case 8:
      launch_decode<D, 8, P>(p, splits, o, ml);
      return true;
    default:
      return false;
  }
}

template <int P>
bool dispatch_dim(const DecodeParams& p, int splits, float* o, SplitPartial* ml) {
  switch (p.head_dim) {
    case 64:
      return dispatch_group<64, P>(p, splits, o, ml);
    case 128:
      return dispatch_group<128, P>(p, splits, o, ml);
    case 256:
      return dispatch_group<256, P>(p, splits, o, ml);
    default:
      return false;
  }
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

Status store_kv(const StoreKvParams& p) {
  if (p.num_tokens < 0 || p.num_kv_heads < 1 || !supported_head_dim(p.head_dim) ||
      (p.page_size != 8 && p.page_size != 16) || p.k == nullptr || p.v == nullptr ||
      p.k_rotation == nullptr || p.v_rotation == nullptr) {
    set_last_error("store_kv: bad shape or missing input (head_dim %d, page_size %d, %d KV heads)",
                   p.head_dim, p.page_size, p.num_kv_heads);
    return Status::kInvalidArgument;
  }
  if ((p.bf16_slot != nullptr && (p.k_bf16 == nullptr || p.v_bf16 == nullptr)) ||
      (p.int2_slot != nullptr &&
       (p.k_codes == nullptr || p.v_codes == nullptr || p.k_scale_zero == nullptr ||
        p.v_scale_zero == nullptr || p.k_clip == nullptr || p.v_clip == nullptr))) {
    set_last_error("store_kv: a slot mapping is given without the pool it writes to");
    return Status::kInvalidArgument;
  }
  if (p.num_tokens == 0) return Status::kOk;
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_kv_heads));
  switch (p.head_dim) {
    case 64:
      store_kv_kernel<64><<<grid, 64, 0, p.stream>>>(p);
      break;
    case 128:
      store_kv_kernel<128><<<grid, 64, 0, p.stream>>>(p);
      break;
    default:
      store_kv_kernel<256><<<grid, 64, 0, p.stream>>>(p);
      break;
  }
  OSCAR_CUDA_CHECK(cudaGetLastError());
  return Status::kOk;
}

Status demote_pages(const DemotePagesParams& p) {
  if (p.num_pages < 0 || p.num_kv_heads < 1 || !supported_head_dim(p.head_dim) ||
      (p.page_size != 8 && p.page_size != 16) || p.page_pairs == nullptr || p.k_bf16 == nullptr ||
      p.v_bf16 == nullptr || p.k_codes == nullptr || p.v_codes == nullptr ||
      p.k_scale_zero == nullptr || p.v_scale_zero == nullptr || p.k_clip == nullptr ||
      p.v_clip == nullptr) {
    set_last_error("demote_pages: bad shape or missing buffer (head_dim %d, page_size %d)",
                   p.head_dim, p.page_size);
    return Status::kInvalidArgument;
  }
  if (p.num_pages == 0) return Status::kOk;
  const dim3 grid(static_cast<unsigned>(p.num_pages), static_cast<unsigned>(p.num_kv_heads));
  switch (p.head_dim) {
    case 64:
      demote_pages_kernel<64><<<grid, 256, 0, p.stream>>>(p);
      break;
    case 128:
      demote_pages_kernel<128><<<grid, 256, 0, p.stream>>>(p);
      break;
    default:
      demote_pages_kernel<256><<<grid, 256, 0, p.stream>>>(p);
      break;
  }
  OSCAR_CUDA_CHECK(cudaGetLastError());
  return Status::kOk;
}

int decode_num_splits(const DecodeParams& p) {
  if (p.num_splits > 0) return p.num_splits;
  // Enough blocks for about four per multiprocessor, but at least two pages per warp of a block.
  const long long blocks = static_cast<long long>(p.batch) * p.num_kv_heads;
  const long long wanted = (4LL * device_multiprocessors() + blocks - 1) / std::max(blocks, 1LL);
  const long long by_pages =
      std::max(1LL, static_cast<long long>(p.max_pages_per_sequence) / (2 * kDecodeWarps));
  return static_cast<int>(std::max(1LL, std::min(wanted, by_pages)));
}

std::size_t decode_workspace_bytes(const DecodeParams& p) {
  const std::size_t heads =
      static_cast<std::size_t>(p.batch) * static_cast<std::size_t>(p.num_q_heads);
  const std::size_t splits = static_cast<std::size_t>(decode_num_splits(p));
  return heads * splits *
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
  const int splits = decode_num_splits(p);
  const std::size_t need = decode_workspace_bytes(p);
  if (p.workspace == nullptr || p.workspace_bytes < need || !is_device_pointer(p.workspace)) {
    set_last_error("decode_attention: workspace of %zu bytes on the device needed, got %zu", need,
                   p.workspace_bytes);
    return Status::kInvalidArgument;
  }
  const std::size_t heads =
      static_cast<std::size_t>(p.batch) * static_cast<std::size_t>(p.num_q_heads);
  float* part_o = static_cast<float*>(p.workspace);
  auto* part_ml = reinterpret_cast<SplitPartial*>(part_o + heads * splits * p.head_dim);
  const bool launched = p.page_size == 8 ? dispatch_dim<8>(p, splits, part_o, part_ml)
                                         : dispatch_dim<16>(p, splits, part_o, part_ml);
  if (!launched) {
    set_last_error("decode_attention: no kernel for this shape");
    return Status::kUnsupported;
  }
  OSCAR_CUDA_CHECK(cudaGetLastError());
  merge_splits_kernel<<<static_cast<unsigned>(heads), static_cast<unsigned>(p.head_dim), 0,
                        p.stream>>>(part_o, part_ml, splits, p.head_dim, p.out);
  OSCAR_CUDA_CHECK(cudaGetLastError());
  return Status::kOk;
}

}  // namespace oscar::kernels
