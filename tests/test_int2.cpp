// The INT2 row format: hand-computed rows, packing, scale rounding, and the LibTorch fake-quantizer
// bit for bit against the plain reference.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "oscar/error.h"
#include "oscar/fake_quant.h"
#include "oscar/int2.h"

namespace oscar {
namespace {

using int2::QuantParams;
using int2::ScaleDType;

constexpr ScaleDType kAllDTypes[] = {ScaleDType::kBF16, ScaleDType::kF16, ScaleDType::kF32};

std::uint32_t bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

float from_bits(std::uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

QuantParams params(std::int64_t group, double ratio, ScaleDType dtype) {
  QuantParams p;
  p.group_size = group;
  p.clip_ratio = ratio;
  p.scale_dtype = dtype;
  return p;
}

// quantize_row on `x`, checked against the expected codes (unpacked from the packed bytes),
// packed bytes, stored scales and zeros, and the dequantized row. All comparisons are exact.
struct Expected {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> packed;
  std::vector<float> scales;
  std::vector<float> zeros;
  std::vector<float> dequantized;
};

void expect_row(const std::vector<float>& x, const QuantParams& p, const Expected& e) {
  const auto d = static_cast<std::int64_t>(x.size());
  const std::int64_t groups = d / p.group_size;
  std::vector<std::uint8_t> packed(d / 4);
  std::vector<float> scales(groups), zeros(groups), out(d);
  std::vector<std::uint8_t> codes(d);
  int2::quantize_row(x.data(), d, p, packed.data(), scales.data(), zeros.data());
  int2::unpack_codes(packed.data(), d, codes.data());
  int2::dequantize_row(packed.data(), scales.data(), zeros.data(), d, p.group_size, out.data());
  const std::string what = "scale dtype " + int2::scale_dtype_name(p.scale_dtype);
  EXPECT_EQ(codes, e.codes) << what;
  EXPECT_EQ(packed, e.packed) << what;
  EXPECT_EQ(scales, e.scales) << what;
  EXPECT_EQ(zeros, e.zeros) << what;
  EXPECT_EQ(out, e.dequantized) << what;
}

// Exact equality of two float tensors, bit for bit (so -0 differs from +0 and NaN fails).
::testing::AssertionResult bit_identical(const torch::Tensor& actual,
                                         const torch::Tensor& expected) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << actual.sizes() << " vs " << expected.sizes();
  }
  const torch::Tensor a = actual.to(torch::kCPU).contiguous();
  const torch::Tensor b = expected.to(torch::kCPU).contiguous();
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  std::int64_t mismatches = 0, first = -1;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    if (bits(pa[i]) != bits(pb[i])) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << mismatches << " of " << a.numel() << " elements differ; first at flat index " << first
         << ": " << pa[first] << " vs " << pb[first];
}

// Rows with the situations the format has to handle: plain Gaussian rows over a wide range of
// magnitudes, outliers, constant and all-zero rows, negative-only rows and rows of a few repeated
// values (ties in |x| and in the rounding).
torch::Tensor test_data(std::vector<std::int64_t> shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const std::int64_t d = shape.back();
  std::int64_t numel = 1;
  for (auto s : shape) numel *= s;
  std::vector<float> v(static_cast<std::size_t>(numel));
  const float few[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
  for (std::int64_t r = 0; r < numel / d; ++r) {
    float* row = v.data() + r * d;
    const float kind = uniform(rng);
    const float magnitude = std::pow(10.0f, -3.0f + 5.0f * uniform(rng));
    for (std::int64_t i = 0; i < d; ++i) row[i] = normal(rng) * magnitude;
    if (kind < 0.10f) {
      for (int k = 0; k < 3; ++k) row[rng() % d] *= 30.0f;
    } else if (kind < 0.15f) {
      const float c = normal(rng);
      for (std::int64_t i = 0; i < d; ++i) row[i] = c;
    } else if (kind < 0.20f) {
      for (std::int64_t i = 0; i < d; ++i) row[i] = 0.0f;
    } else if (kind < 0.25f) {
      for (std::int64_t i = 0; i < d; ++i) row[i] = -std::fabs(row[i]) - magnitude;
    } else if (kind < 0.30f) {
      for (std::int64_t i = 0; i < d; ++i) row[i] = few[rng() % 5] * magnitude;
    }
  }
  return torch::from_blob(v.data(), shape, torch::kFloat32).clone();
}

// The plain loop: quantize_row + dequantize_row over every row of x [..., d] (CPU), with one clip
// ratio per row when `ratios` is not empty.
torch::Tensor reference_rows(const torch::Tensor& x, const QuantParams& p,
                             const std::vector<double>& ratios = {}) {
  const torch::Tensor xf = x.to(torch::kFloat32).contiguous();
  const std::int64_t d = xf.size(-1);
  const std::int64_t rows = xf.numel() / d;
  torch::Tensor out = torch::empty_like(xf);
  std::vector<std::uint8_t> packed(d / 4);
  std::vector<float> scales(d / p.group_size), zeros(d / p.group_size);
  for (std::int64_t r = 0; r < rows; ++r) {
    QuantParams q = p;
    if (!ratios.empty()) q.clip_ratio = ratios[r];
    int2::quantize_row(xf.data_ptr<float>() + r * d, d, q, packed.data(), scales.data(),
                       zeros.data());
    int2::dequantize_row(packed.data(), scales.data(), zeros.data(), d, p.group_size,
                         out.data_ptr<float>() + r * d);
  }
  return out;
}

// The plain loop for KIVI keys: for every (h, c), blocks of `block` tokens (the last one shorter).
torch::Tensor reference_channels(const torch::Tensor& x, std::int64_t block, const QuantParams& p) {
  const torch::Tensor xf = x.to(torch::kFloat32).contiguous();
  const std::int64_t t = xf.size(0), h = xf.size(1), d = xf.size(2);
  torch::Tensor out = torch::empty_like(xf);
  const auto in = xf.accessor<float, 3>();
  auto o = out.accessor<float, 3>();
  std::vector<float> group;
  std::vector<std::uint8_t> codes;
  for (std::int64_t head = 0; head < h; ++head) {
    for (std::int64_t c = 0; c < d; ++c) {
      for (std::int64_t start = 0; start < t; start += block) {
        const std::int64_t n = std::min(block, t - start);
        group.resize(n);
        codes.resize(n);
        for (std::int64_t i = 0; i < n; ++i) group[i] = in[start + i][head][c];
        const auto q =
            int2::quantize_group(group.data(), n, p.clip_ratio, p.scale_dtype, codes.data());
        for (std::int64_t i = 0; i < n; ++i) {
          o[start + i][head][c] = int2::dequantize_code(codes[i], q.scale, q.zero);
        }
      }
    }
  }
  return out;
}

TEST(Int2ScaleDType, ParseAndName) {
  for (const ScaleDType t : kAllDTypes) {
    EXPECT_EQ(int2::parse_scale_dtype(int2::scale_dtype_name(t)), t);
  }
  EXPECT_EQ(int2::scale_dtype_name(ScaleDType::kBF16), "bf16");
  EXPECT_EQ(int2::scale_dtype_name(ScaleDType::kF16), "f16");
  EXPECT_EQ(int2::scale_dtype_name(ScaleDType::kF32), "f32");
  EXPECT_EQ(int2::scale_dtype_bits(ScaleDType::kBF16), 16);
  EXPECT_EQ(int2::scale_dtype_bits(ScaleDType::kF16), 16);
  EXPECT_EQ(int2::scale_dtype_bits(ScaleDType::kF32), 32);
  EXPECT_THROW(int2::parse_scale_dtype("fp16"), Error);
  EXPECT_THROW(int2::parse_scale_dtype("BF16"), Error);
  EXPECT_THROW(int2::parse_scale_dtype(""), Error);
}

TEST(Int2RoundScale, HandValues) {
  const float third = 1.0f / 3.0f;                                         // 0x3EAAAAAB
  EXPECT_EQ(int2::round_scale(third, ScaleDType::kBF16), 0.333984375f);    // 0x3EAB
  EXPECT_EQ(int2::round_scale(third, ScaleDType::kF16), 0.333251953125f);  // 0x3555
  EXPECT_EQ(bits(int2::round_scale(third, ScaleDType::kF32)), bits(third));
  EXPECT_EQ(int2::round_scale(-0.1f, ScaleDType::kBF16), -0.10009765625f);   // 0xBDCD
  EXPECT_EQ(int2::round_scale(-0.1f, ScaleDType::kF16), -0.0999755859375f);  // 0xAE66
  // Ties go to the even neighbour.
  EXPECT_EQ(int2::round_scale(1.0f + 0x1p-8f, ScaleDType::kBF16), 1.0f);
  EXPECT_EQ(int2::round_scale(1.0f + 3 * 0x1p-8f, ScaleDType::kBF16), 1.0f + 0x1p-6f);
  EXPECT_EQ(int2::round_scale(1.0f + 0x1p-11f, ScaleDType::kF16), 1.0f);
  EXPECT_EQ(int2::round_scale(1.0f + 3 * 0x1p-11f, ScaleDType::kF16), 1.0f + 0x1p-9f);
  // Half's limits: largest finite, overflow at the tie 65520, subnormals down to 2^-24.
  EXPECT_EQ(int2::round_scale(65519.0f, ScaleDType::kF16), 65504.0f);
  EXPECT_EQ(int2::round_scale(65520.0f, ScaleDType::kF16), std::numeric_limits<float>::infinity());
  EXPECT_EQ(int2::round_scale(-1e6f, ScaleDType::kF16), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(int2::round_scale(0x1p-25f, ScaleDType::kF16), 0.0f);
  EXPECT_EQ(int2::round_scale(3 * 0x1p-26f, ScaleDType::kF16), 0x1p-24f);
  EXPECT_EQ(int2::round_scale(5 * 0x1p-25f, ScaleDType::kF16), 2 * 0x1p-24f);
  EXPECT_TRUE(std::isnan(int2::round_scale(std::nanf(""), ScaleDType::kBF16)));
  EXPECT_TRUE(std::isnan(int2::round_scale(std::nanf(""), ScaleDType::kF16)));
}

// round_scale against torch's own conversions, bit for bit, over random bit patterns (every
// exponent: normals, subnormals, huge values) and the edge values.
TEST(Int2RoundScale, MatchesTorchConversions) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::denorm_min(),
                               -std::numeric_limits<float>::denorm_min(),
                               from_bits(0x007FFFFFu),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::max(),
                               -std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               65504.0f,
                               65519.99f,
                               65520.0f,
                               0x1p-14f,
                               0x1p-24f,
                               0x1p-25f,
                               3 * 0x1p-26f,
                               from_bits(0x3F808000u),
                               from_bits(0x3F818000u),
                               from_bits(0x7F7F8000u),
                               from_bits(0x7F7F7FFFu),
                               1.0f / 3.0f};
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 20); ++i) {
    const float v = from_bits(static_cast<std::uint32_t>(rng()));
    if (!std::isnan(v)) values.push_back(v);
  }
  // Values on and next to the bf16 / f16 rounding ties.
  for (int i = 0; i < 4096; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(rng()) & 0x7FFFFFFFu;
    for (const std::uint32_t tie : {0x8000u, 0x1000u}) {
      for (const int delta : {-1, 0, 1}) {
        const float v = from_bits(((u & ~(2 * tie - 1)) | tie) + delta);
        if (!std::isnan(v)) values.push_back(v);
      }
    }
  }
  const torch::Tensor t =
      torch::from_blob(values.data(), {static_cast<std::int64_t>(values.size())}, torch::kFloat32);
  const torch::Tensor bf16 = t.to(torch::kBFloat16).to(torch::kFloat32);
  const torch::Tensor f16 = t.to(torch::kHalf).to(torch::kFloat32);
  std::vector<float> ours_bf16(values.size()), ours_f16(values.size()), ours_f32(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    ours_bf16[i] = int2::round_scale(values[i], ScaleDType::kBF16);
    ours_f16[i] = int2::round_scale(values[i], ScaleDType::kF16);
    ours_f32[i] = int2::round_scale(values[i], ScaleDType::kF32);
  }
  const auto as_tensor = [](std::vector<float>& v) {
    return torch::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, torch::kFloat32);
  };
  EXPECT_TRUE(bit_identical(as_tensor(ours_bf16), bf16));
  EXPECT_TRUE(bit_identical(as_tensor(ours_f16), f16));
  EXPECT_TRUE(bit_identical(as_tensor(ours_f32), t));
}

