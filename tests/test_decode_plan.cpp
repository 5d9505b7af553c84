// The split plan of decode_attention (kernels/src/decode_plan.h) on the CPU: the splits it gives
// each decode kernel for the shapes the results page measured, on a device of 132
// multiprocessors with the blocks a multiprocessor holds of each kernel (from the sm_90a register
// counts in kernels/resources-sm90a.txt), so that a change of its rules is seen here first.
#include <gtest/gtest.h>

#include "decode_plan.h"

namespace {

using oscar::kernels::DecodeParams;
using oscar::kernels::DecodePath;
using oscar::kernels::decode_plan::DecodeShape;
using oscar::kernels::decode_plan::plan_splits;
using oscar::kernels::decode_plan::SplitPlan;

// A call over `context` tokens a sequence with a BF16 sink of 64 and a recent window of 256
// tokens (20 pages of 16), as oscar-bench's.
DecodeParams call(int batch, int q_heads, int kv_heads, int head_dim, int context,
                  int page_size = 16) {
  DecodeParams p;
  p.batch = batch;
  p.num_q_heads = q_heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.page_size = page_size;
  p.max_pages_per_sequence = context / page_size;
  p.max_bf16_pages_per_sequence = (64 + 256) / page_size;
  return p;
}

// 132 multiprocessors (H100 SXM, H200). Tensor-core blocks: one a multiprocessor (121 registers
// x 512 threads at d 128; 158 x 256 at d 256). CUDA-core blocks of the BF16 windows: two (245
// registers x 128 threads at d 128 and G 4 or 8; 255 at d 256).
DecodeShape hopper(int head_dim) {
  DecodeShape shape;
  shape.multiprocessors = 132;
  shape.tc_blocks = 1;
  shape.simt_blocks = 2;
  shape.tc_warps = head_dim >= 256 ? 8 : 16;
  return shape;
}

void expect_plan(const DecodeParams& p, int tc_splits, int simt_splits) {
  const SplitPlan plan = plan_splits(p, hopper(p.head_dim));
  EXPECT_TRUE(plan.tensor_core);
  EXPECT_EQ(plan.tc_splits, tc_splits);
  EXPECT_EQ(plan.simt_splits, simt_splits);
  EXPECT_EQ(plan.total(), tc_splits + simt_splits);
}

bool windows_merge(const DecodeParams& p) {
  return plan_splits(p, hopper(p.head_dim)).windows_merge;
}

TEST(DecodePlan, TheWindowsGridMergesOnlyWhereAllItsBlocksRunBesideTheInt2Blocks) {
  // Batch 1: 128 INT2 blocks and 8 windows blocks on the 4 SMs left (8 slots); 16K: 112 INT2
  // blocks, 40 windows blocks in 40 of the 40 slots left.
  EXPECT_TRUE(windows_merge(call(1, 32, 8, 128, 131072)));
  EXPECT_TRUE(windows_merge(call(1, 32, 8, 128, 16384)));
  EXPECT_TRUE(windows_merge(call(1, 32, 8, 128, 4096)));
  // Batch 8 (256 windows blocks, 8 slots beside) and batch 32 (two INT2 waves): the last blocks
  // of either kernel merge.
  EXPECT_FALSE(windows_merge(call(8, 32, 8, 128, 131072)));
  EXPECT_FALSE(windows_merge(call(8, 32, 8, 256, 131072)));
  EXPECT_FALSE(windows_merge(call(32, 32, 8, 128, 131072)));
  // Its dry pass only where the windows end well before the INT2 tiles: 128K (5 pages a windows
  // warp, 32 tiles an INT2 warp) and 64K (2 pages, 18 tiles), not 32K (2 pages on 8 SMs, 9
  // tiles).
  EXPECT_TRUE(plan_splits(call(1, 32, 8, 128, 131072), hopper(128)).merge_dry_pass);
  EXPECT_TRUE(plan_splits(call(1, 32, 8, 128, 65536), hopper(128)).merge_dry_pass);
  EXPECT_FALSE(plan_splits(call(1, 32, 8, 128, 32768), hopper(128)).merge_dry_pass);
  EXPECT_FALSE(plan_splits(call(1, 32, 8, 128, 4096), hopper(128)).merge_dry_pass);
  // The CUDA-core path has no windows grid.
  DecodeParams simt = call(1, 32, 8, 128, 131072);
  simt.path = DecodePath::kSimt;
  EXPECT_FALSE(windows_merge(simt));
}

TEST(DecodePlan, BatchOneGivesTheWindowsMoreMultiprocessorsWhileTheirPagesAreTheLongerPath) {
  // 128K: the INT2 warps' 32 tiles each outweigh the windows' 5 pages: windows on 4 SMs.
  expect_plan(call(1, 32, 8, 128, 131072), 16, 1);
  // 16K: the windows widened to 16 SMs (INT2 splits 16 -> 14), one page a warp.
  expect_plan(call(1, 32, 8, 128, 16384), 14, 5);
}

TEST(DecodePlan, WindowsThatCannotRunBesideAreCutIntoOneWaveOfTheWholeGpu) {
  // Batch 8 at d 128: 64 (sequence, KV head) blocks, 8 slots beside the INT2 blocks; their
  // waves would outlast the INT2 kernel, so 4 splits (256 blocks, 264 slots).
  expect_plan(call(8, 32, 8, 128, 4096), 2, 4);
  expect_plan(call(8, 32, 8, 128, 131072), 2, 4);
  // Page 8 and GQA 8 likewise.
  expect_plan(call(8, 32, 8, 128, 131072, 8), 2, 4);
  expect_plan(call(8, 64, 8, 128, 131072), 2, 4);
  // One KV head (G 8) at batch 32: 32 blocks of 10 pages a warp pair; 8 splits fill the GPU.
  expect_plan(call(32, 8, 1, 128, 131072), 4, 8);
}

TEST(DecodePlan, WindowsWhoseWavesEndFirstKeepOneSplit) {
  // d 256, batch 8, 128K: 512 tiles a warp, the windows' 8 waves of 5 pages end first.
  expect_plan(call(8, 32, 8, 256, 131072), 2, 1);
  // At 4K the INT2 warps have 16 tiles: cut.
  expect_plan(call(8, 32, 8, 256, 4096), 2, 4);
}

TEST(DecodePlan, BlocksBeyondOneWaveOfTheGpuKeepOneSplitEach) {
  // Batch 32 at d 128: 256 blocks already fill the GPU's 264 slots.
  expect_plan(call(32, 32, 8, 128, 131072), 1, 1);
  expect_plan(call(32, 32, 8, 128, 4096), 1, 1);
}

// The tensor-core kernel built to read the BF16 windows itself (32 KiB of rows a block: 64 tokens
// at d 128, 32 at d 256).
DecodeShape hopper_reading_windows(int head_dim) {
  DecodeShape shape = hopper(head_dim);
  shape.tc_window_tokens = 32768 / (4 * head_dim);
  return shape;
}

TEST(DecodePlan, OneGridReadsTheWindowsWhereTheirGridWouldMergeAndEveryBlocksShareFits) {
  // Batch 1, 128K and 16K: 16 INT2 splits a KV head on all 132 SMs (16K: not the 14 the windows'
  // grid would leave), 20 BF16 pages over 16 blocks (2 pages, 32 tokens a block), no windows grid.
  for (const int context : {131072, 16384}) {
    const SplitPlan plan = plan_splits(call(1, 32, 8, 128, context), hopper_reading_windows(128));
    EXPECT_TRUE(plan.windows_in_tc) << context;
    EXPECT_EQ(plan.tc_splits, 16) << context;
    EXPECT_EQ(plan.simt_splits, 0) << context;
    EXPECT_EQ(plan.total(), 16) << context;
    EXPECT_FALSE(plan.windows_merge) << context;
    EXPECT_FALSE(plan.merge_dry_pass) << context;
  }
  // 4K: 4 INT2 splits, 5 pages (80 tokens) a block: more than a round; the windows' grid stays.
  SplitPlan plan = plan_splits(call(1, 32, 8, 128, 4096), hopper_reading_windows(128));
  EXPECT_FALSE(plan.windows_in_tc);
  EXPECT_TRUE(plan.windows_merge);
  EXPECT_GE(plan.simt_splits, 1);
  // Batch 8: the windows' grid does not merge there, and keeps its blocks.
  plan = plan_splits(call(8, 32, 8, 128, 131072), hopper_reading_windows(128));
  EXPECT_FALSE(plan.windows_in_tc);
  EXPECT_EQ(plan.simt_splits, 4);
  // One KV head at d 256: 132 splits, one page (16 of the 32 tokens) at most a block.
  plan = plan_splits(call(1, 8, 1, 256, 131072), hopper_reading_windows(256));
  EXPECT_TRUE(plan.windows_in_tc);
  EXPECT_EQ(plan.tc_splits, 132);
  // Without the kernel's window area (or with unaligned BF16 pools) nothing changes.
  EXPECT_FALSE(plan_splits(call(1, 32, 8, 128, 131072), hopper(128)).windows_in_tc);
  // Forced splits keep both kernels.
  DecodeParams forced = call(1, 32, 8, 128, 131072);
  forced.num_splits = 3;
  EXPECT_FALSE(plan_splits(forced, hopper_reading_windows(128)).windows_in_tc);
}

TEST(DecodePlan, ForcedSplitsAndTheCudaCorePath) {
  DecodeParams p = call(1, 32, 8, 128, 131072);
  p.num_splits = 3;
  SplitPlan plan = plan_splits(p, hopper(128));
  EXPECT_EQ(plan.tc_splits, 3);
  EXPECT_EQ(plan.simt_splits, 3);
  // The CUDA-core path over every page: about four blocks a multiprocessor (132 * 4 / 8 = 66),
  // at least two pages a warp.
  p.num_splits = 0;
  p.path = DecodePath::kSimt;
  plan = plan_splits(p, hopper(128));
  EXPECT_FALSE(plan.tensor_core);
  EXPECT_EQ(plan.tc_splits, 0);
  EXPECT_EQ(plan.simt_splits, 66);
  p.max_pages_per_sequence = 20;  // 20 pages: two a warp of 4 warps -> 2 splits
  EXPECT_EQ(plan_splits(p, hopper(128)).simt_splits, 2);
}

TEST(DecodePlan, EmptyHistoryStillPlansOneSplitEach) {
  DecodeParams p = call(1, 32, 8, 128, 0);
  p.max_bf16_pages_per_sequence = 0;
  const SplitPlan plan = plan_splits(p, hopper(128));
  EXPECT_GE(plan.tc_splits, 1);
  EXPECT_GE(plan.simt_splits, 1);
}

}  // namespace
