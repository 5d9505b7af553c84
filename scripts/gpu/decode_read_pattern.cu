// Reads what the tensor-core INT2 decode reads at 128K, batch 1 (Qwen3-8B-like: 8 KV heads, d 128,
// pages of 16 tokens: 75.5 MB of codes and scale/zero words in the cache's pool layout) with no
// arithmetic, to find how fast that access pattern can stream on the card: the decode's grid and
// copy ring (16 splits x 8 KV heads, 16 warps, a contiguous share of pages a warp, cp.async tiles
// as issue_tile makes them, page ids from a block table) at several ring depths, the same grid
// with tiles dealt out to the warps in turn, and a plain linear read of the same bytes. Each run is
// timed with events after a 256 MiB read that empties L2, as oscar-bench times the decode.
// Torch-free. Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a
// decode_read_pattern.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gpu_timing.cuh"

namespace {

constexpr int kHeads = 8, kPage = 16, kRowBytes = 32, kWarps = 16, kSplits = 16;
constexpr long kTokens = 131072, kPages = kTokens / kPage;
constexpr unsigned kPageBytes = kHeads * kPage * kRowBytes;  // one page of one code pool
constexpr unsigned kSzPageBytes = kHeads * kPage * 4;        // one page of scale/zero words

struct Tile {  // one page of one KV head, as the decode's ring slot holds it
  std::uint8_t k[kPage][kRowBytes];
  std::uint8_t v[kPage][kRowBytes];
  std::uint32_t ksz[kPage], vsz[kPage];
};

struct Pools {
  const std::uint8_t *k_codes, *v_codes;
  const std::uint32_t *k_sz, *v_sz;
  const int* table;
  const int* length;
};

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void copy16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void copy16_if(bool on, unsigned dst, const void* src) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.cg.shared.global [%0], [%1], 16;\n"
      "}" ::"r"(dst),
      "l"(src), "r"(static_cast<int>(on)));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// The copies of page `page` of head `head` into `slot`: a 16-byte chunk of each code pool a lane,
// and lanes 0-7 a chunk of scale/zero words (0-3 keys, 4-7 values), as issue_tile.
__device__ __forceinline__ void issue(const Pools& p, int page, int head, int lane, unsigned slot) {
  const unsigned at = static_cast<unsigned>(head * kPage * kRowBytes + lane * 16);
  copy16(slot + offsetof(Tile, k) + lane * 16, p.k_codes + std::uint64_t(page) * kPageBytes + at);
  copy16(slot + offsetof(Tile, v) + lane * 16, p.v_codes + std::uint64_t(page) * kPageBytes + at);
  const int row = 4 * (lane & 3);
  const std::uint32_t* sz =
      (lane < 4 ? p.k_sz : p.v_sz) + std::uint64_t(page) * (kSzPageBytes / 4) + head * kPage + row;
  copy16_if(lane < 8, slot + (lane < 4 ? offsetof(Tile, ksz) : offsetof(Tile, vsz)) + 4 * row, sz);
}

// A warp's tiles in the decode's grid: a contiguous share of its split's (strided: the split's
// tiles dealt to the warps in turn), and their page ids, lane j holding tile j's (shares of at most
// 64 tiles: two loads).
struct WarpTiles {
  int count, id0, id1;
  __device__ int page_of(int i) const {
    return __shfl_sync(0xffffffffu, i < 32 ? id0 : id1, i & 31);
  }
};
__device__ WarpTiles warp_tiles(const Pools& p, int split, int warp, bool strided, int lane) {
  const int tiles = (*p.length + kPage - 1) / kPage;
  const int per_split = (tiles + kSplits - 1) / kSplits;
  const int split_begin = split * per_split, split_end = min(tiles, split_begin + per_split);
  const int per_warp = (max(0, split_end - split_begin) + kWarps - 1) / kWarps;
  const int first = strided ? split_begin + warp : split_begin + warp * per_warp;
  const int stride = strided ? kWarps : 1;
  WarpTiles w;
  w.count = strided ? max(0, (split_end - first + kWarps - 1) / kWarps)
                    : max(0, min(split_end, first + per_warp) - first);
  w.id0 = lane < w.count ? p.table[first + lane * stride] : 0;
  w.id1 = lane + 32 < w.count ? p.table[first + (lane + 32) * stride] : 0;
  return w;
}