TEST(Int2Clip, Threshold) {
  const std::vector<float> x = {-4.0f, 1.5f, -1.5f, 0.25f, 0.75f, -0.75f, 1.0f, 0.0f};
  // Sorted magnitudes: 0, 0.25, 0.75, 0.75, 1, 1.5, 1.5, 4.
  EXPECT_EQ(int2::clip_index(8, 0.75), 6);
  EXPECT_EQ(int2::clip_threshold(x.data(), 8, 0.75), 1.5f);
  EXPECT_EQ(int2::clip_threshold(x.data(), 8, 0.5), 1.0f);
  EXPECT_EQ(int2::clip_threshold(x.data(), 8, 0.1), 0.0f);  // floor(0.8) = 0
  EXPECT_EQ(int2::clip_threshold(x.data(), 8, 1.0), 4.0f);  // position n - 1: max |x|
  EXPECT_EQ(int2::clip_threshold(x.data(), 8, 7.0), 4.0f);
  EXPECT_EQ(int2::clip_index(128, 0.96), 122);  // floor(122.88)
  EXPECT_EQ(int2::clip_index(128, 0.92), 117);  // floor(117.76)
  EXPECT_EQ(int2::clip_index(128, 1e300), 127);
  EXPECT_THROW(int2::clip_index(8, 0.0), Error);
  EXPECT_THROW(int2::clip_index(8, -0.5), Error);
  EXPECT_THROW(int2::clip_index(8, std::nan("")), Error);
  EXPECT_THROW(int2::clip_index(0, 1.0), Error);
}

