// The INT2 KV row format: plain C++ reference quantizer, dequantizer and packing (no Torch).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

// This is the one definition of the format (docs/int2-format.md): the LibTorch fake-quantizer
// (oscar/fake_quant.h), the evaluation and the CUDA kernels are all tested bit for bit against it.
// Everything is float32 arithmetic in a fixed order; the library is built without FMA contraction
// so that other implementations can reproduce it exactly.
namespace oscar::int2 {

// Storage type of the per-group scale and zero.
enum class ScaleDType { kBF16, kF16, kF32 };

// "bf16", "f16" or "f32"; throws oscar::Error for any other name.
ScaleDType parse_scale_dtype(std::string_view name);
// The name parse_scale_dtype accepts for `dtype`.
std::string scale_dtype_name(ScaleDType dtype);
// 16 for bf16 and f16, 32 for f32.
int scale_dtype_bits(ScaleDType dtype);

// `v` rounded to the scale dtype and widened back to float: round-to-nearest-even to bf16 or IEEE
// half (subnormals kept, overflow to +-inf, NaN stays NaN), identity for f32. Bit-identical to
// torch's x.to(kBFloat16).to(kFloat) and x.to(kHalf).to(kFloat) for every non-NaN input.
float round_scale(float v, ScaleDType dtype);

struct QuantParams {
  std::int64_t group_size = 0;  // G: channels per group; must divide d
  double clip_ratio = 1.0;      // > 0; >= 1 clips nothing
  ScaleDType scale_dtype = ScaleDType::kBF16;
};

// Throws oscar::Error unless a row of `d` elements can use `params`: d > 0 and a multiple of 4,
// G > 0 dividing d, clip ratio > 0 (not NaN).
void check_row_params(std::int64_t d, const QuantParams& params);

// Position, in the ascending order of a group's magnitudes, of the clip threshold:
// min(floor(ratio * n), n - 1), computed in double. Throws unless n > 0 and ratio > 0.
std::int64_t clip_index(std::int64_t n, double ratio);

// The clip threshold of a group of `n` values: the |x| at sorted (ascending) position
// clip_index(n, ratio). For ratio >= 1 that is max |x|, so clamping to it changes nothing.
float clip_threshold(const float* group, std::int64_t n, double ratio);

// Scale and zero of one group, as stored (already rounded to the scale dtype).
struct GroupQuant {
  float scale;
  float zero;
};

// Quantizes one group of `n` finite values (the format's core step; rows and the channel variant
// are built from it) and writes its n codes (0..3) to `codes`:
//   t = clip_threshold(x, n, clip_ratio);  x_c = clamp(x, -t, t)
//   lo = min x_c, hi = max x_c
//   scale = round_scale((hi - lo) / 3);  zero = round_scale(-lo / scale)
//   code = clamp(floor(x_c / scale + zero + 0.5), 0, 3)
// The zero is derived from the stored scale and the codes from the stored scale and zero, so the
// code picked is the level of the stored grid (code - zero) * scale nearest to x_c. Degenerate
// group (hi == lo, or a stored scale of 0 / inf, or a stored zero that overflows): scale = 1 and
// zero = round_scale(-lo), which dequantizes a constant group to round_scale(lo) (exact for
// all-zero groups and for constants representable in the scale dtype) and never yields NaN/inf
// (for inputs within the scale dtype's range). Throws oscar::Error for non-finite input.
GroupQuant quantize_group(const float* x, std::int64_t n, double clip_ratio, ScaleDType scale_dtype,
                          std::uint8_t* codes);

// (code - zero) * scale, in float32.
inline float dequantize_code(std::uint8_t code, float scale, float zero) {
  return (static_cast<float>(code) - zero) * scale;
}

// Bytes of packed codes for a row of `d` elements (d / 4).
inline std::int64_t packed_bytes(std::int64_t d) { return d / 4; }

// Packs a row of `d` codes (values 0..3, d a multiple of 4) into d / 4 bytes: byte j holds
// elements j, j + d/4, j + d/2, j + 3d/4 at bit offsets 0, 2, 4, 6. Throws for a code > 3.
void pack_codes(const std::uint8_t* codes, std::int64_t d, std::uint8_t* packed);
// Inverse of pack_codes.
void unpack_codes(const std::uint8_t* packed, std::int64_t d, std::uint8_t* codes);

// Quantizes one row `x` of `d` values in groups of params.group_size consecutive channels (group g
// covers elements [g G, (g + 1) G)). Writes d / 4 packed bytes and d / G stored scales and zeros.
void quantize_row(const float* x, std::int64_t d, const QuantParams& params, std::uint8_t* packed,
                  float* scales, float* zeros);

// Dequantizes a packed row: out[i] = (code_i - zeros[g]) * scales[g], g = i / group_size.
void dequantize_row(const std::uint8_t* packed, const float* scales, const float* zeros,
                    std::int64_t d, std::int64_t group_size, float* out);

// Storage cost of a quantized row: 2 + 2 * bits(scale dtype) / G bits per element (2-bit codes plus
// one scale and one zero per group).
double bits_per_element(std::int64_t d, std::int64_t group_size, ScaleDType scale_dtype);

}  // namespace oscar::int2
