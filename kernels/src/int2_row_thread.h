// One thread quantizes one whole bf16 row into the INT2 row format: clip threshold from top lists
// of magnitude keys (insertion, or sorted blocks merged in), scalars and code thresholds from
// int2_thresholds.h, codes by three packed comparisons per pair of elements. Or a pair of threads
// shares a row, each with half its words (the pair's lists and ranges merged; the caller moves
// them between the two). Shared by the CUDA row-per-thread kernels and a CPU test (the same
// operations on both sides; the packed 16-bit and bf16 operations have plain C++ stand-ins on the
// host, code_sums' bf16 sums an integer count giving the same bits).
//
// Included by int2_quantize.cuh inside a namespace (and by the CPU test); it includes only
// int2_thresholds.h. On the device it needs cuda_bf16.h (included by the .cu file before).
#pragma once

#include "int2_thresholds.h"  // NOLINT(build/include)

#if defined(__CUDACC__)
#define INT2R_FN __host__ __device__ __forceinline__
#define INT2R_CONSTEXPR __host__ __device__ constexpr
#define INT2R_UNROLL _Pragma("unroll")
#else
#define INT2R_FN inline
#define INT2R_CONSTEXPR constexpr
#define INT2R_UNROLL
#endif

namespace int2r {

// The longest top list (r + 1 keys) a thread keeps; clip positions further from the top take
// another path. At d 256 the method's default value clip (0.92) is 20 positions from the top:
// lists of 32 keys keep it on this path (lists of 16 sent every such row to the warp, at a third
// of the speed). At d 128 lists of 16 reach clip 0.875 (d 64: 0.75); longer ones would cost the
// tensor-core store, at its 128-register limit, for clips the method does not use.
template <int D>
constexpr int kTopMax = D == 256 ? 32 : 16;

// Halfwise unsigned 16-bit maximum and minimum of two words.
INT2R_FN unsigned max_u16x2(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#elif defined(__CUDA_ARCH__)
  return __vmaxu2(a, b);
#else
  const unsigned low = (a & 0xffffu) > (b & 0xffffu) ? a & 0xffffu : b & 0xffffu;
  const unsigned high = (a >> 16) > (b >> 16) ? a >> 16 : b >> 16;
  return low | (high << 16);
#endif
}
INT2R_FN unsigned min_u16x2(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned d;
  asm("min.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#elif defined(__CUDA_ARCH__)
  return __vminu2(a, b);
#else
  const unsigned low = (a & 0xffffu) < (b & 0xffffu) ? a & 0xffffu : b & 0xffffu;
  const unsigned high = (a >> 16) < (b >> 16) ? a >> 16 : b >> 16;
  return low | (high << 16);
#endif
}

// The bf16 values in the low and high half of a word, as floats.
INT2R_FN float low_value(unsigned w) { return int2t::float_of(w << 16); }
INT2R_FN float high_value(unsigned w) { return int2t::float_of(w & 0xffff0000u); }

// 0xffff in each half of w whose bf16 value is >= the one in the same half of t (NaN: never).
INT2R_FN unsigned ge_mask(unsigned w, unsigned t) {
#if defined(__CUDA_ARCH__)
  return __hge2_mask(*reinterpret_cast<const __nv_bfloat162*>(&w),
                     *reinterpret_cast<const __nv_bfloat162*>(&t));
#else
  return (low_value(w) >= low_value(t) ? 0xffffu : 0u) |
         (high_value(w) >= high_value(t) ? 0xffff0000u : 0u);
#endif
}

// Bytes 0 and 2 of a, then bytes 0 and 2 of b (__byte_perm(a, b, 0x6420)).
INT2R_FN unsigned even_bytes(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, 0x6420);
#else
  return (a & 0xffu) | ((a >> 8) & 0xff00u) | ((b & 0xffu) << 16) | ((b << 8) & 0xff000000u);
#endif
}

// Per half of w, the bf16 value 128 + code, code = [x >= t1] + [x >= t2] + [x >= t3] (0..3, x
// and tj the bf16 values in that half; NaN compares false): its low byte is the code. The sums
// are exact in bf16 (128 .. 131 are consecutive bf16 values); on the device the comparisons give
// bf16 1.0 / 0.0 and the additions run on the FMA pipe, leaving the integer pipe, the quantizer's
// busiest, three comparisons a word.
INT2R_FN unsigned code_sums(unsigned w, unsigned t1, unsigned t2, unsigned t3) {
#if defined(__CUDA_ARCH__)
  using pair = __nv_bfloat162;
  const pair x = *reinterpret_cast<const pair*>(&w);
  const pair bias = __floats2bfloat162_rn(128.0f, 128.0f);
  pair sum = __hadd2(__hge2(x, *reinterpret_cast<const pair*>(&t1)), bias);
  sum = __hadd2(sum, __hge2(x, *reinterpret_cast<const pair*>(&t2)));
  sum = __hadd2(sum, __hge2(x, *reinterpret_cast<const pair*>(&t3)));
  return *reinterpret_cast<const unsigned*>(&sum);
#else
  const unsigned thresholds[3] = {t1, t2, t3};
  unsigned out = 0;
  for (int half = 0; half < 2; ++half) {
    const int shift = 16 * half;
    const float x = int2t::float_of((w >> shift) << 16);
    unsigned code = 0;
    for (const unsigned t : thresholds) code += x >= int2t::float_of((t >> shift) << 16) ? 1 : 0;
    out |= (0x4300u + code) << shift;  // bf16 128 + code
  }
  return out;
#endif
}

// NaN-propagating halfwise minimum and maximum of bf16 pairs: a NaN anywhere reaches the result.
// Which of -0 and +0 comes out is left open (row_scalars gives the same results for both).
INT2R_FN void range_update(unsigned& low, unsigned& high, unsigned w) {
#if defined(__CUDA_ARCH__)
  using pair = __nv_bfloat162;
  const pair x = *reinterpret_cast<const pair*>(&w);
  const pair l = __hmin2_nan(*reinterpret_cast<const pair*>(&low), x);
  const pair h = __hmax2_nan(*reinterpret_cast<const pair*>(&high), x);
  low = *reinterpret_cast<const unsigned*>(&l);
  high = *reinterpret_cast<const unsigned*>(&h);
#else
  const auto pick = [](unsigned a, unsigned b, bool want_min) {
    const float x = int2t::float_of(a << 16), y = int2t::float_of(b << 16);
    if (int2t::is_nan(x)) return a;
    if (int2t::is_nan(y)) return b;
    return (want_min ? y < x : y > x) ? b : a;
  };
  low = pick(low & 0xffffu, w & 0xffffu, true) | (pick(low >> 16, w >> 16, true) << 16);
  high = pick(high & 0xffffu, w & 0xffffu, false) | (pick(high >> 16, w >> 16, false) << 16);
#endif
}

// The position of the lowest set bit of x != 0.
INT2R_FN int lowest_set_bit(unsigned x) {
#if defined(__CUDA_ARCH__)
  return __ffs(static_cast<int>(x)) - 1;
#else
  return __builtin_ctz(x);
#endif
}

// Top-list lengths as a set: bit L stands for lists of L keys (L <= 32).
template <typename... Lengths>
INT2R_CONSTEXPR unsigned list_lengths(Lengths... lengths) {
  return (0u | ... | (1u << (lengths - 1)));
}

// The lengths the quantizer compiles, each a code path of its own: 1 and 3 (insertion), then
// sorted blocks merged into lists of 6, 8, 11, 16, 21 and 32 keys. 6, 11 and 21 are the method's
// default clips, keys 0.96 and values 0.92, which are r = 2 and 5 from the top at d 64, 5 and 10
// at d 128, 10 and 20 at d 256: lists just long enough for them merge a block of 8 words in
// fewer compare-exchanges (17 at 11 against 32 at 16, 42 at 21 against 80 at 32).
// OSCAR_TOP_LISTS=0 builds the previous set, powers of two, for comparisons.
#ifndef OSCAR_TOP_LISTS
#define OSCAR_TOP_LISTS 1
#endif
#if OSCAR_TOP_LISTS
constexpr unsigned kTopListLengths = list_lengths(1, 3, 6, 8, 11, 16, 21, 32);
#else
constexpr unsigned kTopListLengths = list_lengths(1, 3, 8, 16, 32);
#endif

// The top-list length used for position r from the top: the shortest length of the set that holds
// r + 1 keys, kTopMax<D> included, or 0 when r >= kTopMax<D>.
template <int D, unsigned kLengths = kTopListLengths>
INT2R_FN int top_length(int r) {
  if (r < 0 || r >= kTopMax<D>) return 0;
  // Bit i: length r + 1 + i; never 0, since kTopMax<D> is in it.
  const unsigned longer = (kLengths | 1u << (kTopMax<D> - 1)) >> r;
  return r + 1 + lowest_set_bit(longer);
}

// The two magnitude keys of a word for the clip selection, as 16-bit halves: 2 |x| in each, plus
// the low element's sign bit in the high half (w * 2 shifts it there). Doubling keeps the order
// and the extra bit only breaks ties, so an order statistic of these halved is the magnitude
// key's; the multiply runs on the FMA pipe where a mask would take the integer pipe, the
// quantizer's busiest.
INT2R_FN unsigned sort_keys(unsigned w) { return w * 2u; }

// Descending compare-exchange of packed key pairs: the larger keys to a, halfwise.
INT2R_FN void order_pair(unsigned& a, unsigned& b) {
  const unsigned high = max_u16x2(a, b);
  b = min_u16x2(a, b);
  a = high;
}

// The r-th largest (0-based, r < K) 15-bit magnitude key of a row of D bf16 values held as D / 2
// pairs, by insertion (short lists). Each word's two keys run down two descending top-K lists at
// once (the low and high halves of top[]), two packed operations per list entry; the high list is
// then inserted into the low one. The lists start at 0, the smallest key, which leaves every order
// statistic of the row's D >= K keys unchanged.
template <int D, int K>
INT2R_FN unsigned top_key(const unsigned (&w)[D / 2], int r) {
  static_assert(K >= 1 && K <= D, "top list longer than the row");
  unsigned top[K];
  INT2R_UNROLL
  for (int i = 0; i < K; ++i) top[i] = 0;
  INT2R_UNROLL
  for (int m = 0; m < D / 2; ++m) {
    unsigned x = sort_keys(w[m]);
    INT2R_UNROLL
    for (int i = 0; i < K; ++i) {
      const unsigned high = max_u16x2(top[i], x);
      x = min_u16x2(top[i], x);
      top[i] = high;
    }
  }
  unsigned merged[K];
  INT2R_UNROLL
  for (int i = 0; i < K; ++i) merged[i] = top[i] & 0xffffu;
  INT2R_UNROLL
  for (int j = 0; j < K; ++j) {
    unsigned x = top[j] >> 16;
    INT2R_UNROLL
    for (int i = 0; i < K; ++i) {
      const unsigned high = merged[i] > x ? merged[i] : x;
      x = merged[i] > x ? x : merged[i];
      merged[i] = high;
    }
  }
  unsigned key = merged[0];
  INT2R_UNROLL
  for (int i = 1; i < K; ++i) key = i == r ? merged[i] : key;
  return key >> 1;
}

// Sorts 8 packed key pairs descending, halfwise (19 compare-exchanges, Knuth's optimal network).
INT2R_FN void sort8(unsigned (&b)[8]) {
  constexpr int kPairs[19][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 4}, {1, 5}, {2, 6},
                                 {3, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}, {2, 4}, {3, 5},
                                 {1, 4}, {3, 6}, {1, 2}, {3, 4}, {5, 6}};
  INT2R_UNROLL
  for (int c = 0; c < 19; ++c) order_pair(b[kPairs[c][0]], b[kPairs[c][1]]);
}