// d = 8, one group, no clip: lo = -1, hi = 2, scale 1, zero 1 (exact in every dtype). Codes are
// floor(x + 1 + 0.5): the ties x = 0.5 and 1.5 round up.
TEST(Int2Row, OneGroupNoClip) {
  const std::vector<float> x = {-1.0f, 0.0f, 0.5f, 1.0f, 2.0f, 1.5f, -0.5f, 0.9f};
  for (const ScaleDType t : kAllDTypes) {
    // byte 0 = c0 | c2 << 2 | c4 << 4 | c6 << 6 = 0 | 2 << 2 | 3 << 4 | 1 << 6 = 0x78
    // byte 1 = c1 | c3 << 2 | c5 << 4 | c7 << 6 = 1 | 2 << 2 | 3 << 4 | 2 << 6 = 0xB9
    expect_row(x, params(8, 1.0, t),
               {{0, 1, 2, 2, 3, 3, 1, 2},
                {0x78, 0xB9},
                {1.0f},
                {1.0f},
                {-1.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 0.0f, 1.0f}});
  }
}

// Clip ratio 0.75 on d = 8: threshold 1.5 (position 6 of the sorted magnitudes), so -4 becomes
// -1.5; lo = -1.5, hi = 1.5, scale 1, zero 1.5.
TEST(Int2Row, OneGroupClipped) {
  const std::vector<float> x = {-4.0f, 1.5f, -1.5f, 0.25f, 0.75f, -0.75f, 1.0f, 0.0f};
  for (const ScaleDType t : kAllDTypes) {
    // x + 1.5 = 0, 3, 0, 1.75, 2.25, 0.75, 2.5, 1.5
    // byte 0 = 0 | 0 << 2 | 2 << 4 | 3 << 6 = 0xE0; byte 1 = 3 | 2 << 2 | 1 << 4 | 2 << 6 = 0x9B
    expect_row(x, params(8, 0.75, t),
               {{0, 3, 0, 2, 2, 1, 3, 2},
                {0xE0, 0x9B},
                {1.0f},
                {1.5f},
                {-1.5f, 1.5f, -1.5f, 0.5f, 0.5f, -0.5f, 1.5f, 0.5f}});
  }
}

