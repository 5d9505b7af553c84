// Vectorized INT2 fake quantization (quantize then dequantize) of LibTorch tensors.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "oscar/int2.h"

namespace oscar {

// Per-token INT2 of `x` [..., d] (any floating dtype, any device; converted to float32): every row
// along the last dimension is quantized with `params` exactly as int2::quantize_row and then
// dequantized as int2::dequantize_row. Returns float32 of x's shape on x's device. On the CPU the
// result is bit-identical to that loop (same float32 operations in the same order); on a GPU it may
// differ by float rounding. Throws oscar::Error for invalid parameters (int2::check_row_params).
torch::Tensor fake_quantize_rows(const torch::Tensor& x, const int2::QuantParams& params);

// As above, with one clip ratio per row: `clip_ratio` broadcasts to x.shape[:-1] (e.g. [H] for x
// [T, H, d]: one ratio per KV head) and replaces params.clip_ratio. Ratios are used as float64 (a
// float32 tensor means its float32 values, widened). Every ratio must be > 0.
torch::Tensor fake_quantize_rows(const torch::Tensor& x, const int2::QuantParams& params,
                                 const torch::Tensor& clip_ratio);

// KIVI-style keys: `x` [T, H, d]; each channel (h, c) is quantized along tokens in blocks of
// `token_block` consecutive tokens, the block of one channel being one group (int2::quantize_group
// with params.clip_ratio and params.scale_dtype; params.group_size is not used). When T is not a
// multiple of token_block, the last T % token_block tokens form a smaller group of their own (its
// clip position uses that smaller size). Returns the dequantized float32 tensor of x's shape.
torch::Tensor fake_quantize_channels(const torch::Tensor& x, std::int64_t token_block,
                                     const int2::QuantParams& params);

}  // namespace oscar