// The smallest power of two >= n.
INT2R_CONSTEXPR int power_of_two_at_least(int n) {
  return n <= 1 ? 1 : 2 * power_of_two_at_least((n + 1) / 2);
}

// Sorts a bitonic sequence of L packed key pairs descending, halfwise: Batcher's merger on
// Lp = power_of_two_at_least(L) positions, the first Lp - L of them taken to hold keys above every
// key. Such a key never leaves its position (it is the larger side of every pair it is in), so
// the compare-exchanges at those positions are left out, and the sequence they extend (larger
// keys, then a bitonic one: descending, then ascending) is bitonic. (Lp / 2) log2(Lp) compare-
// exchanges at L = Lp; 17 at L = 11 against 32 at 16.
template <int L>
INT2R_FN void bitonic_sort(unsigned (&c)[L]) {
  constexpr int kPositions = power_of_two_at_least(L), kAbove = kPositions - L;
  INT2R_UNROLL
  for (int stride = kPositions / 2; stride > 0; stride /= 2) {
    INT2R_UNROLL
    for (int q = kAbove; q < kPositions; ++q) {
      if ((q & stride) == 0) order_pair(c[q - kAbove], c[q + stride - kAbove]);
    }
  }
}

// The r-th largest (0-based, r < L) 15-bit magnitude key, for the longer lists (L = 6 to 32): the
// row's keys go in sorted blocks of 8 words into two descending top-L lists (low and high halves),
// each block merged by the bitonic rule (the L largest of a descending list A and an ascending
// list B are max(A[i], B[i]), a bitonic sequence, sorted by Batcher's merger); the two halves'
// lists are merged the same way at the end. Per word 4.75 packed operations sort its block and
// (min(L, 8) + 2 x bitonic_sort's compare-exchanges) / 8 merge it: 7.25 at L = 6, 8.75 at 8, 10
// at 11, 13.75 at 16, 16.25 at 21 and 25.75 at 32, against 11 and 21-31 for insertion into lists
// of 6 and 11-16 keys (on an H100 the demotion at clip 0.92 took 616 us with insertion, 524 with
// blocks into lists of 16; the packed min / max run on the integer pipe, its busiest).
// top_list_blocks leaves the L largest keys of H words, sorted descending, in `merged` (both
// halves of each entry hold the list, the keys doubled as sort_keys makes them); top_key_blocks
// then picks entry r.
template <int H, int L>
INT2R_FN void top_list_blocks(const unsigned (&w)[H], unsigned (&merged)[L]) {
  static_assert(L >= 4 && L <= 32, "lists of 4 to 32 keys");
  static_assert(H % 8 == 0, "whole blocks of 8 words");
  constexpr int kMerged = L < 8 ? L : 8;  // a block's keys that can reach the list
  unsigned top[L], first[8];
  INT2R_UNROLL
  for (int i = 0; i < 8; ++i) first[i] = sort_keys(w[i]);
  sort8(first);
  INT2R_UNROLL
  for (int i = 0; i < L; ++i) top[i] = i < 8 ? first[i] : 0;  // 0 changes no order statistic
  INT2R_UNROLL
  for (int m = 8; m < H; m += 8) {
    unsigned block[8];
    INT2R_UNROLL
    for (int i = 0; i < 8; ++i) block[i] = sort_keys(w[m + i]);
    sort8(block);
    // The block's largest keys reversed (ascending) against the list's last entries; the rest of
    // the reversed block is taken as 0.
    INT2R_UNROLL
    for (int i = L - kMerged; i < L; ++i) top[i] = max_u16x2(top[i], block[L - 1 - i]);
    bitonic_sort<L>(top);
  }
  // The high halves' list reversed against the low halves' list: the low halves then hold the
  // L largest keys of the words as a bitonic sequence (the high halves the same keys reversed).
  INT2R_UNROLL
  for (int i = 0; i < L; ++i) {
    const unsigned mirror = (top[L - 1 - i] >> 16) | (top[L - 1 - i] << 16);
    merged[i] = max_u16x2(top[i], mirror);
  }
  bitonic_sort<L>(merged);
}