// d = 16 in groups of 4: an ascending group, a wide one (scale 3, zero 2), a constant group and a
// negative-only group. Byte j holds elements j, j + 4, j + 8, j + 12, so every byte mixes groups.
TEST(Int2Row, FourGroups) {
  const std::vector<float> x = {0.0f, 1.0f, 2.0f, 3.0f, -6.0f, 0.0f,  3.0f,  -3.0f,
                                0.1f, 0.1f, 0.1f, 0.1f, -1.0f, -2.0f, -3.0f, -4.0f};
  const std::vector<std::uint8_t> codes = {0, 1, 2, 3, 0, 2, 3, 1, 0, 0, 0, 0, 3, 2, 1, 0};
  // byte 0 = 0 | 0 << 2 | 0 << 4 | 3 << 6 = 0xC0; byte 1 = 1 | 2 << 2 | 0 << 4 | 2 << 6 = 0x89
  // byte 2 = 2 | 3 << 2 | 0 << 4 | 1 << 6 = 0x4E; byte 3 = 3 | 1 << 2 | 0 << 4 | 0 << 6 = 0x07
  const std::vector<std::uint8_t> packed = {0xC0, 0x89, 0x4E, 0x07};
  // The constant group gets scale 1 and zero round(-0.1): it dequantizes to round(0.1).
  for (const auto& [t, constant] :
       {std::pair{ScaleDType::kF32, 0.1f}, std::pair{ScaleDType::kBF16, 0.10009765625f},
        std::pair{ScaleDType::kF16, 0.0999755859375f}}) {
    expect_row(x, params(4, 1.0, t),
               {codes,
                packed,
                {1.0f, 3.0f, 1.0f, 1.0f},
                {-0.0f, 2.0f, -constant, 4.0f},
                {0.0f, 1.0f, 2.0f, 3.0f, -6.0f, 0.0f, 3.0f, -3.0f, constant, constant, constant,
                 constant, -1.0f, -2.0f, -3.0f, -4.0f}});
  }
}

