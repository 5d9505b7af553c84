// The threshold form of the INT2 quantizer of bf16 rows (kernels/src/int2_thresholds.h, used by the
// CUDA demotion kernel) against the reference int2::quantize_group, on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "int2_thresholds.h"
#include "oscar/int2.h"

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
  std::int64_t rows = 0, not_reciprocal = 0, wide = 0, undecided = 0;
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
  for (int j = 1; j <= 3; ++j) {
    bool decided = false;
    level[j - 1] = from_bits16(int2t::row_threshold(rs, j, &decided));
    if (!decided) {
      ++tally.undecided;
      return true;
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
        "undecided\n",
        kind, static_cast<long long>(t.rows), static_cast<long long>(t.not_reciprocal),
        static_cast<long long>(t.wide), static_cast<long long>(t.undecided));
    // The search gives up rarely: rows that take the slow path cost the kernel a reload.
    EXPECT_LE(t.undecided * 1000, t.rows) << "kind " << kind;
  }
}

}  // namespace