// Entry r of a sorted list (low halves), as a 15-bit magnitude key.
template <int L>
INT2R_FN unsigned list_entry_key(const unsigned (&list)[L], int r) {
  unsigned key = list[0] & 0xffffu;
  INT2R_UNROLL
  for (int i = 1; i < L; ++i) key = i == r ? list[i] & 0xffffu : key;
  return key >> 1;
}

template <int D, int L>
INT2R_FN unsigned top_key_blocks(const unsigned (&w)[D / 2], int r) {
  unsigned merged[L];
  top_list_blocks<D / 2, L>(w, merged);
  return list_entry_key<L>(merged, r);
}

// A pair of threads sharing a row: the r-th largest key of the row from this thread's list and its
// partner's (each the L largest keys of its half, top_list_blocks): the partner's list reversed
// against this one holds the L largest of both as a bitonic sequence, as in top_list_blocks. Both
// threads get the same key.
template <int L>
INT2R_FN unsigned pair_list_key(const unsigned (&mine)[L], const unsigned (&partner)[L], int r) {
  unsigned both[L];
  INT2R_UNROLL
  for (int i = 0; i < L; ++i) both[i] = max_u16x2(mine[i], partner[L - 1 - i]);
  bitonic_sort<L>(both);
  return list_entry_key<L>(both, r);
}