// The same row as one group of 16: lo = -6, hi = 3, scale 3, zero 2; codes floor(x / 3 + 2.5).
TEST(Int2Row, SixteenInOneGroup) {
  const std::vector<float> x = {0.0f, 1.0f, 2.0f, 3.0f, -6.0f, 0.0f,  3.0f,  -3.0f,
                                0.1f, 0.1f, 0.1f, 0.1f, -1.0f, -2.0f, -3.0f, -4.0f};
  for (const ScaleDType t : kAllDTypes) {
    // byte 0 = 2 | 0 << 2 | 2 << 4 | 2 << 6 = 0xA2; byte 1 = 2 | 2 << 2 | 2 << 4 | 1 << 6 = 0x6A
    // byte 2 = 3 | 3 << 2 | 2 << 4 | 1 << 6 = 0x6F; byte 3 = 3 | 1 << 2 | 2 << 4 | 1 << 6 = 0x67
    expect_row(x, params(16, 1.0, t),
               {{2, 2, 3, 3, 0, 2, 3, 1, 2, 2, 2, 2, 2, 1, 1, 1},
                {0xA2, 0x6A, 0x6F, 0x67},
                {3.0f},
                {2.0f},
                {0.0f, 0.0f, 3.0f, 3.0f, -6.0f, 0.0f, 3.0f, -3.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                 -3.0f, -3.0f, -3.0f}});
  }
}

// Range 1 gives scale 1/3, which each dtype rounds differently; codes are chosen on the stored
// scale, so bf16 (0.333984375) picks code 1 for 0.5 where f16 (0.333251953125) and f32 pick 2.
TEST(Int2Row, CodesUseTheStoredScale) {
  const std::vector<float> x = {0.0f, 1.0f, 0.5f, 0.25f};
  const float s32 = 1.0f / 3.0f;
  // byte = c0 | c1 << 2 | c2 << 4 | c3 << 6
  expect_row(x, params(4, 1.0, ScaleDType::kBF16),
             {{0, 3, 1, 1},
              {0x5C},
              {0.333984375f},
              {-0.0f},
              {0.0f, 1.001953125f, 0.333984375f, 0.333984375f}});
  expect_row(x, params(4, 1.0, ScaleDType::kF16),
             {{0, 3, 2, 1},
              {0x6C},
              {0.333251953125f},
              {-0.0f},
              {0.0f, 0.999755859375f, 0.66650390625f, 0.333251953125f}});
  // 3 * s32 = 1 + 3e-8 rounds to 1.0f.
  expect_row(x, params(4, 1.0, ScaleDType::kF32),
             {{0, 3, 2, 1}, {0x6C}, {s32}, {-0.0f}, {0.0f, 1.0f, 2.0f * s32, s32}});
}

// lo = -4, hi = -1: scale 1, zero 4; codes floor(x + 4.5).
TEST(Int2Row, NegativeOnly) {
  const std::vector<float> x = {-1.0f, -2.0f, -3.0f, -4.0f, -1.5f, -2.5f, -3.5f, -4.0f};
  for (const ScaleDType t : kAllDTypes) {
    // byte 0 = 3 | 1 << 2 | 3 << 4 | 1 << 6 = 0x77; byte 1 = 2 | 0 << 2 | 2 << 4 | 0 << 6 = 0x22
    expect_row(x, params(8, 1.0, t),
               {{3, 2, 1, 0, 3, 2, 1, 0},
                {0x77, 0x22},
                {1.0f},
                {4.0f},
                {-1.0f, -2.0f, -3.0f, -4.0f, -1.0f, -2.0f, -3.0f, -4.0f}});
  }
}

// Constant rows: scale 1, zero round(-c), every code 0; the constant comes back exactly when the
// scale dtype holds it (2.5, -3, 0) and as round(c) otherwise.
TEST(Int2Row, ConstantRows) {
  for (const ScaleDType t : kAllDTypes) {
    for (const float c : {2.5f, -3.0f, 0.0f}) {
      expect_row(std::vector<float>(8, c), params(8, 1.0, t),
                 {std::vector<std::uint8_t>(8, 0), {0, 0}, {1.0f}, {-c}, std::vector<float>(8, c)});
    }
  }
  expect_row(std::vector<float>(4, 0.1f), params(4, 0.5, ScaleDType::kBF16),
             {{0, 0, 0, 0}, {0}, {1.0f}, {-0.10009765625f}, std::vector<float>(4, 0.10009765625f)});
}

// Ranges a 16-bit scale cannot hold fall back to scale 1 instead of producing 0, inf or NaN.
TEST(Int2Row, DegenerateScalesStayFinite) {
  // f16: scale (5e-8 / 3) underflows to 0.
  expect_row({0.0f, 0.0f, 0.0f, 5e-8f}, params(4, 1.0, ScaleDType::kF16),
             {{0, 0, 0, 0}, {0}, {1.0f}, {-0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}});
  // f16: scale ~3.3e-4 is fine but zero = -10000 / scale ~ -3e7 overflows; fallback zero -10000.
  const float above = std::nextafter(10000.0f, 20000.0f);
  expect_row({10000.0f, 10000.0f, 10000.0f, above}, params(4, 1.0, ScaleDType::kF16),
             {{0, 0, 0, 0}, {0}, {1.0f}, {-10000.0f}, std::vector<float>(4, 10000.0f)});
  // The same group in f32 is an ordinary one; with |zero| ~ 3e7 float32 keeps only about one code
  // step of precision in x / scale + zero, so the elements are checked to within one step.
  std::vector<std::uint8_t> codes(4);
  const float g[] = {10000.0f, 10000.0f, 10000.0f, above};
  const auto q = int2::quantize_group(g, 4, 1.0, ScaleDType::kF32, codes.data());
  EXPECT_EQ(q.scale, (above - 10000.0f) / 3.0f);
  for (int i = 0; i < 4; ++i) {
    EXPECT_LE(std::fabs(int2::dequantize_code(codes[i], q.scale, q.zero) - g[i]), q.scale);
  }
}

