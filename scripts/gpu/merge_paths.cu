// How long the split-KV merge's hand-over costs on the card, apart from the decode: a grid shaped
// like the tensor-core decode at 128K, batch 1 (16 splits x 8 KV heads, one 512-thread block a
// multiprocessor) streams 75.5 MB, each block writes a partial result of 4 heads x 128 floats, and
// the partial results of each KV head are summed into an output by one of five paths, timed as
// oscar-bench times the decode (events, L2 emptied by a 256 MiB read before each run):
//   none     no merge (the floor: the stream, the partial writes, the call's end);
//   pdl      a second grid of 8 blocks, a programmatic dependent started early on the free
//            multiprocessors, merges after griddepcontrol.wait (the decode's windows merge; its
//            blocks have 128 threads, as the windows' do, so each sums 4 columns in turn, where
//            the count path's block of 512 sums one);
//   pdl 512  the same with blocks of 512 threads, a column each (the merge as short as the
//            count's, so that the difference is the wait);
//   count    the last block of each KV head to count itself (acquire-release increment) merges;
//   cluster  the 16 splits of a KV head form a thread block cluster, the partial results stay in
//            shared memory and each block sums a sixteenth of the columns from all 16 (DSMEM);
//   pdl+clu  the cluster merge, and a dependent grid that only waits (griddepcontrol.wait) in one
//            block, as a windows grid launched beside it would have to.
// It also prints how many clusters of 2..16 such blocks the card holds at once (one wave needs 8
// of 16). Torch-free. Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a
// merge_paths.cu
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "gpu_timing.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kHeads = 8, kSplits = 16, kThreads = 512, kColumns = 512;  // 4 heads x d 128
constexpr long kBytes = 131072L * kHeads * 72;                           // the decode's 75.5 MB
constexpr int kSmem = 120 << 10;  // dynamic shared memory: one block a multiprocessor

enum Mode { kNone, kPdl, kPdlWide, kCount, kCluster, kPdlCluster };

__device__ __forceinline__ void allow_dependents() {
  asm volatile("griddepcontrol.launch_dependents;");
}
__device__ __forceinline__ void wait_prerequisites() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// The block's share of the stream, folded into one value.
__device__ float stream_share(const uint4* data, long per_block) {
  const long block = long(blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned acc = fold_read(data + block * per_block, per_block, threadIdx.x, kThreads);
  return float(acc & 0xffu) * 1e-3f + float(blockIdx.x);
}

template <Mode kMode>
__global__ void __launch_bounds__(kThreads, 1)
    split_grid(const uint4* data, long per_block, float* part, float* out, unsigned* counters) {
  extern __shared__ float smem[];
  allow_dependents();
  const int split = blockIdx.x, head = blockIdx.y, t = threadIdx.x;
  const float v = stream_share(data, per_block);
  if constexpr (kMode == kCluster || kMode == kPdlCluster) {
    cg::cluster_group cluster = cg::this_cluster();
    smem[t] = v;
    cluster.sync();  // every block's partial result in its shared memory
    constexpr int kSlice = kColumns / kSplits;
    const int rank = static_cast<int>(cluster.block_rank());
    if (t < kSlice) {
      const int column = rank * kSlice + t;
      float sum = 0.0f;
#pragma unroll
      for (int s = 0; s < kSplits; ++s) sum += cluster.map_shared_rank(smem, s)[column];
      out[head * kColumns + column] = sum;
    }
    cluster.sync();  // no block leaves while another reads its shared memory
    return;
  }
  part[(head * kSplits + split) * kColumns + t] = v;
  if constexpr (kMode == kCount) {
    __shared__ bool last;
    __syncthreads();
    if (t == 0) {
      unsigned before;
      asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;"
                   : "=r"(before)
                   : "l"(counters + head), "r"(unsigned(kSplits - 1))
                   : "memory");
      last = before == unsigned(kSplits - 1);
    }
    __syncthreads();
    if (!last) return;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < kSplits; ++s) sum += __ldcg(part + (head * kSplits + s) * kColumns + t);
    out[head * kColumns + t] = sum;
  }
}

// The dependent grid: 8 blocks of 128 threads (pdl 512: 512); merge: each sums its KV head's
// partial results after the wait; otherwise block 0 only waits.
__global__ void __launch_bounds__(kColumns)
    dependent_grid(const float* part, float* out, bool merge) {
  if (!merge) {
    if (blockIdx.x == 0) wait_prerequisites();
    return;
  }
  wait_prerequisites();
  const int head = blockIdx.x;
  for (int c = threadIdx.x; c < kColumns; c += blockDim.x) {
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < kSplits; ++s) sum += __ldcg(part + (head * kSplits + s) * kColumns + c);
    out[head * kColumns + c] = sum;
  }
}

template <Mode kMode>
cudaLaunchConfig_t grid_config(cudaLaunchAttribute* attributes) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(kSplits, kHeads);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.attrs = attributes;
  config.numAttrs = 0;
  if (kMode == kCluster || kMode == kPdlCluster) {
    attributes[0].id = cudaLaunchAttributeClusterDimension;
    attributes[0].val.clusterDim.x = kSplits;
    attributes[0].val.clusterDim.y = 1;
    attributes[0].val.clusterDim.z = 1;
    config.numAttrs = 1;
  }
  return config;
}