// Bulk copies (cp.async.bulk, the copy engine Hopper's TMA drives): a tile's four contiguous
// pieces (its K and V codes, 512 bytes each, and its 64-byte K and V scale/zero runs), issued by
// one lane against the ring slot's mbarrier, on whose phase every lane then waits.
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes,
                                          unsigned barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(barrier)
      : "memory");
}
__device__ __forceinline__ void expect_bytes(unsigned barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void wait_phase(unsigned barrier, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait;\n}" ::"r"(barrier),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void issue_bulk(const Pools& p, int page, int head, unsigned slot,
                                           unsigned barrier) {
  const std::uint64_t codes = std::uint64_t(page) * kPageBytes + head * kPage * kRowBytes;
  const std::uint64_t sz = std::uint64_t(page) * (kSzPageBytes / 4) + head * kPage;
  expect_bytes(barrier, unsigned(sizeof(Tile)));
  bulk_copy(slot + offsetof(Tile, k), p.k_codes + codes, kPage * kRowBytes, barrier);
  bulk_copy(slot + offsetof(Tile, v), p.v_codes + codes, kPage * kRowBytes, barrier);
  bulk_copy(slot + offsetof(Tile, ksz), p.k_sz + sz, kPage * 4, barrier);
  bulk_copy(slot + offsetof(Tile, vsz), p.v_sz + sz, kPage * 4, barrier);
}
static_assert(sizeof(Tile) == 2 * kPage * kRowBytes + 2 * kPage * 4, "a tile is its four pieces");

// The decode's grid: block (split, head), each warp a contiguous share of the split's pages
// (kStrided: the split's pages dealt to the warps in turn), NS ring slots a warp with NS - 2 in
// flight, as decode_int2_tc_kernel keeps them; the tiles copied as issue_tile copies them, by
// every lane, or (kBulk) by bulk copies (the mbarriers, 8 bytes a slot, after all warps' rings).
template <int NS, bool kStrided, bool kBulk = false>
__global__ void __launch_bounds__(kWarps * 32, 1) decode_read(Pools p, unsigned* sink) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int split = blockIdx.x, head = blockIdx.y;
  Tile* ring = reinterpret_cast<Tile*>(smem) + warp * NS;
  const unsigned ring_at = shared_address(ring);
  const WarpTiles mine = warp_tiles(p, split, warp, kStrided, lane);
  const int count = mine.count;
  auto page_of = [&](int i) { return mine.page_of(i); };
  const unsigned barriers =
      shared_address(smem + sizeof(Tile) * NS * kWarps) + unsigned(8 * NS * warp);
  auto slot_of = [&](int i) { return ring_at + (i % NS) * unsigned(sizeof(Tile)); };
  if (kBulk) {
    if (lane == 0) {
      for (int s = 0; s < NS; ++s) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(barriers + 8 * s) : "memory");
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
  }
  auto fetch = [&](int i) {  // tile i into its slot (every lane calls it)
    const int page = page_of(i);
    if (!kBulk) {
      issue(p, page, head, lane, slot_of(i));
    } else if (lane == 0) {
      issue_bulk(p, page, head, slot_of(i), barriers + 8 * (i % NS));
    }
  };
#pragma unroll
  for (int s = 0; s < NS - 2; ++s) {
    if (s < count) fetch(s);
    if (!kBulk) commit();
  }
  unsigned acc = 0;
  for (int i = 0; i < count; ++i) {
    // Tile i lands; the slot of tile i - 2 (read two steps ago, as the decode's ring keeps two
    // slots computed on) takes the tile NS - 2 ahead.
    if (kBulk) {
      wait_phase(barriers + 8 * (i % NS), unsigned(i / NS) & 1u);
    } else {
      wait_groups<NS - 3>();
    }
    __syncwarp();
    if (i + NS - 2 < count) fetch(i + NS - 2);
    if (!kBulk) commit();
    const Tile& t = ring[i % NS];
    acc ^= reinterpret_cast<const unsigned*>(t.k)[lane] +
           reinterpret_cast<const unsigned*>(t.v)[lane] + t.ksz[lane & 15] + t.vsz[lane & 15];
  }
  if (!kBulk) wait_groups<0>();
  for (int off = 16; off > 0; off >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) sink[(blockIdx.y * gridDim.x + blockIdx.x) * kWarps + warp] = acc;
}

// The same bytes as one array are read by linear_read (gpu_timing.cuh), also the untimed read that
// empties L2 before each timed run.

