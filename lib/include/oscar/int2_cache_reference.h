// Plain C++ reference of the paged mixed-precision KV cache kernels (store, demotion, decode).
#pragma once

#include <cstdint>
#include <vector>

#include "oscar/int2.h"

// These define what the CUDA kernels of kernels/ (oscar/kernels/int2_cache.h) must compute; the
// kernel tests compare against them: packing and quantization bit for bit, attention within a
// stated tolerance. No Torch, no CUDA.
namespace oscar::int2 {

// bfloat16 bit pattern of `v` (round to nearest, ties to even) and back.
std::uint16_t to_bf16_bits(float v);
float from_bf16_bits(std::uint16_t bits);

// Rotated cache row of one token and head, rounded to bf16 as the cache stores it:
//   out = bf16(((x - mean) / smooth) R)   (mean, smooth may be null; R is [d, d], x_rot = x R)
// with the products summed in index order in float32.
void rotate_row(const float* x, const float* mean, const float* smooth, const float* rotation,
                std::int64_t d, float* out);

// One INT2 cache row (group = d, bf16 scale and zero) of a bf16-valued row: packed codes (d / 4
// bytes) and the (scale, zero) pair as bf16 bit patterns, exactly as the kernels write them.
void quantize_cache_row(const float* row, std::int64_t d, float clip_ratio, std::uint8_t* packed,
                        std::uint16_t* scale_zero);
// (code - zero) * scale of a cache row.
void dequantize_cache_row(const std::uint8_t* packed, const std::uint16_t* scale_zero,
                          std::int64_t d, float* out);

// Attention of `group` query heads over T rows in float64: out[g] = softmax(scale q_g K^T) V.
// q [group, d], keys and values [T, d], out [group, d]; T = 0 gives zeros.
void attention_reference(const float* q, std::int64_t group, const float* keys, const float* values,
                         std::int64_t tokens, std::int64_t d, double scale, double* out);

}  // namespace oscar::int2
