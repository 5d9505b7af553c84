// The threshold form of the INT2 quantizer of bf16 rows (kernels/src/int2_thresholds.h, used by the
// CUDA demotion kernels) and the row-per-thread quantizer built on it
// (kernels/src/int2_row_thread.h) against the reference int2::quantize_group, on the CPU; and the
// operand split of the tensor-core store, emulated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "int2_row_thread.h"
#include "int2_thresholds.h"
#include "oscar/int2.h"
#include "oscar/int2_cache_reference.h"

namespace {

using oscar::int2::ScaleDType;

float bf16(float v) { return int2t::round_bf16(v); }
float from_bits16(unsigned short b) { return int2t::float_of(static_cast<unsigned>(b) << 16); }

// The reference code of an element, with a true division (the format's definition).
int reference_code(float x, float t, float scale, float zero) {
  const float c = std::min(std::max(x, -t), t);
  const float q = std::floor(c / scale + zero + 0.5f);
  return static_cast<int>(std::min(std::max(q, 0.0f), 3.0f));
}

struct Tally {
  std::int64_t rows = 0, not_reciprocal = 0, wide = 0, undecided = 0, searched = 0;
};

// Quantizes one row both ways; returns false (with a gtest failure) on any difference.
bool check_row(const std::vector<float>& x, double ratio, Tally& tally) {
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<std::uint8_t> codes(x.size());
  const auto ref = oscar::int2::quantize_group(x.data(), n, ratio, ScaleDType::kBF16, codes.data());
  const float t = oscar::int2::clip_threshold(x.data(), n, ratio);
  const auto [mn, mx] = std::minmax_element(x.begin(), x.end());
  const int2t::RowScalars rs = int2t::row_scalars(*mn, *mx, t);
  ++tally.rows;
  // The scale never depends on the path (the kernel stores it either way).
  EXPECT_EQ(int2t::bits_of(rs.scale), int2t::bits_of(ref.scale));
  if (!rs.reciprocal) {
    // Only rows with a scale below 2^-90 (tiny or subnormal values) or a range far from 0 relative
    // to its width leave the domain.
    EXPECT_TRUE(rs.scale < 0x1p-90f ||
                std::max(std::fabs(rs.lo), std::fabs(rs.hi)) > 1024.0f * rs.scale)
        << "scale " << rs.scale;
    ++tally.not_reciprocal;
    if (rs.scale >= 0x1p-90f) ++tally.wide;
    return true;
  }
  EXPECT_EQ(int2t::bits_of(rs.zero), int2t::bits_of(ref.zero));
  float level[3];
  bool decided[3];
  for (int j = 1; j <= 3; ++j) {
    level[j - 1] = from_bits16(int2t::row_threshold(rs, j, &decided[j - 1]));
  }
  // All three at once (the row-per-thread quantizer's form): the same thresholds, decided in the
  // same cases.
  unsigned short at_once[3];
  int searched = 0;
  const bool decided_at_once = int2t::row_thresholds(rs, at_once, &searched);
  tally.searched += searched;
  EXPECT_EQ(decided_at_once, decided[0] && decided[1] && decided[2]);
  for (int j = 0; j < 3; ++j) {
    if (!decided[j]) {
      ++tally.undecided;
      return true;
    }
    if (int2t::bits_of(level[j]) != static_cast<unsigned>(at_once[j]) << 16) {
      ADD_FAILURE() << "T" << j + 1 << " " << level[j] << ", all three at once "
                    << from_bits16(at_once[j]);
      return false;
    }
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int code = (x[i] >= level[0]) + (x[i] >= level[1]) + (x[i] >= level[2]);
    if (code != codes[i]) {
      ADD_FAILURE() << "element " << i << " = " << x[i] << ": code " << code << ", reference "
                    << int(codes[i]) << " (scale " << ref.scale << ", zero " << ref.zero << ", t "
                    << t << ", thresholds " << level[0] << " " << level[1] << " " << level[2]
                    << ")";
      return false;
    }
  }
  // The threshold property itself, with a true division, at and around each finite threshold and
  // at the row's range ends: code >= j exactly when x >= Tj.
  for (int j = 1; j <= 3; ++j) {
    const float tj = level[j - 1];
    std::vector<float> probes = {rs.lo, rs.hi, int2t::bf16_above(rs.lo)};
    if (std::isfinite(tj)) {
      float v = tj;
      for (int s = 0; s < 3 && v > rs.lo; ++s) probes.push_back(v = int2t::bf16_below(v));
      probes.push_back(tj);
      if (tj < rs.hi) probes.push_back(int2t::bf16_above(tj));
    }
    for (const float p : probes) {
      if (p < rs.lo || p > rs.hi) continue;
      const bool ge = reference_code(p, t, ref.scale, ref.zero) >= j;
      if (ge != (p >= tj)) {
        ADD_FAILURE() << "threshold " << j << " = " << tj << " misplaced at " << p;
        return false;
      }
    }
  }
  return true;
}

// Row generators: every value is a bf16 value.
enum class Kind {
  kGaussian,
  kHeavyTail,
  kOutliers,
  kShifted,  // all positive or all negative, far from 0: large |zero|
  kTies,     // few distinct values on a small grid
  kZeros,    // many zeros of both signs
  kConstant,
  kCount
};

std::vector<float> make_row(Kind kind, int d, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  // Magnitudes from subnormal to near the top of the bf16 range.
  const int exponents[] = {0, 0, 0, -3, 5, -40, 40, -100, -120, -128, -135, 100, 120, 125};
  const int e = exponents[rng() % (sizeof exponents / sizeof exponents[0])];
  std::vector<float> x(static_cast<std::size_t>(d));
  const float shift = (rng() & 1 ? 1.0f : -1.0f) * std::ldexp(1.0f, static_cast<int>(rng() % 9));
  const float constant = normal(rng);
  for (int i = 0; i < d; ++i) {
    float v = 0.0f;
    switch (kind) {
      case Kind::kGaussian:
        v = normal(rng);
        break;
      case Kind::kHeavyTail:
        v = normal(rng) / std::max(std::pow(uniform(rng), 1.5f), 1e-3f);
        break;
      case Kind::kOutliers:
        v = normal(rng) * (rng() % 23 == 0 ? 40.0f : 1.0f);
        break;
      case Kind::kShifted:
        v = shift * (1.0f + 0.05f * normal(rng));
        break;
      case Kind::kTies:
        v = static_cast<float>(static_cast<int>(rng() % 7) - 3) * 0.25f;
        break;
      case Kind::kZeros:
        v = rng() % 3 == 0 ? normal(rng) : (rng() & 1 ? -0.0f : 0.0f);
        break;
      default:
        v = rng() % 8 == 0 ? constant * 1.5f : constant;
        break;
    }
    v = bf16(std::ldexp(v, e));
    x[static_cast<std::size_t>(i)] = std::isfinite(v) ? v : bf16(std::copysign(3.0e38f, v));
  }
  return x;
}

TEST(Int2Thresholds, NeighboursAndEncodings) {
  EXPECT_EQ(int2t::bits_of(int2t::bf16_above(0.0f)), 0x00010000u);
  EXPECT_EQ(int2t::bits_of(int2t::bf16_above(-0.0f)), 0x00010000u);
  EXPECT_EQ(int2t::bits_of(int2t::bf16_below(0.0f)), 0x80010000u);
  EXPECT_EQ(int2t::bf16_below(int2t::float_of(0x80010000u)), int2t::float_of(0x80020000u));
  EXPECT_EQ(int2t::bf16_above(int2t::float_of(0x80010000u)), 0.0f);
  EXPECT_EQ(int2t::bf16_above(1.0f), 1.0078125f);
  EXPECT_EQ(int2t::bf16_below(1.0f), 0.99609375f);
  EXPECT_EQ(int2t::bf16_below(-1.0f), -1.0078125f);
  // Every finite and infinite element is >= the all-elements threshold, none >= the other.
  const float all = from_bits16(int2t::kAllElements), none = from_bits16(int2t::kNoElement);
  for (const float v : {-INFINITY, -3.0f, -0.0f, 0.0f, 1e-40f, 3e38f, INFINITY}) {
    EXPECT_TRUE(v >= all);
    EXPECT_FALSE(v >= none);
  }
}

TEST(Int2Thresholds, RowScalarsMatchTheReferenceOnEdgeRows) {
  Tally tally;
  const std::vector<std::vector<float>> rows = {
      {0.0f, 0.0f, 0.0f, 0.0f},
      {-0.0f, 0.0f, -0.0f, 0.0f},
      {-0.0f, -0.0f, -0.0f, -0.0f},
      {0.5f, 0.5f, 0.5f, 0.5f},
      {0.1f, 0.1f, 0.1f, 0.1f},
      {-1.0f, 0.0f, 1.0f, 0.5f},
      {0.0f, 1.0f, 2.0f, 3.0f},
      {std::ldexp(1.0f, -133), 0.0f, -std::ldexp(1.0f, -133), std::ldexp(3.0f, -133)},
      {3.0e38f, -3.0e38f, 1.0f, 0.0f},
      {1e38f, 1.1e38f, 1.2e38f, 1.3e38f},
      {64.0f, 0.25f, -0.25f, 0.25f},
      {10000.0f, 10048.0f, 10000.0f, 10048.0f},
  };
  for (const auto& row : rows) {
    std::vector<float> x(row.size());
    std::transform(row.begin(), row.end(), x.begin(), bf16);
    for (const double ratio : {1.0, 0.75, 0.5}) ASSERT_TRUE(check_row(x, ratio, tally));
  }
}

// Millions of random rows of every kind, size and clip ratio; then the same rows with elements
// moved onto their thresholds and just below them (ties at every code boundary).
TEST(Int2Thresholds, ThresholdCodesMatchTheReference) {
  std::mt19937 rng(20240611u);
  const int sizes[] = {64, 128, 256};
  const double ratios[] = {1.0, 0.96, 0.92, 0.8, 0.5};
  Tally by_kind[static_cast<int>(Kind::kCount)];
  constexpr int kRowsPerCase = 8000;
  for (int kind = 0; kind < static_cast<int>(Kind::kCount); ++kind) {
    for (const int d : sizes) {
      for (const double ratio : ratios) {
        for (int r = 0; r < kRowsPerCase * 128 / d; ++r) {
          std::vector<float> x = make_row(static_cast<Kind>(kind), d, rng);
          ASSERT_TRUE(check_row(x, ratio, by_kind[kind])) << "kind " << kind << " d " << d;
          if (r % 4 != 0) continue;
          // Ties: put a few elements on a threshold or just below it.
          const float t = oscar::int2::clip_threshold(x.data(), d, ratio);
          const auto [mn, mx] = std::minmax_element(x.begin(), x.end());
          const int2t::RowScalars rs = int2t::row_scalars(*mn, *mx, t);
          if (!rs.reciprocal) continue;
          for (int j = 1; j <= 3; ++j) {
            bool decided = false;
            const float tj = from_bits16(int2t::row_threshold(rs, j, &decided));
            if (!decided || !std::isfinite(tj)) continue;
            x[rng() % d] = tj;
            if (tj > rs.lo) x[rng() % d] = int2t::bf16_below(tj);
          }
          ASSERT_TRUE(check_row(x, ratio, by_kind[kind])) << "ties, kind " << kind << " d " << d;
        }
      }
    }
  }
  for (int kind = 0; kind < static_cast<int>(Kind::kCount); ++kind) {
    const Tally& t = by_kind[kind];
    std::printf(
        "kind %d: %lld rows, %lld outside the reciprocal domain (%lld with scale >= 2^-90), %lld "
        "undecided, %lld thresholds past the first candidates\n",
        kind, static_cast<long long>(t.rows), static_cast<long long>(t.not_reciprocal),
        static_cast<long long>(t.wide), static_cast<long long>(t.undecided),
        static_cast<long long>(t.searched));
    // The search gives up rarely: rows that take the slow path cost the kernel a reload.
    EXPECT_LE(t.undecided * 1000, t.rows) << "kind " << kind;
  }
}

// The row as the kernels hold it: bf16 pairs, element 2 m in the low half of word m.
template <int D>
void to_words(const std::vector<float>& x, unsigned (&w)[D / 2]) {
  for (int m = 0; m < D / 2; ++m) {
    w[m] = (int2t::bits_of(x[2 * m]) >> 16) | (int2t::bits_of(x[2 * m + 1]) & 0xffff0000u);
  }
}

struct ThreadTally {
  std::int64_t rows = 0, exact_path = 0;
};

// The pair form (int2q::store_row_pair on the GPU): a row's words split between two threads, for
// every quarter f of the row the D / 16 words from element f D / 4 + half D / 8 on.
template <int D>
void split_for_pair(const unsigned (&w)[D / 2], unsigned (&halves)[2][D / 4]) {
  for (int half = 0; half < 2; ++half) {
    for (int f = 0; f < 4; ++f) {
      for (int i = 0; i < D / 16; ++i) {
        halves[half][f * (D / 16) + i] = w[f * (D / 8) + half * (D / 16) + i];
      }
    }
  }
}

// The clip key as thread `half` of a pair computes it: its own list of L keys, its partner's list
// (moved by a shuffle on the GPU).
template <int H, int L>
unsigned pair_key_of_length(const unsigned (&halves)[2][H], int r, int half) {
  unsigned lists[2][L];
  int2r::top_list_blocks<H, L>(halves[0], lists[0]);
  int2r::top_list_blocks<H, L>(halves[1], lists[1]);
  return int2r::pair_list_key<L>(lists[half], lists[1 - half], r);
}

template <int D>
unsigned pair_key(const unsigned (&halves)[2][D / 4], int r, int half) {
  return int2r::with_block_list<D>(int2r::pair_top_length<D>(r), [&](auto list) {
    return pair_key_of_length<D / 4, decltype(list)::value>(halves, r, half);
  });
}

// Both threads of a pair against the thread form's result for the same row: the same clip key,
// the same decision, and together the same codes and (scale, zero).
template <int D>
bool check_pair_row(const unsigned (&w)[D / 2], int r, unsigned key, bool served,
                    const unsigned (&codes)[D / 16], unsigned scale_zero) {
  unsigned halves[2][D / 4];
  split_for_pair<D>(w, halves);
  unsigned low[2], high[2];
  for (int half = 0; half < 2; ++half)
    int2r::range_of_words<D / 4>(halves[half], low[half], high[half]);
  for (int half = 0; half < 2; ++half) {
    const unsigned half_key = pair_key<D>(halves, r, half);
    if (half_key != key) {
      ADD_FAILURE() << "pair half " << half << ": clip key " << half_key << ", thread form " << key;
      return false;
    }
    unsigned lo = low[half], hi = high[half];
    int2r::range_update(lo, hi, low[1 - half]);
    int2r::range_update(lo, hi, high[1 - half]);
    unsigned half_codes[D / 32], half_scale_zero = 0;
    const bool half_served =
        int2r::quantize_words<D / 4, true>(halves[half], lo, hi, key, half_codes, half_scale_zero);
    if (half_served != served) {
      ADD_FAILURE() << "pair half " << half << ": served " << half_served << ", thread form "
                    << served;
      return false;
    }
    if (!served) continue;
    for (int j = 0; j < D / 32; ++j) {
      if (half_codes[j] != codes[half * (D / 32) + j]) {
        ADD_FAILURE() << "pair half " << half << ": code word " << j << " differs";
        return false;
      }
    }
    if (half_scale_zero != scale_zero) {
      ADD_FAILURE() << "pair half " << half << ": (scale, zero) differs";
      return false;
    }
  }
  return true;
}

// One row through int2r (threshold key, then codes and scalars) against the reference cache row.
// The row-per-thread quantizer must either match it bit for bit or decline exactly when the
// threshold form cannot serve the row (then the kernel quantizes it the ordinary way).
template <int D>
bool check_thread_row(const std::vector<float>& x, float ratio, ThreadTally& tally) {
  const int k = static_cast<int>(oscar::int2::clip_index(D, ratio));
  const int r = D - 1 - k;
  if (int2r::top_length<D>(r) == 0) return true;  // the warp path's case
  unsigned w[D / 2];
  to_words<D>(x, w);
  const unsigned key = int2r::threshold_key<D>(w, r);
  const float t = oscar::int2::clip_threshold(x.data(), D, ratio);
  if (int2t::bits_of(t) != key << 16) {
    ADD_FAILURE() << "clip threshold " << int2t::float_of(key << 16) << ", reference " << t
                  << " (r " << r << ")";
    return false;
  }
  ++tally.rows;
  unsigned codes[D / 16], scale_zero = 0;
  const bool served = int2r::quantize_row<D>(w, key, codes, scale_zero);
  if (!check_pair_row<D>(w, r, key, served, codes, scale_zero)) return false;
  const auto [mn, mx] = std::minmax_element(x.begin(), x.end());
  const int2t::RowScalars rs = int2t::row_scalars(*mn, *mx, t);
  bool decided = rs.reciprocal;
  for (int j = 1; j <= 3 && decided; ++j) int2t::row_threshold(rs, j, &decided);
  if (served != decided) {
    ADD_FAILURE() << "served " << served << ", threshold form decided " << decided;
    return false;
  }
  if (!served) {
    ++tally.exact_path;
    return true;
  }
  std::uint8_t packed[D / 4];
  std::uint16_t sz[2];
  oscar::int2::quantize_cache_row(x.data(), D, ratio, packed, sz);
  for (int j = 0; j < D / 4; ++j) {
    const unsigned got = (codes[j / 4] >> (8 * (j % 4))) & 0xffu;
    if (got != packed[j]) {
      ADD_FAILURE() << "byte " << j << ": " << got << ", reference " << int(packed[j]);
      return false;
    }
  }
  EXPECT_EQ(scale_zero & 0xffffu, sz[0]);
  EXPECT_EQ(scale_zero >> 16, sz[1]);
  return (scale_zero & 0xffffu) == sz[0] && (scale_zero >> 16) == sz[1];
}

template <int D>
void check_thread_rows(std::mt19937& rng) {
  // Clip ratios covering every top-list length at each size (r + 1 from 1 to kTopMax<D>: 16, 32
  // at d 256) and one past it.
  const float ratios[] = {1.0f, 0.99f, 0.97f, 0.96f, 0.94f, 0.92f, 0.9f, 0.88f, 0.85f, 0.8f, 0.75f};
  constexpr int kRowsPerCase = 1500 * 128 / D;
  for (int kind = 0; kind < static_cast<int>(Kind::kCount); ++kind) {
    ThreadTally tally;
    for (const float ratio : ratios) {
      for (int i = 0; i < kRowsPerCase; ++i) {
        std::vector<float> x = make_row(static_cast<Kind>(kind), D, rng);
        ASSERT_TRUE(check_thread_row<D>(x, ratio, tally)) << "kind " << kind << " d " << D;
        if (i % 4 != 0) continue;
        // Ties at the clip threshold and at the code thresholds.
        const float t = oscar::int2::clip_threshold(x.data(), D, ratio);
        x[rng() % D] = rng() & 1 ? t : -t;
        const auto [mn, mx] = std::minmax_element(x.begin(), x.end());
        const int2t::RowScalars rs = int2t::row_scalars(*mn, *mx, t);
        for (int j = 1; j <= 3 && rs.reciprocal; ++j) {
          bool decided = false;
          const float tj = from_bits16(int2t::row_threshold(rs, j, &decided));
          if (!decided || !std::isfinite(tj)) continue;
          x[rng() % D] = tj;
          if (tj > rs.lo) x[rng() % D] = int2t::bf16_below(tj);
        }
        ASSERT_TRUE(check_thread_row<D>(x, ratio, tally)) << "ties, kind " << kind << " d " << D;
      }
    }
    std::printf("d %d, kind %d: %lld rows, %lld left to the exact path\n", D, kind,
                static_cast<long long>(tally.rows), static_cast<long long>(tally.exact_path));
  }
}

TEST(Int2RowThread, MatchesTheReference) {
  std::mt19937 rng(20261123u);
  check_thread_rows<64>(rng);
  check_thread_rows<128>(rng);
  check_thread_rows<256>(rng);
}

constexpr unsigned kPowerOfTwoLists = int2r::list_lengths(1, 3, 8, 16, 32);
constexpr unsigned kNoListOf6Or21 = int2r::list_lengths(1, 3, 8, 11, 16, 32);

// The clip selection alone (insertion for lists of 1 and 3 keys, sorted blocks merged into lists
// of 6 to 32 for the longer ones) against a sort of the row's keys, at every position it serves
// and on rows built to stress it: few distinct keys (ties across blocks and halves), zeros,
// ascending and descending rows (every block merge moves the whole list, or nothing), the largest
// keys all in one half or one block.
template <int D>
void check_selection(std::mt19937& rng) {
  constexpr int kRows = 400;
  for (int row = 0; row < kRows; ++row) {
    std::vector<unsigned> key(D);
    const int pattern = row % 6;
    for (int e = 0; e < D; ++e) {
      switch (pattern) {
        case 0:  // any 15-bit key
          key[e] = rng() & 0x7fffu;
          break;
        case 1:  // 3 distinct keys
          key[e] = 0x3f80u + (rng() % 3);
          break;
        case 2:  // mostly zero
          key[e] = rng() % 8 == 0 ? rng() & 0x7fffu : 0u;
          break;
        case 3:  // ascending
          key[e] = static_cast<unsigned>(e * 97);
          break;
        case 4:  // descending
          key[e] = static_cast<unsigned>((D - e) * 97);
          break;
        default:  // the large keys in the high halves of the last block only
          key[e] = (e % 2 == 1 && e >= D - 16) ? 0x7000u + (rng() & 0xfffu) : rng() & 0xfffu;
          break;
      }
    }
    unsigned w[D / 2];
    for (int m = 0; m < D / 2; ++m) {
      // Random signs: the selection must look at magnitudes only.
      w[m] = key[2 * m] | (key[2 * m + 1] << 16) | (rng() & 0x80008000u);
    }
    std::vector<unsigned> sorted = key;
    std::sort(sorted.begin(), sorted.end(), std::greater<unsigned>());
    for (int r = 0; r < int2r::kTopMax<D>; ++r) {
      ASSERT_EQ(int2r::threshold_key<D>(w, r), sorted[r])
          << "d " << D << ", pattern " << pattern << ", row " << row << ", r " << r;
      // Lists longer than needed give the same key: the powers of two (the set before lists of
      // 6, 11 and 21 keys) and a set without 6 and 21.
      ASSERT_EQ((int2r::threshold_key<D, kPowerOfTwoLists>(w, r)), sorted[r])
          << "d " << D << ", powers of two, pattern " << pattern << ", row " << row << ", r " << r;
      ASSERT_EQ((int2r::threshold_key<D, kNoListOf6Or21>(w, r)), sorted[r])
          << "d " << D << ", no 6 or 21, pattern " << pattern << ", row " << row << ", r " << r;
      // The pair form: each thread's list of its half, merged with its partner's.
      unsigned halves[2][D / 4];
      split_for_pair<D>(w, halves);
      for (int half = 0; half < 2; ++half) {
        ASSERT_EQ(pair_key<D>(halves, r, half), sorted[r])
            << "d " << D << ", pair half " << half << ", pattern " << pattern << ", row " << row
            << ", r " << r;
      }
    }
  }
}

TEST(Int2RowThread, ClipSelectionMatchesASort) {
  std::mt19937 rng(20261126u);
  check_selection<64>(rng);
  check_selection<128>(rng);
  check_selection<256>(rng);
}

// The list length each clip position takes: the shortest of the set that holds r + 1 keys, up to
// kTopMax<D> (16 at d 64 and 128, 32 at d 256); none past it (the warp quantizes those rows).
TEST(Int2RowThread, TopListLengths) {
  const int d64[][2] = {{0, 1}, {1, 3}, {2, 3}, {5, 6}, {7, 8}, {10, 11}, {15, 16}, {16, 0}};
  for (const auto& [r, length] : d64) EXPECT_EQ(int2r::top_length<64>(r), length) << "r " << r;
  const int d128[][2] = {{3, 6}, {5, 6}, {6, 8}, {8, 11}, {10, 11}, {11, 16}, {15, 16}, {16, 0}};
  for (const auto& [r, length] : d128) EXPECT_EQ(int2r::top_length<128>(r), length) << "r " << r;
  const int d256[][2] = {{10, 11}, {15, 16}, {16, 21}, {20, 21}, {21, 32}, {31, 32}, {32, 0}};
  for (const auto& [r, length] : d256) EXPECT_EQ(int2r::top_length<256>(r), length) << "r " << r;
  EXPECT_EQ((int2r::top_length<128, kPowerOfTwoLists>(5)), 8);
  EXPECT_EQ((int2r::top_length<128, kPowerOfTwoLists>(10)), 16);
  EXPECT_EQ((int2r::top_length<256, kPowerOfTwoLists>(20)), 32);
  EXPECT_EQ((int2r::top_length<256, kNoListOf6Or21>(5)), 8);
  EXPECT_EQ((int2r::top_length<256, kNoListOf6Or21>(20)), 32);
  EXPECT_EQ(int2r::top_length<128>(-1), 0);
}

// The packed stand-ins, and a row with a NaN (declined: the reference refuses it).
TEST(Int2RowThread, PackedOperationsAndNaN) {
  EXPECT_EQ(int2r::max_u16x2(0x00017fffu, 0x80000002u), 0x80007fffu);
  EXPECT_EQ(int2r::min_u16x2(0x00017fffu, 0x80000002u), 0x00010002u);
  EXPECT_EQ(int2r::even_bytes(0x44332211u, 0x88776655u), 0x77553311u);
  // bf16 pairs (1.0, -2.0) >= (1.0, -1.0): low yes, high no; NaN never compares.
  EXPECT_EQ(int2r::ge_mask(0xc0003f80u, 0xbf803f80u), 0x0000ffffu);
  EXPECT_EQ(int2r::ge_mask(0x7fc03f80u, 0x3f807fc0u), 0u);
  // Code sums (bf16 128 + code per half): (1.0, -2.0) against 0.5, 1.0, 2.0 gives 2 and 0; every
  // element (-inf) and no element (NaN) as thresholds; a NaN element compares false.
  EXPECT_EQ(int2r::code_sums(0xc0003f80u, 0x3f003f00u, 0x3f803f80u, 0x40004000u), 0x43004302u);
  EXPECT_EQ(int2r::code_sums(0xc0003f80u, 0xff80ff80u, 0xff80ff80u, 0x7fff7fffu), 0x43024302u);
  EXPECT_EQ(int2r::code_sums(0x7fc03f80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u), 0x43004303u);
  std::vector<float> x(128, 0.5f);
  x[77] = std::nanf("");
  unsigned w[64], codes[8], scale_zero = 0;
  to_words<128>(x, w);
  EXPECT_FALSE(int2r::quantize_row<128>(w, int2r::threshold_key<128>(w, 5), codes, scale_zero));
}

// The tensor-core store (int2_cache.cu, store_kv_tc_kernel) folds centring and smoothing into
// the rotation: ((x - mean) / s) R = x R' - b with R' = diag(1 / s) R split into bf16 high and low
// terms, b = mean (R'_hi + R'_lo) in float32, and x the bf16 row as it is. Emulated here as the
// mma computes it: each 16-element k-step's products summed exactly (bf16 x bf16 products are
// exact; float64 holds 16 of them), added to a float32 accumulator that starts at -b (the
// kernels' order; subtracting b after the product measured the same errors), the result rounded
// to bf16. Against the float64 product of the centred, smoothed row, the error must stay
// within the GPU test's one bf16 step (2^-7 of the row's largest value) with keys far from zero
// mean (means of ~20 standard deviations, where x R' is ~20x larger than the result) and
// smoothing scales 0.5-1.25; it is in fact the bf16 rounding of the result (2^-8). Without R'_lo
// it is not.
TEST(Int2StoreSplit, FoldedRotationKeepsFloat32Accuracy) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> scale(0.5, 1.25);
  for (const int d : {64, 128}) {
    double worst_split = 0.0, worst_hi = 0.0;
    for (int trial = 0; trial < 4; ++trial) {
      // A dense random orthogonal matrix (Gram-Schmidt on gaussian rows).
      std::vector<double> q(static_cast<std::size_t>(d) * d);
      for (double& v : q) v = normal(rng);
      for (int i = 0; i < d; ++i) {
        for (int j = 0; j < i; ++j) {
          double dot = 0.0;
          for (int k = 0; k < d; ++k) dot += q[i * d + k] * q[j * d + k];
          for (int k = 0; k < d; ++k) q[i * d + k] -= dot * q[j * d + k];
        }
        double norm = 0.0;
        for (int k = 0; k < d; ++k) norm += q[i * d + k] * q[i * d + k];
        for (int k = 0; k < d; ++k) q[i * d + k] /= std::sqrt(norm);
      }
      std::vector<float> r(q.size()), mean(d), smooth(d);
      for (std::size_t i = 0; i < q.size(); ++i) r[i] = static_cast<float>(q[i]);
      for (int i = 0; i < d; ++i) {
        mean[i] = static_cast<float>(20.0 * normal(rng));
        smooth[i] = static_cast<float>(scale(rng));
      }
      // R' = diag(1 / s) R (times the float32 reciprocal of s, as the kernel), its terms, and b.
      std::vector<float> r_hi(q.size()), r_lo(q.size()), b(d, 0.0f), b_hi(d, 0.0f);
      for (int i = 0; i < d; ++i) {
        const float reciprocal = 1.0f / smooth[i];
        for (int j = 0; j < d; ++j) {
          const float folded = r[i * d + j] * reciprocal;
          r_hi[i * d + j] = bf16(folded);
          r_lo[i * d + j] = bf16(folded - r_hi[i * d + j]);
        }
      }
      for (int j = 0; j < d; ++j) {
        for (int i = 0; i < d; ++i) {
          b[j] = std::fma(mean[i], r_hi[i * d + j] + r_lo[i * d + j], b[j]);
          b_hi[j] = std::fma(mean[i], r_hi[i * d + j], b_hi[j]);
        }
      }
      std::vector<float> x(d);
      for (int row = 0; row < 200; ++row) {
        for (int i = 0; i < d; ++i) {
          x[i] = bf16(static_cast<float>(mean[i] + normal(rng) * (i % 17 == 3 ? 10.0 : 1.0)));
        }
        double row_max = 0.0, err_split = 0.0, err_hi = 0.0;
        for (int j = 0; j < d; ++j) {
          double exact = 0.0;
          for (int i = 0; i < d; ++i) {
            // The reference: centre, then smooth, in float32; the product in float64.
            exact += static_cast<double>((x[i] - mean[i]) / smooth[i]) * r[i * d + j];
          }
          row_max = std::max(row_max, std::fabs(exact));
          float acc_split = 0.0f - b[j], acc_hi = 0.0f - b_hi[j];
          for (int k0 = 0; k0 < d; k0 += 16) {
            double hh = 0.0, hl = 0.0;
            for (int i = k0; i < k0 + 16; ++i) {
              hh += static_cast<double>(x[i]) * r_hi[i * d + j];
              hl += static_cast<double>(x[i]) * r_lo[i * d + j];
            }
            acc_split = acc_split + static_cast<float>(hh);
            acc_split = acc_split + static_cast<float>(hl);
            acc_hi = acc_hi + static_cast<float>(hh);
          }
          err_split = std::max(err_split, std::fabs(bf16(acc_split) - exact));
          err_hi = std::max(err_hi, std::fabs(bf16(acc_hi) - exact));
        }
        worst_split = std::max(worst_split, err_split / row_max);
        worst_hi = std::max(worst_hi, err_hi / row_max);
      }
    }
    std::printf("d %d: largest error / row max: R' split %.2e, R'_hi only %.2e\n", d, worst_split,
                worst_hi);
    EXPECT_LE(worst_split, 1.0 / 128.0) << "d " << d;   // the GPU test's tolerance
    EXPECT_LE(worst_split, 1.02 / 256.0) << "d " << d;  // the result's own bf16 rounding
    EXPECT_GT(worst_hi, 1.02 / 256.0) << "d " << d;     // the low term is needed
  }
}

}  // namespace