// The decode's grid doing only what precedes its first copies: the length and one table line.
__global__ void __launch_bounds__(kWarps * 32, 1) start_only(Pools p, unsigned* sink) {
  const int lane = threadIdx.x & 31;
  const int tiles = *p.length / kPage;
  const int id = p.table[(blockIdx.x * kWarps + (threadIdx.x >> 5)) * (tiles / 256) + lane];
  if (id == -7) sink[0] = id;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 30;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  // Copy bandwidth as oscar-bench measures it: 2 GiB device to device, read + write.
  const double copy_gbs = copy_bandwidth_gbs(std::size_t{2} << 30);
  const std::size_t code_bytes = std::size_t(kPages) * kPageBytes;
  const std::size_t sz_bytes = std::size_t(kPages) * kSzPageBytes;
  const double bytes = 2.0 * (code_bytes + sz_bytes);
  std::uint8_t *k_codes = nullptr, *v_codes = nullptr;
  std::uint32_t *k_sz = nullptr, *v_sz = nullptr;
  int *table = nullptr, *length = nullptr;
  unsigned* sink = nullptr;
  uint4* flush = nullptr;
  uint4* linear = nullptr;
  const long flush_n = (256L << 20) / 16;
  CK(cudaMalloc(&k_codes, code_bytes));
  CK(cudaMalloc(&v_codes, code_bytes));
  CK(cudaMalloc(&k_sz, sz_bytes));
  CK(cudaMalloc(&v_sz, sz_bytes));
  CK(cudaMalloc(&table, kPages * sizeof(int)));
  CK(cudaMalloc(&length, sizeof(int)));
  CK(cudaMalloc(&sink, 1 << 20));
  CK(cudaMalloc(&flush, flush_n * 16));
  CK(cudaMalloc(&linear, std::size_t(bytes)));
  CK(cudaMemset(k_codes, 0x1b, code_bytes));
  CK(cudaMemset(v_codes, 0x2c, code_bytes));
  CK(cudaMemset(k_sz, 0x3d, sz_bytes));
  CK(cudaMemset(v_sz, 0x4e, sz_bytes));
  CK(cudaMemset(flush, 0, flush_n * 16));
  CK(cudaMemset(linear, 5, std::size_t(bytes)));
  std::vector<int> ids(kPages);
  for (long i = 0; i < kPages; ++i) ids[i] = static_cast<int>(i);  // as oscar-bench lays pages out
  CK(cudaMemcpy(table, ids.data(), kPages * sizeof(int), cudaMemcpyHostToDevice));
  const int len = static_cast<int>(kTokens);
  CK(cudaMemcpy(length, &len, sizeof(int), cudaMemcpyHostToDevice));
  const Pools pools{k_codes, v_codes, k_sz, v_sz, table, length};

  std::printf("%s, %d multiprocessors; copy %.0f GB/s; %.1f MB read, %.1f us at copy speed\n",
              prop.name, sms, copy_gbs, bytes / 1e6, bytes / copy_gbs / 1e3);
  // Median over iters runs of launch(), each after the L2 flush (not timed).
  auto run = [&](auto launch) {
    const double us =
        median_us(launch, iters, [&] { linear_read<<<sms * 4, 512>>>(flush, flush_n, sink); });
    CK(cudaGetLastError());
    return us;
  };
  const dim3 grid(kSplits, kHeads);
  auto decode = [&](auto kernel, int stages) {
    const int smem = (static_cast<int>(sizeof(Tile)) + 8) * stages * kWarps;  // ring, mbarriers
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return run([&] { kernel<<<grid, kWarps * 32, smem>>>(pools, sink); });
  };
  auto report = [&](const char* name, double us) {
    std::printf("  %-44s %7.2f us  %6.0f GB/s  %5.1f%% of copy\n", name, us, bytes / (us * 1e3),
                100.0 * bytes / (us * 1e3) / copy_gbs);
  };
  for (int round = 0; round < 3; ++round) {
    std::printf("round %d\n", round + 1);
    std::printf("  %-44s %7.2f us\n", "start only (length, a table line)",
                run([&] { start_only<<<grid, kWarps * 32>>>(pools, sink); }));
    report("decode grid, ring 4 (2 tiles in flight)", decode(decode_read<4, false>, 4));
    report("decode grid, ring 6 (4 in flight)", decode(decode_read<6, false>, 6));
    report("decode grid, ring 8 (6 in flight)", decode(decode_read<8, false>, 8));
    report("decode grid, ring 4, tiles dealt in turn", decode(decode_read<4, true>, 4));
    report("decode grid, ring 5, tiles dealt in turn", decode(decode_read<5, true>, 5));
    report("decode grid, ring 6, tiles dealt in turn", decode(decode_read<6, true>, 6));
    report("decode grid, ring 8, tiles dealt in turn", decode(decode_read<8, true>, 8));
    report("decode grid, bulk copies, ring 4", decode(decode_read<4, false, true>, 4));
    report("decode grid, bulk copies, ring 6", decode(decode_read<6, false, true>, 6));
    report("decode grid, bulk copies, ring 8", decode(decode_read<8, false, true>, 8));
    const long n = static_cast<long>(bytes / 16);
    for (const int blocks : {sms, 2 * sms, 4 * sms}) {
      char name[64];
      std::snprintf(name, sizeof name, "linear, %d blocks of 512, 8 loads in flight", blocks);
      report(name, run([&] { linear_read<<<blocks, 512>>>(linear, n, sink); }));
    }
  }
  return 0;
}