TEST(Int2Row, Errors) {
  std::vector<float> x(16, 1.0f);
  std::vector<std::uint8_t> packed(4);
  std::vector<float> s(16), z(16), out(16);
  const auto quantize = [&](std::int64_t d, const QuantParams& p) {
    int2::quantize_row(x.data(), d, p, packed.data(), s.data(), z.data());
  };
  EXPECT_NO_THROW(quantize(16, params(4, 1.0, ScaleDType::kBF16)));
  EXPECT_THROW(quantize(6, params(6, 1.0, ScaleDType::kBF16)), Error);   // d % 4 != 0
  EXPECT_THROW(quantize(0, params(4, 1.0, ScaleDType::kBF16)), Error);   // empty row
  EXPECT_THROW(quantize(8, params(3, 1.0, ScaleDType::kBF16)), Error);   // G does not divide d
  EXPECT_THROW(quantize(8, params(16, 1.0, ScaleDType::kBF16)), Error);  // G > d
  EXPECT_THROW(quantize(8, params(0, 1.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(quantize(8, params(-4, 1.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(quantize(8, params(8, 0.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(quantize(8, params(8, -0.9, ScaleDType::kBF16)), Error);
  EXPECT_THROW(quantize(8, params(8, std::nan(""), ScaleDType::kBF16)), Error);
  x[3] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantize(8, params(8, 1.0, ScaleDType::kBF16)), Error);
  x[3] = std::nanf("");
  EXPECT_THROW(quantize(8, params(8, 1.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(int2::dequantize_row(packed.data(), s.data(), z.data(), 6, 6, out.data()), Error);
  EXPECT_THROW(int2::dequantize_row(packed.data(), s.data(), z.data(), 8, 3, out.data()), Error);
  try {
    quantize(8, params(3, 1.0, ScaleDType::kBF16));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide"), std::string::npos) << e.what();
  }
}

TEST(Int2Pack, Layout) {
  // One code 3 at element i lands in byte i % (d / 4) at bit offset 2 * (i / (d / 4)).
  const std::int64_t d = 16;
  for (std::int64_t i = 0; i < d; ++i) {
    std::vector<std::uint8_t> codes(d, 0), packed(d / 4);
    codes[i] = 3;
    int2::pack_codes(codes.data(), d, packed.data());
    for (std::int64_t j = 0; j < d / 4; ++j) {
      const int expected = j == i % 4 ? 3 << (2 * (i / 4)) : 0;
      EXPECT_EQ(packed[j], expected) << "element " << i << ", byte " << j;
    }
  }
  std::vector<std::uint8_t> codes(8, 0), packed(2);
  codes[5] = 4;
  EXPECT_THROW(int2::pack_codes(codes.data(), 8, packed.data()), Error);
  EXPECT_THROW(int2::pack_codes(codes.data(), 6, packed.data()), Error);
  EXPECT_THROW(int2::unpack_codes(packed.data(), 10, codes.data()), Error);
}

TEST(Int2Pack, RoundTrip) {
  std::mt19937 rng(11);
  for (const std::int64_t d : {4, 8, 64, 128, 256}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<std::uint8_t> codes(d), back(d), packed(d / 4), repacked(d / 4);
      for (auto& c : codes) c = static_cast<std::uint8_t>(rng() & 3u);
      int2::pack_codes(codes.data(), d, packed.data());
      int2::unpack_codes(packed.data(), d, back.data());
      EXPECT_EQ(back, codes) << "d = " << d;
      int2::pack_codes(back.data(), d, repacked.data());
      EXPECT_EQ(repacked, packed) << "d = " << d;
    }
  }
}

TEST(Int2Bits, PerElement) {
  // 2 bits per code plus one scale and one zero per group.
  EXPECT_DOUBLE_EQ(int2::bits_per_element(128, 32, ScaleDType::kBF16), 3.0);
  EXPECT_DOUBLE_EQ(int2::bits_per_element(128, 64, ScaleDType::kBF16), 2.5);
  EXPECT_DOUBLE_EQ(int2::bits_per_element(128, 128, ScaleDType::kBF16), 2.25);
  EXPECT_DOUBLE_EQ(int2::bits_per_element(128, 128, ScaleDType::kF16), 2.25);
  EXPECT_DOUBLE_EQ(int2::bits_per_element(128, 32, ScaleDType::kF32), 4.0);
  EXPECT_DOUBLE_EQ(int2::bits_per_element(128, 64, ScaleDType::kF32), 3.0);
  EXPECT_DOUBLE_EQ(int2::bits_per_element(128, 128, ScaleDType::kF32), 2.5);
  EXPECT_THROW(int2::bits_per_element(128, 48, ScaleDType::kBF16), Error);
  EXPECT_THROW(int2::bits_per_element(128, 0, ScaleDType::kBF16), Error);
}

// The vectorized fake-quantizer equals the reference loop bit for bit on the CPU.
TEST(Int2FakeQuant, RowsMatchReference) {
  std::uint32_t seed = 100;
  for (const std::int64_t d : {8, 64, 128}) {
    for (const std::int64_t g : {d, std::int64_t{32}, std::int64_t{4}}) {
      if (d % g != 0) continue;
      for (const std::int64_t t : {1, 7, 9, 33}) {
        for (const std::int64_t h : {1, 3}) {
          const torch::Tensor x = test_data({t, h, d}, seed++);
          for (const double ratio : {1.0, 0.92, 0.3}) {
            for (const ScaleDType dt : kAllDTypes) {
              const QuantParams p = params(g, ratio, dt);
              EXPECT_TRUE(bit_identical(fake_quantize_rows(x, p), reference_rows(x, p)))
                  << "T " << t << " H " << h << " d " << d << " G " << g << " ratio " << ratio
                  << " " << int2::scale_dtype_name(dt);
            }
          }
        }
      }
    }
  }
}

TEST(Int2FakeQuant, RowsAnyLeadingShapeAndInputDType) {
  const torch::Tensor x = test_data({2, 5, 3, 64}, 7);
  const QuantParams p = params(32, 0.96, ScaleDType::kBF16);
  EXPECT_TRUE(bit_identical(fake_quantize_rows(x, p), reference_rows(x, p)));
  const torch::Tensor row = x.reshape({-1}).narrow(0, 0, 64);
  EXPECT_TRUE(bit_identical(fake_quantize_rows(row, p), reference_rows(row, p)));
  // bf16 input: quantized as its (exact) float32 values.
  const torch::Tensor xb = x.to(torch::kBFloat16);
  const torch::Tensor out = fake_quantize_rows(xb, p);
  EXPECT_EQ(out.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(bit_identical(out, reference_rows(xb.to(torch::kFloat32), p)));
  // A non-contiguous view.
  const torch::Tensor strided = x.transpose(0, 1);
  EXPECT_TRUE(bit_identical(fake_quantize_rows(strided, p), reference_rows(strided, p)));
  EXPECT_EQ(fake_quantize_rows(torch::zeros({0, 3, 64}), p).sizes(),
            (std::vector<int64_t>{0, 3, 64}));
}

// One clip ratio per KV head: x [T, H, d] with ratios [H], and the [B, T, H] form.
TEST(Int2FakeQuant, PerHeadClipRatios) {
  const std::int64_t t = 9, h = 3, d = 128;
  const torch::Tensor x = test_data({t, h, d}, 21);
  const torch::Tensor ratios = torch::tensor({0.96f, 0.92f, 1.0f});
  for (const ScaleDType dt : kAllDTypes) {
    for (const std::int64_t g : {d, std::int64_t{32}}) {
      const QuantParams p = params(g, 1.0, dt);
      std::vector<double> per_row;
      for (std::int64_t i = 0; i < t * h; ++i) per_row.push_back(ratios[i % h].item<float>());
      const torch::Tensor expected = reference_rows(x, p, per_row);
      EXPECT_TRUE(bit_identical(fake_quantize_rows(x, p, ratios), expected));
      const torch::Tensor batched = x.unsqueeze(0).expand({2, t, h, d});
      const torch::Tensor batched_ratios = ratios.view({1, 1, h}).expand({2, t, h});
      EXPECT_TRUE(bit_identical(fake_quantize_rows(batched, p, batched_ratios),
                                torch::stack({expected, expected})));
    }
  }
  // Equal ratios in a tensor behave as the scalar ratio (float32 0.5 is exact).
  const QuantParams p = params(32, 0.5, ScaleDType::kBF16);
  EXPECT_TRUE(
      bit_identical(fake_quantize_rows(x, p, torch::full({h}, 0.5f)), fake_quantize_rows(x, p)));
  EXPECT_TRUE(bit_identical(fake_quantize_rows(x, p, torch::tensor(0.5)), reference_rows(x, p)));
}

TEST(Int2FakeQuant, ChannelsMatchReference) {
  std::uint32_t seed = 300;
  for (const std::int64_t t : {1, 5, 16, 37}) {
    for (const std::int64_t block : {4, 16}) {
      for (const std::int64_t d : {6, 8}) {
        const torch::Tensor x = test_data({t, 3, d}, seed++);
        for (const double ratio : {1.0, 0.9}) {
          for (const ScaleDType dt : kAllDTypes) {
            const QuantParams p = params(d, ratio, dt);
            EXPECT_TRUE(
                bit_identical(fake_quantize_channels(x, block, p), reference_channels(x, block, p)))
                << "T " << t << " block " << block << " d " << d << " ratio " << ratio << " "
                << int2::scale_dtype_name(dt);
          }
        }
      }
    }
  }
  // A channel group is a block of one channel: a constant channel comes back exactly.
  torch::Tensor x = test_data({20, 2, 8}, 5);
  x.select(2, 3).fill_(0.75f);
  const torch::Tensor out = fake_quantize_channels(x, 8, params(8, 1.0, ScaleDType::kBF16));
  EXPECT_TRUE(torch::equal(out.select(2, 3), x.select(2, 3)));
}

TEST(Int2FakeQuant, Errors) {
  const torch::Tensor x = torch::randn({4, 2, 8});
  EXPECT_THROW(fake_quantize_rows(torch::randn({4, 6}), params(6, 1.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(fake_quantize_rows(x, params(3, 1.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(fake_quantize_rows(x, params(0, 1.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(fake_quantize_rows(x, params(8, 0.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(fake_quantize_rows(x, params(8, -1.0, ScaleDType::kBF16)), Error);
  EXPECT_THROW(fake_quantize_rows(x.to(torch::kInt32), params(8, 1.0, ScaleDType::kBF16)), Error);
  const QuantParams p = params(8, 1.0, ScaleDType::kBF16);
  EXPECT_THROW(fake_quantize_rows(x, p, torch::tensor({0.9f, 0.0f})), Error);
  EXPECT_THROW(fake_quantize_rows(x, p, torch::tensor({0.9f, std::nanf("")})), Error);
  EXPECT_THROW(fake_quantize_rows(x, p, torch::tensor({0.9f, 0.9f, 0.9f})), Error);
  EXPECT_THROW(fake_quantize_channels(x, 0, p), Error);
  EXPECT_THROW(fake_quantize_channels(x[0], 4, p), Error);
  EXPECT_THROW(fake_quantize_channels(x, 4, params(8, 0.0, ScaleDType::kBF16)), Error);
}

// On a GPU the same operations run in CUDA kernels. The format promises agreement with the CPU
// only within float rounding: a different rounding of an intermediate can move an element whose
// x / scale + zero sits on a rounding tie to the neighbouring code. So differences are allowed,
// each at most one quantization step of the coarsest group (kStepTol: (max - min) / 3 <=
// 2 max|x| / 3, plus 1% for the stored scale's rounding) and on few elements (kMismatchTol; a
// wrong layout or formula changes most of them). The test prints how many differ.
TEST(Int2FakeQuant, CudaMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  constexpr double kMismatchTol = 1e-3;  // fraction of elements
  const torch::Tensor x = test_data({33, 3, 128}, 77);
  const double kStepTol = x.abs().max().item<double>() * 2.0 / 3.0 * 1.01;
  const torch::Tensor ratios = torch::tensor({0.96f, 0.92f, 1.0f});
  for (const ScaleDType dt : kAllDTypes) {
    for (const std::int64_t g : {std::int64_t{128}, std::int64_t{32}}) {
      const QuantParams p = params(g, 0.96, dt);
      const std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs = {
          {fake_quantize_rows(x.cuda(), p).cpu(), fake_quantize_rows(x, p)},
          {fake_quantize_rows(x.cuda(), p, ratios).cpu(), fake_quantize_rows(x, p, ratios)},
          {fake_quantize_channels(x.cuda(), 16, p).cpu(), fake_quantize_channels(x, 16, p)}};
      for (const auto& [gpu, cpu] : pairs) {
        const auto exact = bit_identical(gpu, cpu);
        const torch::Tensor diff = (gpu - cpu).abs();
        const double fraction = (diff > 0).to(torch::kFloat64).mean().item<double>();
        std::cout << int2::scale_dtype_name(dt) << " G " << g << ": "
                  << (exact ? std::string("bit-identical") : exact.message()) << "\n";
        EXPECT_LE(fraction, kMismatchTol);
        EXPECT_LE(diff.max().item<double>(), kStepTol);
      }
    }
  }
}

}  // namespace
}  // namespace oscar