// The list length a pair of threads uses for position r: as top_length, but at least 4 keys (the
// pair form has no insertion lists).
template <int D, unsigned kLengths = kTopListLengths>
INT2R_FN int pair_top_length(int r) {
  return top_length<D, kLengths>(r < 3 ? 3 : r);
}

// Whether lists of n keys are in the set and serve rows of D elements.
template <int D, unsigned kLengths>
INT2R_CONSTEXPR bool has_length(int n) {
  return n <= kTopMax<D> && ((kLengths >> (n - 1)) & 1u) != 0;
}

// A list length as a type, for the sorted-block dispatch below.
template <int L>
struct ListLength {
  static constexpr int value = L;
};

// Calls fn(ListLength<L>{}) with the sorted-block list length L == length among those of the set
// (6 to kTopMax<D>), kTopMax<D> when none matches, and returns what fn returns: the pair form's
// dispatch (pair_top_length's lengths; the pair form has no insertion lists).
template <int D, unsigned kLengths = kTopListLengths, typename Fn>
INT2R_FN unsigned with_block_list(int length, Fn&& fn) {
  constexpr int kLongest = kTopMax<D>;
  if constexpr (has_length<D, kLengths>(6)) {
    if (length == 6) return fn(ListLength<6>{});
  }
  if constexpr (has_length<D, kLengths>(8)) {
    if (length == 8) return fn(ListLength<8>{});
  }
  if constexpr (has_length<D, kLengths>(11)) {
    if (length == 11) return fn(ListLength<11>{});
  }
  if constexpr (has_length<D, kLengths>(16) && kLongest > 16) {
    if (length == 16) return fn(ListLength<16>{});
  }
  if constexpr (has_length<D, kLengths>(21)) {
    if (length == 21) return fn(ListLength<21>{});
  }
  return fn(ListLength<kLongest>{});
}

