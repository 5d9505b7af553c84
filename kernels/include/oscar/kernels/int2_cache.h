// Paged mixed-precision KV cache on the GPU: rotate-and-store, INT2 quantize-and-pack, demotion
// of BF16 pages to INT2, and split-KV decode attention over BF16 and INT2 pages.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "oscar/kernels/device.h"

// Layout (docs/int2-kernels.md). Every row in the cache is already rotated: keys as
// ((k - k_mean) / k_smooth) R_K, values as (v - v_mean) R_V, so queries enter as (q * k_smooth) R_K
// and the attention output comes out in the rotated value basis (the caller multiplies by R_V^T
// and adds v_mean, or folds both into o_proj). Key centring needs nothing at decode time: it shifts
// every logit of a query by the same q . k_mean, which softmax ignores.
//
//   BF16 page pool:  k_bf16, v_bf16   [num_bf16_pages, Hkv, page_size, d]      bf16
//   INT2 page pool:  k_codes, v_codes [num_int2_pages, Hkv, page_size, d / 4]  uint8 (row format of
//                                      docs/int2-format.md, group = d)
//                    k_scale_zero, v_scale_zero [num_int2_pages, Hkv, page_size, 2] bf16 (scale,
//                                      zero); a row dequantizes to (code - zero) * scale
//
// Per sequence b a cache holds, in token order: the sink (first S0 tokens, BF16), the INT2 history,
// and the recent window (BF16). bf16_block_table[b] lists the sink's pages followed by the recent
// window's pages; int2_block_table[b] lists the INT2 pages. The recent window starts on a page
// boundary (its first page is bf16_block_table[b][ceil(sink_len[b] / page_size)]).
// Pools and queries are addressed with vector loads: every pool pointer and the query pointer
// must be 16-byte aligned (cudaMalloc gives 256).
//
// CUDA graphs: store_kv, demote_pages and decode_attention neither synchronize nor allocate, and
// capture as they are (any capture mode). A replay reads every device array anew (rows, slots,
// page pairs, block tables, lengths, queries); the host-side fields are fixed at capture, so
// capture with upper bounds (num_tokens, num_pages, batch, max_pages_per_sequence) and pad: a
// slot of -1, a page pair with a negative page, a sequence of length 0 each do nothing.
//
// Programmatic dependent launch (enable_pdl in each call's parameters; Hopper and later, ignored
// before): the call's first kernel is launched so that it may start while the kernel before it in
// the stream is finishing. Until that kernel has completed it reads only the inputs that stay
// fixed for the cache's life (the prepared rotation and the clip ratios: do not rewrite them in
// the kernel just before); everything else (rows, slots, page pairs, tables, lengths, queries,
// pools) it reads and writes only after (a demotion with overlap_previous: after the work before
// the call it overlaps). Every kernel of these calls, launched either way, lets a
// programmatic dependent that follows it start early (decode_attention once its pages are read;
// demote_pages beside a store, DemotePagesParams::overlap_previous, once its own work is done),
// and completes only after the work it depends on, so a chain of such launches (a decode step's
// store, demotion and decode, or an engine's own kernels around them) keeps stream order for
// memory while the launches overlap. The same holds in a CUDA graph, where a capture turns each
// into a programmatic edge. On an H200 a 36-layer decode step (one graph, d 128, 4K context) ran
// 1.15x faster with it at batch 1 and 1.04x at batch 32 (docs/int2-kernels.md).
namespace oscar::kernels {

// bf16 values travel as their 16-bit patterns so this header needs no CUDA fp16 headers.
using bf16_bits = std::uint16_t;

// Rotates new K/V rows and stores them: rows whose bf16_slot is >= 0 go to the BF16 pool
// (slot = page * page_size + offset), rows whose int2_slot is >= 0 are quantized into the INT2
// pool. The rotated row is rounded to bf16 before quantization, so a row stored as BF16 and demoted
// later gets exactly the codes it would have got here.
//
// Paths (StoreKvParams::path): kFloat32 rotates with float32 fused multiply-adds in a fixed order
// (any head_dim, any pool alignment). kTensorCore (head_dim 64 and 128; 256 on Hopper with a
// prepared rotation, see below) folds centring and
// smoothing into the rotation (x R' - b, R' = diag(1 / smooth) R, b = mean R'), rotates on bf16
// tensor cores with R' split into high and low bf16 terms (float32-level accuracy, in another
// summation order, so a value may round to the neighbouring bf16) and quantizes one row per
// thread; it needs 16-byte aligned K/V inputs, rotations and pools. On Hopper (a build with sm_90a
// code) kTensorCore multiplies with the warpgroup MMA (wgmma), elsewhere with mma.sync;
// kTensorCoreSync takes the mma.sync kernel on any device (for comparison and tests; head_dim 64
// and 128). At head_dim 256 R'^T does not fit shared memory: kTensorCore streams it from
// `prepared` (required: kInvalidArgument without it) through the warpgroup MMA, on Hopper with an
// sm_90a build (kUnsupported elsewhere).
// kFloat32Columns stores BF16 rows only (int2_slot null, else kUnsupported): kFloat32's arithmetic
// and bits, spread over 16-column slices of each row so that a few rows (a decode step's, into the
// recent window) run on many multiprocessors; any head_dim and pool alignment. kAuto: for BF16-only
// stores of up to kStoreColumnsMaxTokens tokens the column path, unless a prepared rotation lets
// the warpgroup MMA serve them (as fast at head_dim 128, faster at 256); otherwise the
// tensor-core kernels when head_dim (256: with a prepared rotation),
// alignment and the device's shared memory allow (faster from a few dozen tokens on), on Hopper
// the warpgroup MMA with a prepared rotation (fastest at every token count) and without one from
// kStoreWgmmaMinTokens tokens (below, mma.sync measured a little faster); else kFloat32 (figures
// on the results page). The INT2 rows are the exact quantization of the stored bf16 rows either
// way.
//
// Rows that arrive already rotated: an engine that folds R_V (and v_mean, as a bias) into the V
// rows of its QKV projection (docs/bundle-format.md) passes v_rotation = null, and likewise keys
// with k_rotation = null; that side's rows are then stored as they are (copied to BF16 slots,
// quantized into INT2 slots: where the other side runs on the tensor cores at head_dim 64 / 128,
// in blocks of the same launch; otherwise a row-per-thread kernel follows: at head_dim 256, for
// stores of up to 8192 tokens, as a programmatic dependent launch that runs beside the
// tensor-core store; at the demotion's rate when both sides arrive rotated), and its mean and
// smoothing must be null too (fold them as well).
// `path` and `prepared` concern the rotated side only. Both rotations null: a plain
// quantize-and-pack.
enum class StoreKvPath { kAuto, kFloat32, kTensorCore, kTensorCoreSync, kFloat32Columns };
constexpr std::int64_t kStoreWgmmaMinTokens = 1024;
constexpr std::int64_t kStoreColumnsMaxTokens = 64;

struct StoreKvParams {
  std::int64_t num_tokens = 0;
  int num_kv_heads = 0, head_dim = 0, page_size = 0;
  const bf16_bits* k = nullptr;  // [num_tokens, Hkv, d]
  const bf16_bits* v = nullptr;
  const float* k_rotation = nullptr;  // [Hkv, d, d], x_rot = x R; null: keys arrive rotated
  const float* v_rotation = nullptr;  // null: values arrive rotated (R_V folded into v_proj)
  const float* k_mean = nullptr;      // [Hkv, d] or null
  const float* k_smooth = nullptr;    // [Hkv, d] or null
  const float* v_mean = nullptr;      // [Hkv, d] or null
  const float* k_clip = nullptr;      // [Hkv] clip ratios in (0, 1]
  const float* v_clip = nullptr;
  const std::int64_t* bf16_slot = nullptr;  // [num_tokens] or null
  const std::int64_t* int2_slot = nullptr;  // [num_tokens] or null
  bf16_bits* k_bf16 = nullptr;              // BF16 pool (needed when bf16_slot is given)
  bf16_bits* v_bf16 = nullptr;
  std::uint8_t* k_codes = nullptr;  // INT2 pool (needed when int2_slot is given)
  std::uint8_t* v_codes = nullptr;
  bf16_bits* k_scale_zero = nullptr;
  bf16_bits* v_scale_zero = nullptr;
  StoreKvPath path = StoreKvPath::kAuto;
  // Optional, for the tensor-core paths: the rotation prepared by prepare_store_kv from the same
  // rotations, means and smoothing (device memory, 16-byte aligned). A block then copies R'^T and
  // b in instead of building them from R, most of a small store's time (a decode step's); at
  // head_dim 256 the tensor-core store needs it (it streams R'^T from it). The float32 path
  // ignores it.
  const void* prepared = nullptr;
  bool enable_pdl = false;  // programmatic dependent launch (see the top of this header)
  cudaStream_t stream = nullptr;
};
Status store_kv(const StoreKvParams& params);

// The prepared rotation of a store (StoreKvParams::prepared), built once per bundle and layer:
// for K then V, per KV head, R'^T's high and low bf16 terms (d x d each, in 8 x 8 core-matrix
// order; at head_dim 256 in chunks of 16 rows of both terms, which the store streams) and b (d
// float32; stored negated at head_dim 64 and 128, where the store's accumulators start at -b),
// which is what every tensor-core store block would otherwise compute from R, the mean
// and the smoothing. store_kv_prepared_bytes gives its size (0 for an unsupported head_dim);
// prepare_store_kv fills `prepared` (device memory, 16-byte aligned) from params' num_kv_heads,
// head_dim, rotations, means, smoothing and stream; a side whose rotation is null (rows that
// arrive rotated) is left unwritten, as the store never reads it.
std::size_t store_kv_prepared_bytes(int num_kv_heads, int head_dim);
Status prepare_store_kv(const StoreKvParams& params, void* prepared);

// Demotion: quantizes whole BF16 pages (already rotated rows) into INT2 pages, for every KV head;
// page_pairs[2 i] is the source BF16 page, page_pairs[2 i + 1] the destination INT2 page. A pair
// with a negative page is padding and skipped: a decode step captured in a CUDA graph passes a
// fixed-length list (e.g. one entry per sequence) and fills the unused entries with -1.
//
// Every kernel gives the same bits (those of the C++ reference). kWarpBatched: a warp quantizes 8
// rows together (4 at d = 256), threshold selection across the warp; any pool alignment.
// kRowPerThread: one thread per row, no cross-lane work per row, for large demotions; needs
// 16-byte aligned pools. kWarpPerRow: a warp per row (a short chain per row: the lowest latency
// for a decode step's few pages); any pool alignment. kAuto: kWarpPerRow for demotions of at most
// kDemoteWarpPerRowMaxRows rows (2 * num_pages * num_kv_heads * page_size, padding pairs
// included: one wave of warps; on an H200 1 to 16 pages of 8 heads x 16 tokens took 5.2-6.2 us
// against 6.6-6.9 by row per thread at d 128, 5.9-8.1 against 9.7-9.9 at d 256, and 32 pages
// took longer), else kRowPerThread when the pools allow it (2.0x faster on an H100: 2349 against
// 1206 GB/s for 16384 pages), else kWarpBatched.
enum class DemoteKernel { kAuto, kWarpBatched, kRowPerThread, kWarpPerRow };
constexpr std::int64_t kDemoteWarpPerRowMaxRows = 4096;

struct DemotePagesParams {
  int num_pages = 0;
  int num_kv_heads = 0, head_dim = 0, page_size = 0;
  const std::int32_t* page_pairs = nullptr;  // device, [num_pages, 2]
  const bf16_bits* k_bf16 = nullptr;
  const bf16_bits* v_bf16 = nullptr;
  const float* k_clip = nullptr;  // [Hkv]
  const float* v_clip = nullptr;
  std::uint8_t* k_codes = nullptr;
  std::uint8_t* v_codes = nullptr;
  bf16_bits* k_scale_zero = nullptr;
  bf16_bits* v_scale_zero = nullptr;
  DemoteKernel kernel = DemoteKernel::kAuto;
  bool enable_pdl = false;  // programmatic dependent launch (see the top of this header)
  // With enable_pdl: the call just before it in the stream is a store_kv that shares no data with
  // it (a decode step's, whose new tokens land in the window's newest page while its oldest is
  // demoted: no page of either call's source or destination is the other's), so it starts beside
  // that call, as soon as the call's kernels have waited for the work before them, instead of
  // after it. (Any other kernel there must likewise signal its dependents only after its own
  // wait.) It still completes only after that call, so whatever follows finds both done (the call
  // after it may start once the demotion's own work is done, and waits for both). The caller
  // guarantees the independence; ignored without enable_pdl.
  bool overlap_previous = false;
  cudaStream_t stream = nullptr;
};
Status demote_pages(const DemotePagesParams& params);

// How decode_attention processes INT2 pages. kTensorCore: 16-token tiles on tensor cores (keys:
// integer mma of u8 codes and the query as two s8 terms per head, 13 bits or more of its largest
// element; values: codes as fp16 in registers, softmax weights in fp16); BF16 pages then go
// through the SIMT kernel in their own splits. kSimt: one CUDA-core kernel for every page (the
// reference path, fp32 queries). kAuto: kTensorCore.
enum class DecodePath { kAuto, kSimt, kTensorCore };

// Decode attention, one query token per sequence: out[b, h] = softmax(scale * q K^T) V over the
// sequence's sink, INT2 history and recent window, with fp32 accumulation. Split-KV: the pages of
// one (sequence, KV head) are cut into num_splits contiguous ranges processed by separate blocks,
// then merged by log-sum-exp; every KV head's pages are read once for all query heads of its GQA
// group. head_dim 64, 128 or 256; Hq / Hkv of 1, 2, 4 or 8; page_size 8 or 16.
struct DecodeParams {
  int batch = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 0;
  float softmax_scale = 0.0f;
  const bf16_bits* q = nullptr;  // [batch, Hq, d], rotated
  const bf16_bits* k_bf16 = nullptr;
  const bf16_bits* v_bf16 = nullptr;
  const std::uint8_t* k_codes = nullptr;
  const std::uint8_t* v_codes = nullptr;
  const bf16_bits* k_scale_zero = nullptr;
  const bf16_bits* v_scale_zero = nullptr;
  const std::int32_t* bf16_block_table = nullptr;  // [batch, bf16_table_stride]
  const std::int32_t* int2_block_table = nullptr;  // [batch, int2_table_stride]
  int bf16_table_stride = 0, int2_table_stride = 0;
  const std::int32_t* sink_len = nullptr;    // [batch]
  const std::int32_t* int2_len = nullptr;    // [batch]
  const std::int32_t* recent_len = nullptr;  // [batch]
  int max_pages_per_sequence = 0;            // upper bound of all pages of any sequence
  // Upper bound of the BF16 (sink + recent) pages of any sequence, or 0 for unknown
  // (max_pages_per_sequence): sizes the BF16 kernel's splits on the tensor-core path.
  int max_bf16_pages_per_sequence = 0;
  bf16_bits* out = nullptr;  // [batch, Hq, d], rotated value basis
  int num_splits = 0;        // 0: chosen from the device and the shape; else per kernel (see path)
  DecodePath path = DecodePath::kAuto;
  // decode_workspace_bytes(params) bytes on the device, 16-byte aligned. Its first
  // decode_counter_bytes(params) bytes are the split-merge counters: zero them once when the
  // workspace is allocated (e.g. cudaMemsetAsync); every successful call leaves them zero, so the
  // workspace can be reused by any later call whose counters fit (after a failed call, zero them
  // again). The rest may hold anything.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  bool enable_pdl = false;  // programmatic dependent launch (see the top of this header)
  cudaStream_t stream = nullptr;
};
// The number of partial results decode_attention writes per (sequence, q head) (the splits of
// every kernel it launches) and the workspace it needs for them.
int decode_num_splits(const DecodeParams& params);
std::size_t decode_workspace_bytes(const DecodeParams& params);
// The leading bytes of the workspace that must be zero before a call (see DecodeParams).
std::size_t decode_counter_bytes(const DecodeParams& params);
Status decode_attention(const DecodeParams& params);

}  // namespace oscar::kernels
