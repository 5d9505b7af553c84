// The split plan of decode_attention: how many blocks each decode kernel gets per (sequence, KV
// head), as a pure function of the call and the device's shape, so that its rules can be tested
// on the CPU (tests/test_decode_plan.cpp); int2_cache.cu fills the shape from the device.
#pragma once

#include <algorithm>

#include "oscar/kernels/int2_cache.h"

namespace oscar::kernels::decode_plan {

// What the plan needs of the device and of the kernels' build.
struct DecodeShape {
  long long multiprocessors = 132;
  int tc_blocks = 1;     // tensor-core blocks resident on one multiprocessor (the shape's kernel)
  int simt_blocks = 1;   // CUDA-core (BF16 windows') blocks resident on one multiprocessor
  int tc_warps = 16;     // warps of a tensor-core block (kTcWarps: 16 at d <= 128, 8 at d 256)
  int simt_warps = 4;    // warps of a CUDA-core block (kDecodeWarps)
  int tile_tokens = 16;  // tokens of a tensor-core tile (kTileTokens)
  // BF16 window tokens a tensor-core block holds in one round (OSCAR_TC_WINDOW_BYTES / 4 d); 0: the
  // tensor-core kernel does not read the BF16 pages (or the pools are not 16-byte aligned).
  int tc_window_tokens = 0;
};

// Multiprocessors the split plan keeps free of tensor-core blocks for the BF16 windows' kernel
// (it runs beside them, started early by programmatic dependent launch): one in 32, 4 on an H100.
inline long long window_multiprocessors(long long sms) { return std::max(1LL, sms / 32); }

// The splits of each kernel: the SIMT kernel over all pages (path kSimt) or over the BF16 pages
// only, and the tensor-core kernel over the INT2 tiles.
struct SplitPlan {
  bool tensor_core = false;
  int simt_splits = 1, tc_splits = 0;
  // The BF16 windows' grid merges all splits (int2_cache.cu's MergeCount::in_windows), after a
  // dry pass of its merge where the windows should end well before the INT2 tiles.
  bool windows_merge = false, merge_dry_pass = false;
  // No BF16 windows' grid: the tensor-core blocks read the BF16 pages too (simt_splits 0) and the
  // last of each (sequence, KV head) merges by count.
  bool windows_in_tc = false;
  int total() const { return simt_splits + tc_splits; }
};

// Whether the BF16 windows' grid may merge: its merging blocks (one a (sequence, KV head)) wait
// for the INT2 grid to complete while resident, so the rule holds only where every windows block
// is resident beside the INT2 blocks at once (one INT2 wave, and the windows' blocks all in the
// slots it leaves, batch 1 and small batches): a waiting block then never holds a slot another
// windows block needs. Beyond, waiting blocks would fill the few free multiprocessors and stop
// the windows' waves beside the INT2 blocks (batch 8: 64 of them on 8 slots).
inline bool windows_fit_beside(const SplitPlan& plan, const DecodeShape& shape, long long blocks) {
  if (!plan.tensor_core) return false;
  const long long tc_sms = (plan.tc_splits * blocks + shape.tc_blocks - 1) / shape.tc_blocks;
  const long long free_slots = std::max(0LL, shape.multiprocessors - tc_sms) * shape.simt_blocks;
  return tc_sms <= shape.multiprocessors && plan.simt_splits * blocks <= free_slots;
}

inline SplitPlan plan_splits(const DecodeParams& p, const DecodeShape& shape) {
  SplitPlan plan;
  plan.tensor_core = p.path != DecodePath::kSimt;
  const long long blocks = std::max(1LL, static_cast<long long>(p.batch) * p.num_kv_heads);
  // Enough blocks for about four per multiprocessor, but at least two pages per warp.
  const long long wanted = (4LL * shape.multiprocessors + blocks - 1) / blocks;
  const long long pages = std::max(0, p.max_pages_per_sequence);
  if (p.num_splits > 0) {
    plan.simt_splits = p.num_splits;
    plan.tc_splits = plan.tensor_core ? p.num_splits : 0;
    plan.windows_merge = windows_fit_beside(plan, shape, blocks);
    return plan;
  }
  plan.simt_splits =
      static_cast<int>(std::max(1LL, std::min(wanted, pages / (2 * shape.simt_warps))));
  if (plan.tensor_core) {
    // Tensor-core blocks: exactly one wave of resident blocks over the whole batch (a partial
    // second wave would double the time of its blocks), but at least 4 tiles for each warp, and
    // some multiprocessors left to the BF16 windows' kernel: with a block on every
    // multiprocessor (few KV heads at batch 1) the windows waited for the INT2 blocks and then
    // ran on one block (1M tokens, one KV head: 64.9 us, the INT2 kernel alone 37.4 us).
    const long long sms = shape.multiprocessors;
    const long long tiles = (pages * p.page_size + shape.tile_tokens - 1) / shape.tile_tokens;
    const long long warps = shape.tc_warps;
    auto tc_splits_for = [&](long long window_sms) {
      const long long tc_slots = shape.tc_blocks * std::max(1LL, sms - window_sms);
      return std::max(1LL, std::min(std::max(1LL, tc_slots / blocks), tiles / (4 * warps)));
    };
    // The BF16 windows run beside it on the multiprocessors its blocks leave free: as many
    // splits (up to one page per warp; at G = 8 the two head-group warps share each page) as fit
    // there at once, since a second wave of these short, latency-bound blocks would outlast the
    // INT2 kernel at batch 1.
    const int group = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 1;
    const long long bf16_pages = p.max_bf16_pages_per_sequence > 0
                                     ? std::min<long long>(p.max_bf16_pages_per_sequence, pages)
                                     : pages;
    const long long page_warps = group > 4 ? shape.simt_warps / 2 : shape.simt_warps;
    // When they do not all fit there (batch 8 and more) they run in waves beside the INT2
    // blocks, one split each, if those waves end before the INT2 kernel: a page then costs a
    // windows warp about 1.5 x P / 4 INT2 tiles' time (H200, d 128, batch 8, 128K: 5 pages in
    // ~20 us against 256 tiles in ~165 us). Otherwise most of them wait for the INT2 blocks to
    // leave, and their last wave runs after the INT2 kernel: they are then cut into as many
    // splits as fit the whole GPU in one wave, so that wave is short (H200, batch 8, one split
    // of 20 pages: the windows ended 17 us after the INT2 kernel at 4K, 16 at 32K, 14 at 128K;
    // cut in 4: 31.1 -> 24.0, 66.9 -> 59.7, 186.4 -> 179.2 us; at d 256 and 128K, where the
    // waves end first, 328.0 against 335.6 cut). Their blocks hold 245 registers a thread (d
    // 128, G 4): two to a multiprocessor.
    auto simt_splits_for = [&](long long tc_splits) {
      const long long tc_sms = (tc_splits * blocks + shape.tc_blocks - 1) / shape.tc_blocks;
      const long long free_slots = std::max(0LL, sms - tc_sms) * shape.simt_blocks;
      const long long one_page_a_warp = (bf16_pages + page_warps - 1) / page_warps;
      if (free_slots >= blocks)
        return std::max(1LL, std::min(free_slots / blocks, one_page_a_warp));
      const long long tiles_per_warp = (tiles + tc_splits * warps - 1) / (tc_splits * warps);
      if (free_slots > 0) {
        const long long waves = (blocks + free_slots - 1) / free_slots;
        if (waves * one_page_a_warp * 3 * p.page_size <= 7 * tiles_per_warp) return 1LL;
      }
      return std::max(1LL, std::min(sms * shape.simt_blocks / blocks, one_page_a_warp));
    };
    // A BF16 window token costs a warp about as much as four INT2 tokens (a 16-token page four
    // tiles: latency-bound beside the INT2 stream; at G = 8 two n-tiles of scores per head
    // group): while the windows' warps have more to do than the INT2 warps, the windows get
    // twice the SMs, if that costs the INT2 kernel at most one split in eight of the first plan.
    // H200, batch 1, 32 q / 8 KV heads, d 128: 16K 24.9 -> 15.3 us (4 -> 16 SMs), 32K 25.3 ->
    // 18.0 (8 SMs), page 8 at 16K 28.5 -> 15.5; 128K, where the INT2 warps have 32 tiles each,
    // stays on 4 SMs (16 SMs measured 32.0 -> 35.3 us, page 8 on 8 SMs 33.5 -> 35.3); 64 q / 8
    // KV heads 16K 22.9 -> 18.8, 32K 23.5 -> 21.1. H100, 64 q / 8 KV heads: 32K 41.0 -> 26.2 us,
    // 128K 51.1 -> 42.9; one KV head at d 256 and 128K 34.2 -> 30.1; at 1M (64 tiles a warp)
    // widening measured 70.5 -> 78 us and is not chosen.
    // A windows warp's pages in INT2 tiles, and an INT2 warp's tiles.
    auto page_cost_for = [&](long long simt_splits) {
      const long long window_warps = simt_splits * page_warps;
      return (bf16_pages + window_warps - 1) / window_warps * p.page_size / 4;
    };
    auto tiles_per_warp_for = [&](long long tc_splits) {
      return (tiles + tc_splits * warps - 1) / (tc_splits * warps);
    };
    long long window_sms = window_multiprocessors(sms);
    long long tc_splits = tc_splits_for(window_sms);
    const long long first_tc_splits = tc_splits;
    for (int doubling = 0; doubling < 3; ++doubling) {
      const long long wider = tc_splits_for(2 * window_sms);
      if (page_cost_for(simt_splits_for(tc_splits)) < tiles_per_warp_for(tc_splits) ||
          8 * wider < 7 * first_tc_splits) {
        break;
      }
      window_sms *= 2;
      tc_splits = wider;
    }
    plan.tc_splits = static_cast<int>(tc_splits);
    plan.simt_splits = static_cast<int>(simt_splits_for(tc_splits));
    plan.windows_merge = windows_fit_beside(plan, shape, blocks);
    // The dry pass costs the merging windows block ~2 us (H200, d 128): it pays where the
    // windows' page cost is at most two thirds of the INT2 warps' tiles (batch 1: 64K 8 against
    // 18 tiles, 22.9 -> 21.6 us; 128K 20 against 32, 32.4 -> 31.1); at 4K-32K (4-8 against 4-9)
    // it delayed the call by 0.3-2.5 us.
    plan.merge_dry_pass = plan.windows_merge &&
                          3 * page_cost_for(plan.simt_splits) <= 2 * tiles_per_warp_for(tc_splits);
    // Where the windows' grid would merge (it fits beside the INT2 blocks: batch 1 and small
    // batches), one grid does it all if every tensor-core block's share of the BF16 pages fits its
    // window area in one round: its blocks then take the multiprocessors the windows had, and the
    // merge needs no wait for a grid's completion (see SplitPlan::windows_in_tc).
    if (plan.windows_merge && shape.tc_window_tokens > 0) {
      const long long all_splits = tc_splits_for(0);
      if ((all_splits * blocks + shape.tc_blocks - 1) / shape.tc_blocks <= sms &&
          (bf16_pages + all_splits - 1) / all_splits * p.page_size <= shape.tc_window_tokens) {
        plan.tc_splits = static_cast<int>(all_splits);
        plan.simt_splits = 0;
        plan.windows_in_tc = true;
        plan.windows_merge = plan.merge_dry_pass = false;
      }
    }
  }
  return plan;
}

}  // namespace oscar::kernels::decode_plan