// The clip threshold's key for position r from the top, 0 <= r < kTopMax<D> (top_length > 0),
// from the list of length top_length<D, kLengths>(r); the choice is uniform across a warp whose
// rows share a clip ratio. Lists of 1 and 3 keys take insertion, longer ones sorted blocks.
template <int D, unsigned kLengths = kTopListLengths>
INT2R_FN unsigned threshold_key(const unsigned (&w)[D / 2], int r) {
  constexpr int kLongest = kTopMax<D>;
  const int length = top_length<D, kLengths>(r);
  if constexpr (has_length<D, kLengths>(1)) {
    if (length == 1) return top_key<D, 1>(w, r);
  }
  if constexpr (has_length<D, kLengths>(3)) {
    if (length == 3) return top_key<D, 3>(w, r);
  }
  if constexpr (has_length<D, kLengths>(6)) {
    if (length == 6) return top_key_blocks<D, 6>(w, r);
  }
  if constexpr (has_length<D, kLengths>(8)) {
    if (length == 8) return top_key_blocks<D, 8>(w, r);
  }
  if constexpr (has_length<D, kLengths>(11)) {
    if (length == 11) return top_key_blocks<D, 11>(w, r);
  }
  if constexpr (has_length<D, kLengths>(16) && kLongest > 16) {  // else the last path is 16
    if (length == 16) return top_key_blocks<D, 16>(w, r);
  }
  if constexpr (has_length<D, kLengths>(21)) {
    if (length == 21) return top_key_blocks<D, 21>(w, r);
  }
  return top_key_blocks<D, kLongest>(w, r);
}

