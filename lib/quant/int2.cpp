// Reference implementation of the INT2 KV row format (see oscar/int2.h and docs/int2-format.md).
#include "oscar/int2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "oscar/error.h"

namespace oscar::int2 {
namespace {

std::uint32_t float_bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

float bits_float(std::uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// Round-to-nearest-even onto bf16's 8 significant bits: the same integer trick as c10::BFloat16,
// which also carries correctly into the exponent (up to +inf) and handles subnormals.
float round_bf16(float v) {
  if (std::isnan(v)) return v;
  std::uint32_t u = float_bits(v);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return bits_float(u & 0xFFFF0000u);
}

// Round-to-nearest-even onto IEEE binary16 (11 significant bits, exponent >= -14, subnormal
// quantum 2^-24, largest finite 65504).
float round_f16(float v) {
  if (!std::isfinite(v)) return v;
  const float a = std::fabs(v);
  // 65520 is halfway between 65504 and 2^16; the tie goes to the even 2^16, i.e. to infinity.
  if (a >= 65520.0f) return std::copysign(std::numeric_limits<float>::infinity(), v);
  float r;
  if (a < 0x1p-14f) {
    // Half subnormals: a multiple of 2^-24. Scaling by powers of two is exact, so only nearbyint
    // rounds (to nearest even in the default rounding mode).
    r = std::nearbyint(a * 0x1p24f) * 0x1p-24f;
  } else {
    std::uint32_t u = float_bits(a);
    u += 0x0FFFu + ((u >> 13) & 1u);
    r = bits_float(u & 0xFFFFE000u);
  }
  return std::copysign(r, v);
}

void check_group_size(std::int64_t d, std::int64_t group_size) {
  OSCAR_CHECK(group_size > 0, "INT2 group size must be positive, got {}", group_size);
  OSCAR_CHECK(d % group_size == 0,
              "INT2 group size {} does not divide the row size {} (groups may not straddle rows)",
              group_size, d);
}

void check_packable(std::int64_t d) {
  OSCAR_CHECK(d > 0 && d % 4 == 0,
              "INT2 row size must be a positive multiple of 4 (four codes per byte), got {}", d);
}

}  // namespace

ScaleDType parse_scale_dtype(std::string_view name) {
  if (name == "bf16") return ScaleDType::kBF16;
  if (name == "f16") return ScaleDType::kF16;
  if (name == "f32") return ScaleDType::kF32;
  fail("unknown INT2 scale dtype '{}' (expected bf16, f16 or f32)", name);
}

std::string scale_dtype_name(ScaleDType dtype) {
  switch (dtype) {
    case ScaleDType::kBF16:
      return "bf16";
    case ScaleDType::kF16:
      return "f16";
    case ScaleDType::kF32:
      return "f32";
  }
  fail("invalid INT2 scale dtype {}", static_cast<int>(dtype));
}

int scale_dtype_bits(ScaleDType dtype) {
  switch (dtype) {
    case ScaleDType::kBF16:
    case ScaleDType::kF16:
      return 16;
    case ScaleDType::kF32:
      return 32;
  }
  fail("invalid INT2 scale dtype {}", static_cast<int>(dtype));
}

float round_scale(float v, ScaleDType dtype) {
  switch (dtype) {
    case ScaleDType::kBF16:
      return round_bf16(v);
    case ScaleDType::kF16:
      return round_f16(v);
    case ScaleDType::kF32:
      return v;
  }
  fail("invalid INT2 scale dtype {}", static_cast<int>(dtype));
}

void check_row_params(std::int64_t d, const QuantParams& params) {
  check_packable(d);
  check_group_size(d, params.group_size);
  OSCAR_CHECK(params.clip_ratio > 0, "INT2 clip ratio must be > 0 (1 = no clipping), got {}",
              params.clip_ratio);
  (void)scale_dtype_bits(params.scale_dtype);  // rejects values outside the enum
}

std::int64_t clip_index(std::int64_t n, double ratio) {
  OSCAR_CHECK(n > 0, "INT2 group must not be empty");
  OSCAR_CHECK(ratio > 0, "INT2 clip ratio must be > 0 (1 = no clipping), got {}", ratio);
  const double position = std::floor(ratio * static_cast<double>(n));
  // Compared as doubles first: a huge ratio must not overflow the integer conversion.
  return position >= static_cast<double>(n - 1) ? n - 1 : static_cast<std::int64_t>(position);
}

float clip_threshold(const float* group, std::int64_t n, double ratio) {
  const std::int64_t k = clip_index(n, ratio);
  std::vector<float> magnitudes(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) magnitudes[i] = std::fabs(group[i]);
  std::nth_element(magnitudes.begin(), magnitudes.begin() + k, magnitudes.end());
  return magnitudes[static_cast<std::size_t>(k)];
}

GroupQuant quantize_group(const float* x, std::int64_t n, double clip_ratio, ScaleDType scale_dtype,
                          std::uint8_t* codes) {
  (void)clip_index(n, clip_ratio);
  for (std::int64_t i = 0; i < n; ++i) {
    OSCAR_CHECK(std::isfinite(x[i]), "INT2 input element {} of a group is not finite ({})", i,
                x[i]);
  }
  const float t = clip_threshold(x, n, clip_ratio);
  const auto clip = [t](float v) { return std::min(std::max(v, -t), t); };
  float lo = clip(x[0]);
  float hi = lo;
  for (std::int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, clip(x[i]));
    hi = std::max(hi, clip(x[i]));
  }
  // A zero minimum is made +0: its sign would otherwise depend on the order of the comparisons
  // (GPU kernels reduce in another order), and it decides the sign bit of the zero point.
  lo += 0.0f;
  // The zero comes from the stored scale and the codes from both stored values, so that the
  // dequantization grid is exactly the one the codes were chosen on.
  float scale = round_scale((hi - lo) / 3.0f, scale_dtype);
  // A constant group (or a range the scale dtype cannot hold) gets scale 1: its zero then carries
  // the value itself.
  if (!(scale > 0.0f) || std::isinf(scale)) scale = 1.0f;
  float zero = round_scale(-lo / scale, scale_dtype);
  if (std::isinf(zero)) {
    scale = 1.0f;
    zero = round_scale(-lo, scale_dtype);
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const float q = std::floor(clip(x[i]) / scale + zero + 0.5f);
    codes[i] = static_cast<std::uint8_t>(std::min(std::max(q, 0.0f), 3.0f));
  }
  return {scale, zero};
}

void pack_codes(const std::uint8_t* codes, std::int64_t d, std::uint8_t* packed) {
  check_packable(d);
  const std::int64_t q = d / 4;
  for (std::int64_t j = 0; j < q; ++j) {
    std::uint8_t byte = 0;
    for (int k = 0; k < 4; ++k) {
      const std::uint8_t c = codes[j + k * q];
      OSCAR_CHECK(c <= 3, "INT2 code {} at element {} is out of range 0..3", c, j + k * q);
      byte = static_cast<std::uint8_t>(byte | (c << (2 * k)));
    }
    packed[j] = byte;
  }
}

void unpack_codes(const std::uint8_t* packed, std::int64_t d, std::uint8_t* codes) {
  check_packable(d);
  const std::int64_t q = d / 4;
  for (std::int64_t j = 0; j < q; ++j) {
    for (int k = 0; k < 4; ++k) {
      codes[j + k * q] = static_cast<std::uint8_t>((packed[j] >> (2 * k)) & 3u);
    }
  }
}

void quantize_row(const float* x, std::int64_t d, const QuantParams& params, std::uint8_t* packed,
                  float* scales, float* zeros) {
  check_row_params(d, params);
  const std::int64_t g = params.group_size;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(d));
  for (std::int64_t k = 0; k < d / g; ++k) {
    const GroupQuant q =
        quantize_group(x + k * g, g, params.clip_ratio, params.scale_dtype, codes.data() + k * g);
    scales[k] = q.scale;
    zeros[k] = q.zero;
  }
  pack_codes(codes.data(), d, packed);
}

void dequantize_row(const std::uint8_t* packed, const float* scales, const float* zeros,
                    std::int64_t d, std::int64_t group_size, float* out) {
  check_packable(d);
  check_group_size(d, group_size);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(d));
  unpack_codes(packed, d, codes.data());
  for (std::int64_t i = 0; i < d; ++i) {
    const std::int64_t k = i / group_size;
    out[i] = dequantize_code(codes[i], scales[k], zeros[k]);
  }
}

double bits_per_element(std::int64_t d, std::int64_t group_size, ScaleDType scale_dtype) {
  check_group_size(d, group_size);
  return 2.0 + 2.0 * scale_dtype_bits(scale_dtype) / static_cast<double>(group_size);
}

}  // namespace oscar::int2