template <Mode kMode>
void prepare() {
  CK(cudaFuncSetAttribute(split_grid<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  if (kMode == kCluster || kMode == kPdlCluster) {
    CK(cudaFuncSetAttribute(split_grid<kMode>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
}

template <Mode kMode>
void launch(const uint4* data, long per_block, float* part, float* out, unsigned* counters) {
  cudaLaunchAttribute attributes[1];
  const cudaLaunchConfig_t config = grid_config<kMode>(attributes);
  CK(cudaLaunchKernelEx(&config, split_grid<kMode>, data, per_block, part, out, counters));
  if (kMode == kPdl || kMode == kPdlWide || kMode == kPdlCluster) {
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t dependent{};
    dependent.gridDim = dim3(kHeads);
    dependent.blockDim = dim3(kMode == kPdlWide ? kColumns : 128);
    dependent.attrs = &pdl;
    dependent.numAttrs = 1;
    CK(cudaLaunchKernelEx(&dependent, dependent_grid, static_cast<const float*>(part), out,
                          kMode != kPdlCluster));
  }
}

// Calls f(path, name) for each path in the order of the timing table (path: the Mode as a type).
template <class F>
void for_each_path(F&& f) {
  f(std::integral_constant<Mode, kNone>{}, "none (stream and partial writes only)");
  f(std::integral_constant<Mode, kPdl>{}, "pdl (dependent grid merges after its wait)");
  f(std::integral_constant<Mode, kPdlWide>{}, "pdl 512 (the same, a column a thread)");
  f(std::integral_constant<Mode, kCount>{}, "count (last block of a KV head merges)");
  f(std::integral_constant<Mode, kCluster>{}, "cluster (16 splits a cluster, DSMEM)");
  f(std::integral_constant<Mode, kPdlCluster>{},
    "pdl+clu (cluster merge, dependent waits in one block)");
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d multiprocessors\n", prop.name, prop.multiProcessorCount);

  for_each_path([](auto path, const char*) { prepare<decltype(path)::value>(); });
  std::printf("clusters of 512-thread blocks with %d KB of shared memory held at once:",
              kSmem >> 10);
  for (int size : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t config{};
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = size;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.gridDim = dim3(size * 16);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kSmem;
    config.attrs = &cluster;
    config.numAttrs = 1;
    int clusters = 0;
    CK(cudaOccupancyMaxActiveClusters(&clusters, split_grid<kCluster>, &config));
    std::printf("  size %d: %d", size, clusters);
  }
  std::printf("\n");

  const long n = kBytes / 16, per_block = n / (kSplits * kHeads);
  const long flush_n = (256L << 20) / 16;
  uint4 *data = nullptr, *flush = nullptr;
  float *part = nullptr, *out = nullptr;
  unsigned *counters = nullptr, *sink = nullptr;
  CK(cudaMalloc(&data, kBytes));
  CK(cudaMalloc(&flush, flush_n * 16));
  CK(cudaMalloc(&part, sizeof(float) * kHeads * kSplits * kColumns));
  CK(cudaMalloc(&out, sizeof(float) * kHeads * kColumns));
  CK(cudaMalloc(&counters, sizeof(unsigned) * kHeads));
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  CK(cudaMemset(data, 1, kBytes));
  CK(cudaMemset(flush, 2, flush_n * 16));
  CK(cudaMemset(counters, 0, sizeof(unsigned) * kHeads));
  const int sms = prop.multiProcessorCount;
  auto empty_l2 = [&] { linear_read<<<sms * 4, 512>>>(flush, flush_n, sink); };

  // The expected output (every path sums the same partial results) checks each path once.
  float expected[kColumns];
  auto check_output = [&](const char* name) {
    static float host[kHeads * kColumns];
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost));
    for (int c = 0; c < kColumns; ++c) {
      if (host[c] != expected[c]) {
        std::printf("%s: output column %d is %g, expected %g\n", name, c, host[c], expected[c]);
        std::exit(1);
      }
    }
  };
  launch<kCount>(data, per_block, part, out, counters);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(expected, out, sizeof(expected), cudaMemcpyDeviceToHost));
  for_each_path([&](auto path, const char* name) {
    constexpr Mode kMode = decltype(path)::value;
    // The merging paths but the count (the reference) and pdl+clu (the cluster merge again).
    if constexpr (kMode != kNone && kMode != kCount && kMode != kPdlCluster) {
      CK(cudaMemset(out, 0, sizeof(float) * kHeads * kColumns));
      launch<kMode>(data, per_block, part, out, counters);
      check_output(name);
    }
  });

  for (int round = 1; round <= rounds; ++round) {
    std::printf("round %d\n", round);
    for_each_path([&](auto path, const char* name) {
      const double us =
          median_us([&] { launch<decltype(path)::value>(data, per_block, part, out, counters); },
                    30, empty_l2);
      std::printf("  %-48s %7.2f us\n", name, us);
    });
  }
  return 0;
}