// One row quantized: the packed codes (D / 16 words; byte j of the row is byte j % 4 of word
// j / 4) and the (scale, zero) pair as one word (scale in the low half), for the clip threshold
// whose 15-bit key is `key`. Returns false, with nothing set, when the row must be quantized the
// ordinary way (a NaN, a scale outside divide_by's domain, an undecided code threshold).
//
// quantize_words does the same from the row's range (its halfwise minima and maxima, low and high,
// as range_of_words gives them) for H words laid out as a row of 2 H elements: with a pair of
// threads, each holds for every quarter f of the row the D / 16 words from element f D / 4 +
// half D / 8 on (H = D / 4), and its codes are bytes [half D / 8, (half + 1) D / 8) of the row's.
// kThresholdsAtOnce picks row_thresholds (all three levels at once) over the serial search.
template <int H>
INT2R_FN void range_of_words(const unsigned (&w)[H], unsigned& low, unsigned& high) {
  low = w[0];
  high = w[0];
  INT2R_UNROLL
  for (int m = 1; m < H; ++m) range_update(low, high, w[m]);
}

template <int H, bool kThresholdsAtOnce>
INT2R_FN bool quantize_words(const unsigned (&w)[H], unsigned low, unsigned high, unsigned key,
                             unsigned (&codes)[H / 8], unsigned& scale_zero) {
  const float xmax = int2t::max_f(high_value(high), low_value(high));
  if (int2t::is_nan(high_value(high)) || int2t::is_nan(low_value(high))) return false;
  const float xmin = int2t::min_f(low_value(low), high_value(low));
  const int2t::RowScalars rs = int2t::row_scalars(xmin, xmax, int2t::float_of(key << 16));
  if (!rs.reciprocal) return false;
  unsigned t1, t2, t3;
  if constexpr (kThresholdsAtOnce) {
    unsigned short thresholds[3];
    if (!int2t::row_thresholds(rs, thresholds)) return false;
    t1 = thresholds[0] * 0x10001u;
    t2 = thresholds[1] * 0x10001u;
    t3 = thresholds[2] * 0x10001u;
  } else {
    // A whole d 256 row a thread keeps the serial search: the d 256 tensor-core store with that
    // form (255 registers, spilling) spilled 1,112 bytes a thread instead of 1,052 with the
    // search above, and with these three calls written over an array, and measured ~10 us
    // slower either way (H100, 32768 tokens x 8 KV heads into INT2 at value clip 0.96:
    // 470.5-472.5 and 480.0-480.7 us against 457.6-460.7 and 466.2-469.6 in the same runs). The
    // pair form (half the row's words a thread) takes the search above.
    bool decided1, decided2, decided3;
    t1 = int2t::row_threshold(rs, 1, &decided1) * 0x10001u;
    t2 = int2t::row_threshold(rs, 2, &decided2) * 0x10001u;
    t3 = int2t::row_threshold(rs, 3, &decided3) * 0x10001u;
    if (!(decided1 && decided2 && decided3)) return false;
  }
  // Word j holds elements 4 j + b + f D / 4 (byte b, field f; D = 2 H): the pairs 2 j + f D / 8
  // and the next one. Per element, code = [x >= T1] + [x >= T2] + [x >= T3]: one byte permute
  // gathers the four codes of a field (the low bytes of its two words' code sums), and the fields
  // add in (disjoint bits: multiply-adds, which run on the FMA pipe).
  INT2R_UNROLL
  for (int j = 0; j < H / 8; ++j) {
    unsigned word = 0;
    INT2R_UNROLL
    for (int f = 0; f < 4; ++f) {
      const unsigned a = w[2 * j + f * (H / 4)], b = w[2 * j + f * (H / 4) + 1];
      const unsigned field = even_bytes(code_sums(a, t1, t2, t3), code_sums(b, t1, t2, t3));
      word += field * (1u << (2 * f));
    }
    codes[j] = word;
  }
  // Both are bf16 values, so their top halves are their bf16 bits.
  scale_zero = (int2t::bits_of(rs.scale) >> 16) | (int2t::bits_of(rs.zero) & 0xffff0000u);
  return true;
}

template <int D>
INT2R_FN bool quantize_row(const unsigned (&w)[D / 2], unsigned key, unsigned (&codes)[D / 16],
                           unsigned& scale_zero) {
  unsigned low, high;
  range_of_words<D / 2>(w, low, high);
  return quantize_words<D / 2, (D <= 128)>(w, low, high, key, codes, scale_zero);
}

}  // namespace int2r

#undef INT2R_FN
#undef INT2R_CONSTEXPR
#undef INT2R_UNROLL
