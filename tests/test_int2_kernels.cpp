// INT2 cache kernels vs the plain C++ reference: store and demotion bit for bit, decode attention
// within a stated tolerance over odd lengths, mixed batches, window extremes and GQA ratios.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "oscar/int2_cache_reference.h"
#include "oscar/kernels/cuda_check.h"
#include "oscar/kernels/int2_cache.h"

namespace {

using namespace oscar::kernels;
namespace ref = oscar::int2;

// Decode output vs the float64 reference over the same (dequantized) cache, relative to the largest
// output magnitude: the kernel rounds its output to bf16 (<= 2^-9 = 0.002 relative) and accumulates
// in float32 with exp2f (~1e-6); 0.008 leaves 4x margin over the rounding.
constexpr double kDecodeTol = 8e-3;
// Rotated rows on the GPU (fused multiply-adds, any order) vs the reference (plain float32 sums)
// differ by float32 rounding before the bf16 rounding, so a value may land on the neighbouring
// bf16: one bf16 step, 2^-7 relative to the row's largest magnitude.
constexpr double kRotateTol = 1.0 / 128.0;

bool have_gpu() { return cuda_device_count() > 0; }

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  std::size_t count = 0;
  explicit DeviceBuffer(const std::vector<T>& host) : count(host.size()) {
    EXPECT_EQ(
        cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(1, count) * sizeof(T)),
        cudaSuccess);
    if (count > 0) cudaMemcpy(ptr, host.data(), count * sizeof(T), cudaMemcpyHostToDevice);
  }
  explicit DeviceBuffer(std::size_t n) : count(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(1, n) * sizeof(T)),
              cudaSuccess);
    cudaMemset(ptr, 0, std::max<std::size_t>(1, n) * sizeof(T));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> download() const {
    std::vector<T> host(count);
    if (count > 0) cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
};

// What a store wrote into its six pools (keys [0] and values [1]: BF16 rows, INT2 codes, bf16
// scale / zero pairs), brought back to the host.
struct StoredPools {
  std::vector<std::uint16_t> bf16[2], scale_zero[2];
  std::vector<std::uint8_t> codes[2];
};

// A store's six pools on the device, zeroed, for pool_rows rows of d elements each.
struct StorePools {
  DeviceBuffer<std::uint16_t> bf16[2], scale_zero[2];
  DeviceBuffer<std::uint8_t> codes[2];
  StorePools(std::size_t pool_rows, int d)
      : bf16{DeviceBuffer<std::uint16_t>(pool_rows * d),
             DeviceBuffer<std::uint16_t>(pool_rows * d)},
        scale_zero{DeviceBuffer<std::uint16_t>(pool_rows * 2),
                   DeviceBuffer<std::uint16_t>(pool_rows * 2)},
        codes{DeviceBuffer<std::uint8_t>(pool_rows * d / 4),
              DeviceBuffer<std::uint8_t>(pool_rows * d / 4)} {}
  // Points the store's pool pointers here.
  void wire(oscar::kernels::StoreKvParams& p) const {
    p.k_bf16 = bf16[0].ptr;
    p.v_bf16 = bf16[1].ptr;
    p.k_codes = codes[0].ptr;
    p.v_codes = codes[1].ptr;
    p.k_scale_zero = scale_zero[0].ptr;
    p.v_scale_zero = scale_zero[1].ptr;
  }
  StoredPools download() const {
    StoredPools out;
    for (int side = 0; side < 2; ++side) {
      out.bf16[side] = bf16[side].download();
      out.codes[side] = codes[side].download();
      out.scale_zero[side] = scale_zero[side].download();
    }
    return out;
  }
};

// A store of `tokens` rows of k and v per KV head with its shape and clip ratios set (no
// rotations, slots or pools yet).
oscar::kernels::StoreKvParams store_params(std::int64_t tokens, int heads, int d, int page_size,
                                           const std::uint16_t* k, const std::uint16_t* v,
                                           const float* k_clip, const float* v_clip) {
  oscar::kernels::StoreKvParams p;
  p.num_tokens = tokens;
  p.num_kv_heads = heads;
  p.head_dim = d;
  p.page_size = page_size;
  p.k = k;
  p.v = v;
  p.k_clip = k_clip;
  p.v_clip = v_clip;
  return p;
}

// A demotion of `pages` page pairs with its shape and pair list set (no pools yet).
DemotePagesParams demote_shape(int pages, int heads, int d, int page_size,
                               const std::int32_t* page_pairs) {
  DemotePagesParams p;
  p.num_pages = pages;
  p.num_kv_heads = heads;
  p.head_dim = d;
  p.page_size = page_size;
  p.page_pairs = page_pairs;
  return p;
}

// A decode of `batch` sequences with its shape and softmax scale set (no buffers yet).
DecodeParams decode_shape(int batch, int hq, int hkv, int d, int page_size) {
  DecodeParams p;
  p.batch = batch;
  p.num_q_heads = hq;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.page_size = page_size;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  return p;
}

// Random rows with heavy-tailed outliers (a few channels 10x larger), rounded to bf16.
std::vector<float> random_rows(std::int64_t rows, std::int64_t d, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * d));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t e = 0; e < d; ++e) {
      float v = normal(rng) * (e % 17 == 3 ? 10.0f : 1.0f);
      x[static_cast<std::size_t>(r * d + e)] = ref::from_bf16_bits(ref::to_bf16_bits(v));
    }
  }
  return x;
}

// INT2 pools of `rows` random rows quantized by the reference (keys at clip 0.96, values 0.92).
struct Int2Rows {
  std::vector<std::uint8_t> codes_k, codes_v;
  std::vector<std::uint16_t> scale_zero_k, scale_zero_v;
};
Int2Rows random_int2_rows(std::size_t rows, int d, std::mt19937& rng) {
  Int2Rows out{std::vector<std::uint8_t>(rows * d / 4), std::vector<std::uint8_t>(rows * d / 4),
               std::vector<std::uint16_t>(rows * 2), std::vector<std::uint16_t>(rows * 2)};
  const auto k = random_rows(static_cast<std::int64_t>(rows), d, rng);
  const auto v = random_rows(static_cast<std::int64_t>(rows), d, rng);
  for (std::size_t row = 0; row < rows; ++row) {
    ref::quantize_cache_row(&k[row * d], d, 0.96f, &out.codes_k[row * d / 4],
                            &out.scale_zero_k[row * 2]);
    ref::quantize_cache_row(&v[row * d], d, 0.92f, &out.codes_v[row * d / 4],
                            &out.scale_zero_v[row * 2]);
  }
  return out;
}

std::vector<std::uint16_t> to_bits(const std::vector<float>& x) {
  std::vector<std::uint16_t> b(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) b[i] = ref::to_bf16_bits(x[i]);
  return b;
}

// Orthonormal Walsh-Hadamard times random signs per row: an orthogonal matrix.
std::vector<float> random_rotation(int heads, int d, std::mt19937& rng) {
  std::vector<float> r(static_cast<std::size_t>(heads) * d * d);
  const float norm = 1.0f / std::sqrt(static_cast<float>(d));
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < d; ++i) {
      const float sign = (rng() & 1u) ? 1.0f : -1.0f;
      for (int j = 0; j < d; ++j) {
        const int parity = __builtin_popcount(static_cast<unsigned>(i & j)) & 1;
        r[(static_cast<std::size_t>(h) * d + i) * d + j] = sign * (parity ? -norm : norm);
      }
    }
  }
  return r;
}

struct Shape {
  int d, page_size;
};

class Int2Store : public ::testing::TestWithParam<Shape> {};

TEST_P(Int2Store, DemotionIsBitExact) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto [d, ps] = GetParam();
  const int heads = 3;
  // 5 pages: fewer rows than warps, so the batched kernel's warps quantize single rows, and the
  // row-per-thread kernel has partial warps; 1203 pages: whole pages per warp, and a partial warp
  // of rows at the end of each head.
  for (const int pages : {5, 1203}) {
    SCOPED_TRACE(::testing::Message() << pages << " pages");
    std::mt19937 rng(static_cast<unsigned>(d * 31 + ps + pages));
    auto k = random_rows(static_cast<std::int64_t>(pages) * heads * ps, d, rng);
    auto v = random_rows(static_cast<std::int64_t>(pages) * heads * ps, d, rng);
    // Rows that stress the exact clip threshold and the divisions (all values exact in bf16):
    // zeros, signed zeros, a constant row, ties, subnormals, huge values, a single spike, a NaN,
    // infinities.
    auto special = [d](std::vector<float>& x, std::size_t row, int kind) {
      for (int e = 0; e < d; ++e) {
        float& y = x[row * d + e];
        switch (kind) {
          case 0:
            y = 0.0f;
            break;
          case 1:
            y = e % 2 ? -0.0f : 0.0f;
            break;
          case 2:
            y = 0.5f;
            break;
          case 3:
            y = static_cast<float>(e % 3) - 1.0f;
            break;
          case 4:
            y = std::ldexp(static_cast<float>(e % 5) - 2.0f, -130);
            break;
          case 5:
            y = std::ldexp(static_cast<float>(e % 7) - 3.0f, 100);
            break;
          case 6:
            y = e == 5 ? 64.0f : (e % 2 ? -0.25f : 0.25f);
            break;
          case 7:
            y = e == 9 ? std::nanf("") : static_cast<float>(e % 4) - 1.5f;
            break;
          default:
            y = e == 2 ? INFINITY : e == 7 ? -INFINITY : static_cast<float>(e % 4) - 1.5f;
            break;
        }
      }
    };
    const std::size_t total_rows = static_cast<std::size_t>(pages) * heads * ps;
    for (std::size_t base = 0; base < total_rows; base += 997) {  // spread over pages and batches
      for (int kind = 0; kind < 9; ++kind) {
        if (base + kind * 5 + 1 >= total_rows) break;
        special(k, base + static_cast<std::size_t>(kind) * 3, kind);
        special(v, base + static_cast<std::size_t>(kind) * 5 + 1, kind);
      }
    }
    const std::vector<float> k_clip = {0.96f, 1.0f, 0.8f}, v_clip = {0.92f, 0.5f, 1.0f};
    // Source bf16 pages go to INT2 pages in a scrambled order (7 is prime to both page counts).
    // Every fifth pair is padding (a negative source or destination page, alternately), which
    // the kernels skip: its destination page must stay as it was (zeros).
    std::vector<std::int32_t> pairs;
    std::vector<int> destination(pages);
    for (int i = 0; i < pages; ++i) {
      destination[i] = (7 * i + 3) % pages;
      const bool padding = i % 5 == 2;
      pairs.push_back(padding && i % 2 == 0 ? -1 : i);
      pairs.push_back(padding && i % 2 == 1 ? -1 : destination[i]);
    }
    DeviceBuffer<std::uint16_t> kb(to_bits(k)), vb(to_bits(v));
    DeviceBuffer<float> kc(k_clip), vc(v_clip);
    DeviceBuffer<std::int32_t> pp(pairs);
    const std::size_t rows = static_cast<std::size_t>(pages) * heads * ps;
    // Each kernel, and the batched one asked for code pools one byte off 2-byte alignment (which
    // it cannot address: a warp per row serves them).
    for (const int variant : {0, 1, 2, 3}) {
      const DemoteKernel kernel = variant == 1   ? DemoteKernel::kRowPerThread
                                  : variant == 2 ? DemoteKernel::kWarpPerRow
                                                 : DemoteKernel::kWarpBatched;
      const std::size_t offset = variant == 3 ? 1 : 0;
      SCOPED_TRACE(variant == 0   ? "warp-batched kernel"
                   : variant == 1 ? "row-per-thread kernel"
                   : variant == 2 ? "warp-per-row kernel"
                                  : "warp-batched, unaligned codes (warp per row)");
      DeviceBuffer<std::uint8_t> kcodes(rows * d / 4 + offset), vcodes(rows * d / 4 + offset);
      DeviceBuffer<std::uint16_t> ksz(rows * 2), vsz(rows * 2);
      DemotePagesParams p = demote_shape(pages, heads, d, ps, pp.ptr);
      p.k_bf16 = kb.ptr;
      p.v_bf16 = vb.ptr;
      p.k_clip = kc.ptr;
      p.v_clip = vc.ptr;
      p.k_codes = kcodes.ptr + offset;
      p.v_codes = vcodes.ptr + offset;
      p.k_scale_zero = ksz.ptr;
      p.v_scale_zero = vsz.ptr;
      p.kernel = kernel;
      ASSERT_EQ(demote_pages(p), Status::kOk) << last_error_message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto got_kc = kcodes.download(), got_vc = vcodes.download();
      got_kc.erase(got_kc.begin(), got_kc.begin() + static_cast<std::ptrdiff_t>(offset));
      got_vc.erase(got_vc.begin(), got_vc.begin() + static_cast<std::ptrdiff_t>(offset));
      const auto got_ksz = ksz.download(), got_vsz = vsz.download();
      std::vector<std::uint8_t> packed(static_cast<std::size_t>(d / 4));
      std::uint16_t sz[2];
      for (int i = 0; i < pages; ++i) {
        const int src = pairs[2 * i], dst = pairs[2 * i + 1];
        if (src < 0 || dst < 0) {
          const std::size_t first = static_cast<std::size_t>(destination[i]) * heads * ps;
          const std::size_t count = static_cast<std::size_t>(heads) * ps;
          for (const auto* codes : {&got_kc, &got_vc}) {
            ASSERT_TRUE(std::all_of(codes->begin() + first * d / 4,
                                    codes->begin() + (first + count) * d / 4,
                                    [](std::uint8_t b) { return b == 0; }))
                << "padding pair " << i << " wrote codes";
          }
          for (const auto* scale_zero : {&got_ksz, &got_vsz}) {
            ASSERT_TRUE(std::all_of(scale_zero->begin() + first * 2,
                                    scale_zero->begin() + (first + count) * 2,
                                    [](std::uint16_t b) { return b == 0; }))
                << "padding pair " << i << " wrote scales";
          }
          continue;
        }
        for (int h = 0; h < heads; ++h) {
          for (int t = 0; t < ps; ++t) {
            const std::size_t src_row = (static_cast<std::size_t>(src) * heads + h) * ps + t;
            const std::size_t dst_row = (static_cast<std::size_t>(dst) * heads + h) * ps + t;
            for (int kv = 0; kv < 2; ++kv) {
              const auto& x = kv == 0 ? k : v;
              // Rows with a NaN or an infinity have no reference (it refuses them); the kernels
              // take them through their exact path, and the rows around them must come out intact.
              if (!std::all_of(&x[src_row * d], &x[src_row * d] + d,
                               [](float e) { return std::isfinite(e); })) {
                continue;
              }
              ref::quantize_cache_row(&x[src_row * d], d, (kv == 0 ? k_clip : v_clip)[h],
                                      packed.data(), sz);
              const auto& codes = kv == 0 ? got_kc : got_vc;
              const auto& scale_zero = kv == 0 ? got_ksz : got_vsz;
              ASSERT_TRUE(std::equal(packed.begin(), packed.end(), codes.begin() + dst_row * d / 4))
                  << (kv == 0 ? "K" : "V") << " page " << src << " head " << h << " row " << t;
              ASSERT_EQ(scale_zero[dst_row * 2], sz[0]);
              ASSERT_EQ(scale_zero[dst_row * 2 + 1], sz[1]);
            }
          }
        }
      }
    }
  }
}

TEST_P(Int2Store, StoreRotatesIntoBf16AndInt2Pages) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto [d, ps] = GetParam();
  const int heads = 2;
  std::mt19937 rng(static_cast<unsigned>(d + ps));
  // A partial tile, enough 32-token tiles that the tensor-core path's warps take one or two each,
  // and (where that path runs, d 64 and 128) enough that at d 128 the warpgroups of a block take
  // one or two turns at the tensor pipe, not all as many (132 multiprocessors).
  for (const int tokens : {1, 2 * ps + 3, 9001, d != 256 ? 24001 : 0}) {
    if (tokens == 0) continue;
    SCOPED_TRACE(::testing::Message() << tokens << " tokens");
    auto k = random_rows(static_cast<std::int64_t>(tokens) * heads, d, rng);
    auto v = random_rows(static_cast<std::int64_t>(tokens) * heads, d, rng);
    // Every 29th token's rows scaled by 2^-100 (exact in bf16): their scales fall below the fast
    // quantizer's domain (2^-90), so the kernels' one-row-per-thread quantizer declines them and
    // the warp quantizes them the ordinary way, in full tiles and partial ones.
    for (int t = 7; t < tokens; t += 29) {
      for (auto* x : {&k, &v}) {
        auto row = x->begin() + static_cast<std::ptrdiff_t>(t) * heads * d;
        std::transform(row, row + heads * d, row, [](float e) { return std::ldexp(e, -100); });
      }
    }
    // 0: identity rotation; 1: a random rotation of the raw rows (no mean, no smoothing: the input
    // is bf16 as it stands); 2: a random rotation with centring and key smoothing.
    for (const int variant : {0, 1, 2}) {
      SCOPED_TRACE(::testing::Message() << "variant " << variant);
      const bool identity = variant == 0, centred = variant == 2;
      std::vector<float> rk = random_rotation(heads, d, rng), rv = random_rotation(heads, d, rng);
      std::vector<float> k_mean(static_cast<std::size_t>(heads * d)), k_smooth(k_mean.size()),
          v_mean(k_mean.size());
      for (std::size_t i = 0; i < k_mean.size(); ++i) {
        k_mean[i] = centred ? 0.25f * static_cast<float>(i % 5) : 0.0f;
        k_smooth[i] = centred ? 0.5f + 0.25f * static_cast<float>(i % 4) : 1.0f;
        v_mean[i] = centred ? -0.125f * static_cast<float>(i % 3) : 0.0f;
      }
      if (identity) {
        std::fill(rk.begin(), rk.end(), 0.0f);
        for (int h = 0; h < heads; ++h) {
          for (int i = 0; i < d; ++i) rk[(static_cast<std::size_t>(h) * d + i) * d + i] = 1.0f;
        }
        rv = rk;
      }
      // Every token goes to a bf16 slot (reversed order) and to an INT2 slot (shifted by 5).
      const int pool_pages = (tokens + 5 + ps - 1) / ps;
      std::vector<std::int64_t> bslot(tokens), islot(tokens);
      for (int t = 0; t < tokens; ++t) {
        bslot[t] = tokens - 1 - t;
        islot[t] = t + 5;
      }
      // The method's default clips on head 0 (keys 0.96, values 0.92: top lists of 6 and 11 keys
      // at d 128, 11 and 21 at d 256), 0.9 on head 1 (16 and 32).
      const std::vector<float> k_clips = {0.96f, 0.9f}, v_clips = {0.92f, 0.9f};
      DeviceBuffer<std::uint16_t> kd(to_bits(k)), vd(to_bits(v));
      DeviceBuffer<float> rkd(rk), rvd(rv), kmd(k_mean), ksd(k_smooth), vmd(v_mean), kc(k_clips),
          vc(v_clips);
      DeviceBuffer<std::int64_t> bs(bslot), is(islot);
      const std::size_t pool_rows = static_cast<std::size_t>(pool_pages) * heads * ps;
      // The tensor-core paths: the warpgroup MMA on Hopper (mma.sync elsewhere) and mma.sync; at
      // d 256 the warpgroup MMA only, with the rotation prepared (where it runs: Hopper).
      std::vector<StoreKvPath> paths = {StoreKvPath::kFloat32, StoreKvPath::kTensorCore};
      if (d != 256) paths.push_back(StoreKvPath::kTensorCoreSync);
      DeviceBuffer<std::uint8_t> prepared(store_kv_prepared_bytes(heads, d));
      for (const StoreKvPath path : paths) {
        SCOPED_TRACE(path == StoreKvPath::kFloat32      ? "float32 path"
                     : path == StoreKvPath::kTensorCore ? "tensor-core path"
                                                        : "mma.sync tensor-core path");
        const StorePools pools(pool_rows, d);
        StoreKvParams p = store_params(tokens, heads, d, ps, kd.ptr, vd.ptr, kc.ptr, vc.ptr);
        p.k_rotation = rkd.ptr;
        p.v_rotation = rvd.ptr;
        p.k_mean = centred ? kmd.ptr : nullptr;
        p.k_smooth = centred ? ksd.ptr : nullptr;
        p.v_mean = centred ? vmd.ptr : nullptr;
        p.path = path;
        p.bf16_slot = bs.ptr;
        p.int2_slot = is.ptr;
        pools.wire(p);
        const bool streamed = d == 256 && path == StoreKvPath::kTensorCore;
        if (streamed) {
          ASSERT_EQ(prepare_store_kv(p, prepared.ptr), Status::kOk) << last_error_message();
          p.prepared = prepared.ptr;
          const Status status = store_kv(p);
          if (status == Status::kUnsupported) continue;  // not a Hopper GPU
          ASSERT_EQ(status, Status::kOk) << last_error_message();
        } else {
          ASSERT_EQ(store_kv(p), Status::kOk) << last_error_message();
        }
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const StoredPools got = pools.download();
        if (path == StoreKvPath::kFloat32) {
          // The column path (a decode step's few BF16 rows; BF16 only) does the float32 path's
          // arithmetic over column slices: the same bits, at every token count.
          const StorePools column_pools(pool_rows, d);
          StoreKvParams c = p;
          c.path = StoreKvPath::kFloat32Columns;
          c.int2_slot = nullptr;
          column_pools.wire(c);
          ASSERT_EQ(store_kv(c), Status::kOk) << last_error_message();
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_EQ(column_pools.bf16[0].download(), got.bf16[0]) << "column path, keys";
          EXPECT_EQ(column_pools.bf16[1].download(), got.bf16[1]) << "column path, values";
        } else if (!streamed) {
          // The same store with the rotation prepared once gives the same bits: the blocks copy
          // in what they would have built.
          ASSERT_EQ(prepare_store_kv(p, prepared.ptr), Status::kOk) << last_error_message();
          const StorePools prepared_pools(pool_rows, d);
          StoreKvParams q = p;
          q.prepared = prepared.ptr;
          prepared_pools.wire(q);
          ASSERT_EQ(store_kv(q), Status::kOk) << last_error_message();
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const StoredPools again = prepared_pools.download();
          for (int side = 0; side < 2; ++side) {
            EXPECT_EQ(again.bf16[side], got.bf16[side]) << "side " << side;
            EXPECT_EQ(again.codes[side], got.codes[side]) << "side " << side;
            EXPECT_EQ(again.scale_zero[side], got.scale_zero[side]) << "side " << side;
          }
        }
        std::vector<float> rotated(static_cast<std::size_t>(d)),
            stored(static_cast<std::size_t>(d));
        std::vector<std::uint8_t> packed(static_cast<std::size_t>(d / 4));
        std::uint16_t sz[2];
        for (int t = 0; t < tokens; ++t) {
          for (int h = 0; h < heads; ++h) {
            for (int kv = 0; kv < 2; ++kv) {
              const float* x = &(kv == 0 ? k : v)[(static_cast<std::size_t>(t) * heads + h) * d];
              const float* mean = &(kv == 0 ? k_mean : v_mean)[static_cast<std::size_t>(h) * d];
              const float* smooth = kv == 0 ? &k_smooth[static_cast<std::size_t>(h) * d] : nullptr;
              ref::rotate_row(x, mean, smooth,
                              &(kv == 0 ? rk : rv)[static_cast<std::size_t>(h) * d * d], d,
                              rotated.data());
              const std::int64_t b = bslot[t], s = islot[t];
              const std::size_t brow = (static_cast<std::size_t>(b / ps) * heads + h) * ps + b % ps;
              const std::size_t irow = (static_cast<std::size_t>(s / ps) * heads + h) * ps + s % ps;
              const auto& bf = got.bf16[kv];
              float max_abs = 0.0f, max_err = 0.0f;
              for (int e = 0; e < d; ++e) {
                stored[e] = ref::from_bf16_bits(bf[brow * d + e]);
                max_abs = std::max(max_abs, std::abs(rotated[e]));
                max_err = std::max(max_err, std::abs(stored[e] - rotated[e]));
              }
              if (identity) {
                ASSERT_EQ(max_err, 0.0f) << "identity rotation must store the row unchanged";
              } else {
                ASSERT_LE(max_err, kRotateTol * max_abs) << "token " << t << " head " << h;
              }
              // The INT2 row is the reference quantization of the bf16 row the kernel stored.
              ref::quantize_cache_row(stored.data(), d, (kv == 0 ? k_clips : v_clips)[h],
                                      packed.data(), sz);
              const auto& codes = got.codes[kv];
              const auto& scale_zero = got.scale_zero[kv];
              ASSERT_TRUE(std::equal(packed.begin(), packed.end(), codes.begin() + irow * d / 4));
              ASSERT_EQ(scale_zero[irow * 2], sz[0]);
              ASSERT_EQ(scale_zero[irow * 2 + 1], sz[1]);
            }
          }
        }
      }
    }
  }
}
// A side whose rotation is null arrives rotated (R folded into the projection that produced it):
// its rows go to their BF16 slots unchanged and into their INT2 slots as the reference quantizes
// them, whichever path the rotated side takes (on the tensor cores in blocks of the same launch,
// otherwise in a kernel of its own); the rotated side is stored bit for bit as a
// store with both rotations stores it. Destinations: both slots, BF16 only (the copy), INT2 only.
TEST_P(Int2Store, RowsThatArriveRotatedAreStoredAsGiven) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto [d, ps] = GetParam();
  const int heads = 2;
  std::mt19937 rng(static_cast<unsigned>(3 * d + ps));
  // With the other side on the tensor cores the arriving side takes blocks of the same launch (the
  // warp quantizing a tile of at most 8 rows row by row, a thread per row above); otherwise the
  // rows kernel (a warp per token up to 8 tokens, else the same split): at d 256 beside the
  // tensor-core store as a dependent launch up to 8192 tokens, after it beyond (9001).
  for (const int tokens : {1, 7, 2 * ps + 3, 9001}) {
    SCOPED_TRACE(::testing::Message() << tokens << " tokens");
    const auto rows = static_cast<std::int64_t>(tokens) * heads;
    auto k = random_rows(rows, d, rng);
    auto v = random_rows(rows, d, rng);
    // Rows the one-row-per-thread quantizer declines (scales below its domain), as above.
    for (int t = 3; t < tokens; t += 29) {
      for (auto* x : {&k, &v}) {
        auto row = x->begin() + static_cast<std::ptrdiff_t>(t) * heads * d;
        std::transform(row, row + heads * d, row, [](float e) { return std::ldexp(e, -100); });
      }
    }
    // Negative zeros, which a store of rows as given keeps (a product would make them +0).
    for (int t = 2; t < tokens; t += 31) {
      k[static_cast<std::size_t>(t) * heads * d] = -0.0f;
      v[static_cast<std::size_t>(t) * heads * d + d + 1] = -0.0f;
    }
    const std::vector<float> rk = random_rotation(heads, d, rng),
                             rv = random_rotation(heads, d, rng);
    const int pool_pages = (tokens + 5 + ps - 1) / ps;
    const std::size_t pool_rows = static_cast<std::size_t>(pool_pages) * heads * ps;
    std::vector<std::int64_t> bslot(tokens), islot(tokens);
    for (int t = 0; t < tokens; ++t) {
      bslot[t] = tokens - 1 - t;
      islot[t] = t + 5;
    }
    // Head 1's clip keeps 25% out of the top list's reach at d 128 and 256: the warp quantizes it.
    const std::vector<float> clips = {0.96f, 0.75f};
    const std::vector<std::uint16_t> k_bits = to_bits(k), v_bits = to_bits(v);
    DeviceBuffer<std::uint16_t> kd(k_bits), vd(v_bits);
    DeviceBuffer<float> rkd(rk), rvd(rv), kc(clips), vc(clips);
    DeviceBuffer<std::int64_t> bs(bslot), is(islot);

    // What a side that arrives rotated must hold afterwards, per destination.
    const auto expected_side = [&](const std::vector<float>& x, bool to_bf16, bool to_int2,
                                   std::vector<std::uint16_t>& bf16,
                                   std::vector<std::uint8_t>& codes,
                                   std::vector<std::uint16_t>& scale_zero) {
      bf16.assign(pool_rows * d, 0);
      codes.assign(pool_rows * d / 4, 0);
      scale_zero.assign(pool_rows * 2, 0);
      for (int t = 0; t < tokens; ++t) {
        for (int h = 0; h < heads; ++h) {
          const float* row = &x[(static_cast<std::size_t>(t) * heads + h) * d];
          const std::int64_t b = bslot[t], s = islot[t];
          const std::size_t brow = (static_cast<std::size_t>(b / ps) * heads + h) * ps + b % ps;
          const std::size_t irow = (static_cast<std::size_t>(s / ps) * heads + h) * ps + s % ps;
          if (to_bf16) {
            for (int e = 0; e < d; ++e) bf16[brow * d + e] = ref::to_bf16_bits(row[e]);
          }
          if (to_int2) {
            ref::quantize_cache_row(row, d, clips[h], &codes[irow * d / 4], &scale_zero[irow * 2]);
          }
        }
      }
    };
    const auto run = [&](StoreKvParams p, StoredPools& out) {
      const StorePools pools(pool_rows, d);
      pools.wire(p);
      ASSERT_EQ(store_kv(p), Status::kOk) << last_error_message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      out = pools.download();
    };

    // The store of k and v rows (no rotations, no slots yet).
    const auto store_of = [&](const std::uint16_t* k_rows, const std::uint16_t* v_rows) {
      return store_params(tokens, heads, d, ps, k_rows, v_rows, kc.ptr, vc.ptr);
    };
    std::vector<StoreKvPath> paths = {StoreKvPath::kAuto, StoreKvPath::kFloat32};
    // At d 256 the tensor-core store (Hopper) streams a prepared rotation: every store on that
    // path passes one, built for both sides (a side arriving rotated leaves its entries unread).
    const std::size_t prepared_bytes = store_kv_prepared_bytes(heads, d);
    DeviceBuffer<std::uint8_t> both_prepared(prepared_bytes);
    StoreKvParams probe = store_of(kd.ptr, vd.ptr);
    probe.k_rotation = rkd.ptr;
    probe.v_rotation = rvd.ptr;
    ASSERT_EQ(prepare_store_kv(probe, both_prepared.ptr), Status::kOk) << last_error_message();
    probe.num_tokens = 0;
    probe.path = StoreKvPath::kTensorCore;
    probe.prepared = both_prepared.ptr;
    if (d != 256 || store_kv(probe) == Status::kOk) paths.push_back(StoreKvPath::kTensorCore);
    if (d != 256) paths.push_back(StoreKvPath::kTensorCoreSync);
    for (const StoreKvPath path : paths) {
      for (const int destination : {0, 1, 2}) {  // both slots, BF16 only, INT2 only
        SCOPED_TRACE(::testing::Message()
                     << "path " << static_cast<int>(path) << ", destination " << destination);
        const bool to_bf16 = destination != 2, to_int2 = destination != 1;
        StoreKvParams p = store_of(kd.ptr, vd.ptr);
        p.k_rotation = rkd.ptr;
        p.v_rotation = rvd.ptr;
        p.path = path;
        p.bf16_slot = to_bf16 ? bs.ptr : nullptr;
        p.int2_slot = to_int2 ? is.ptr : nullptr;
        const bool streamed = d == 256 && path == StoreKvPath::kTensorCore;
        if (streamed) p.prepared = both_prepared.ptr;
        StoredPools full;
        ASSERT_NO_FATAL_FAILURE(run(p, full));
        for (const int arriving : {0, 1, 2}) {  // keys, values, both arrive rotated
          SCOPED_TRACE(::testing::Message() << "arriving rotated: " << arriving);
          StoreKvParams q = p;
          if (arriving != 1) q.k_rotation = nullptr;
          if (arriving != 0) q.v_rotation = nullptr;
          // On the tensor cores also with the rotation prepared for the rotated side only.
          DeviceBuffer<std::uint8_t> prepared(prepared_bytes);
          for (const bool with_prepared : {false, true}) {
            if (with_prepared && path != StoreKvPath::kTensorCore) continue;
            SCOPED_TRACE(with_prepared ? "rotation prepared" : "rotation not prepared");
            StoreKvParams r = q;
            if (with_prepared) {
              ASSERT_EQ(prepare_store_kv(q, prepared.ptr), Status::kOk) << last_error_message();
              r.prepared = prepared.ptr;
            }
            StoredPools got;
            ASSERT_NO_FATAL_FAILURE(run(r, got));
            for (int side = 0; side < 2; ++side) {
              const bool as_given = arriving == 2 || arriving == side;
              StoredPools want = full;
              if (as_given) {
                expected_side(side == 0 ? k : v, to_bf16, to_int2, want.bf16[side],
                              want.codes[side], want.scale_zero[side]);
              }
              EXPECT_EQ(got.bf16[side], want.bf16[side]) << "side " << side << " BF16 rows";
              EXPECT_EQ(got.codes[side], want.codes[side]) << "side " << side << " INT2 codes";
              EXPECT_EQ(got.scale_zero[side], want.scale_zero[side])
                  << "side " << side << " scales";
            }
          }
        }
      }
    }
    // Inputs not 16-byte aligned (one element in): the warp takes every row, same bits.
    std::vector<std::uint16_t> k_shifted(k_bits.size() + 1), v_shifted(v_bits.size() + 1);
    std::copy(k_bits.begin(), k_bits.end(), k_shifted.begin() + 1);
    std::copy(v_bits.begin(), v_bits.end(), v_shifted.begin() + 1);
    DeviceBuffer<std::uint16_t> kd1(k_shifted), vd1(v_shifted);
    StoreKvParams p = store_of(kd1.ptr + 1, vd1.ptr + 1);
    p.bf16_slot = bs.ptr;
    p.int2_slot = is.ptr;
    StoredPools got, want;
    ASSERT_NO_FATAL_FAILURE(run(p, got));
    for (int side = 0; side < 2; ++side) {
      expected_side(side == 0 ? k : v, true, true, want.bf16[side], want.codes[side],
                    want.scale_zero[side]);
      EXPECT_EQ(got.bf16[side], want.bf16[side]) << "unaligned, side " << side;
      EXPECT_EQ(got.codes[side], want.codes[side]) << "unaligned, side " << side;
      EXPECT_EQ(got.scale_zero[side], want.scale_zero[side]) << "unaligned, side " << side;
    }
    // Values arriving unaligned beside keys on the tensor cores: the rows kernel takes them after
    // the keys' launch, with the bits of the aligned values that ride in it.
    if (d != 256) {
      for (const StoreKvPath path : {StoreKvPath::kTensorCore, StoreKvPath::kTensorCoreSync}) {
        SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(path));
        StoreKvParams q = store_of(kd.ptr, vd.ptr);
        q.k_rotation = rkd.ptr;
        q.path = path;
        q.bf16_slot = bs.ptr;
        q.int2_slot = is.ptr;
        StoredPools in_launch, after;
        ASSERT_NO_FATAL_FAILURE(run(q, in_launch));
        q.v = vd1.ptr + 1;
        ASSERT_NO_FATAL_FAILURE(run(q, after));
        for (int side = 0; side < 2; ++side) {
          EXPECT_EQ(after.bf16[side], in_launch.bf16[side]) << "side " << side;
          EXPECT_EQ(after.codes[side], in_launch.codes[side]) << "side " << side;
          EXPECT_EQ(after.scale_zero[side], in_launch.scale_zero[side]) << "side " << side;
        }
      }
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, Int2Store,
                         ::testing::Values(Shape{64, 8}, Shape{64, 16}, Shape{128, 8},
                                           Shape{128, 16}, Shape{256, 8}, Shape{256, 16}));

// A batch of sequences in a paged mixed cache built on the host, its decode on the GPU, and the
// float64 reference over the same dequantized rows.
struct DecodeCase {
  int d, page_size, group;
  std::vector<std::array<int, 3>> lengths;  // per sequence: sink, int2, recent
  int num_splits = 0;
  DecodePath path = DecodePath::kAuto;
};

void run_decode_case(const DecodeCase& c) {
  const int d = c.d, ps = c.page_size, hkv = 2, hq = hkv * c.group;
  const int batch = static_cast<int>(c.lengths.size());
  std::mt19937 rng(static_cast<unsigned>(d * 7 + ps * 3 + c.group + batch));
  std::vector<std::vector<std::int32_t>> bf16_pages(batch), int2_pages(batch);
  int n_bf16 = 0, n_int2 = 0, max_pages = 0;
  for (int b = 0; b < batch; ++b) {
    const auto [s, i, r] = c.lengths[b];
    const int sp = (s + ps - 1) / ps, ip = (i + ps - 1) / ps, rp = (r + ps - 1) / ps;
    for (int j = 0; j < sp + rp; ++j) bf16_pages[b].push_back(n_bf16++);
    for (int j = 0; j < ip; ++j) int2_pages[b].push_back(n_int2++);
    max_pages = std::max(max_pages, sp + ip + rp);
  }
  // Scatter: reverse the page ids so that table order and pool order differ.
  for (auto& t : bf16_pages)
    for (auto& x : t) x = n_bf16 - 1 - x;
  for (auto& t : int2_pages)
    for (auto& x : t) x = n_int2 - 1 - x;
  const std::size_t brows = static_cast<std::size_t>(std::max(n_bf16, 1)) * hkv * ps;
  const std::size_t irows = static_cast<std::size_t>(std::max(n_int2, 1)) * hkv * ps;
  const auto kb = random_rows(static_cast<std::int64_t>(brows), d, rng);
  const auto vb = random_rows(static_cast<std::int64_t>(brows), d, rng);
  Int2Rows int2_rows = random_int2_rows(irows, d, rng);
  const std::vector<std::uint8_t>&kcodes = int2_rows.codes_k, &vcodes = int2_rows.codes_v;
  std::vector<std::uint16_t>&ksz = int2_rows.scale_zero_k, &vsz = int2_rows.scale_zero_v;
  // Rows past each sequence's tokens in its last sink / recent / INT2 page hold NaN patterns, as
  // a fresh pool may: the kernels must never let them into the result.
  auto kb_poisoned = kb, vb_poisoned = vb;
  for (int b = 0; b < batch; ++b) {
    const auto [s, i, r] = c.lengths[b];
    const int sp = (s + ps - 1) / ps;
    auto poison_bf16 = [&](int page, int first_free) {
      for (int h = 0; h < hkv; ++h) {
        for (int t = first_free; t < ps; ++t) {
          const std::size_t idx = ((static_cast<std::size_t>(page) * hkv + h) * ps + t) * d;
          std::fill_n(kb_poisoned.begin() + idx, d, std::nanf(""));
          std::fill_n(vb_poisoned.begin() + idx, d, std::nanf(""));
        }
      }
    };
    if (s % ps != 0) poison_bf16(bf16_pages[b][sp - 1], s % ps);
    if (r % ps != 0) poison_bf16(bf16_pages[b][sp + (r - 1) / ps], r % ps);
    if (i % ps != 0) {
      for (int h = 0; h < hkv; ++h) {
        for (int t = i % ps; t < ps; ++t) {
          const std::size_t row =
              (static_cast<std::size_t>(int2_pages[b][(i - 1) / ps]) * hkv + h) * ps + t;
          ksz[row * 2] = ksz[row * 2 + 1] = vsz[row * 2] = vsz[row * 2 + 1] = 0x7fc0;
        }
      }
    }
  }
  const auto q = random_rows(static_cast<std::int64_t>(batch) * hq, d, rng);
  const int bstride = std::max(1, max_pages), istride = std::max(1, max_pages);
  std::vector<std::int32_t> btab(static_cast<std::size_t>(batch) * bstride, -1),
      itab(static_cast<std::size_t>(batch) * istride, -1), sink(batch), int2(batch), recent(batch);
  for (int b = 0; b < batch; ++b) {
    std::copy(bf16_pages[b].begin(), bf16_pages[b].end(), btab.begin() + b * bstride);
    std::copy(int2_pages[b].begin(), int2_pages[b].end(), itab.begin() + b * istride);
    sink[b] = c.lengths[b][0];
    int2[b] = c.lengths[b][1];
    recent[b] = c.lengths[b][2];
  }
  DeviceBuffer<std::uint16_t> qd(to_bits(q)), kbd(to_bits(kb_poisoned)), vbd(to_bits(vb_poisoned)),
      kszd(ksz), vszd(vsz), out(static_cast<std::size_t>(batch) * hq * d);
  DeviceBuffer<std::uint8_t> kcd(kcodes), vcd(vcodes);
  DeviceBuffer<std::int32_t> btd(btab), itd(itab), sd(sink), id(int2), rd(recent);
  DecodeParams p = decode_shape(batch, hq, hkv, d, ps);
  p.q = qd.ptr;
  p.k_bf16 = kbd.ptr;
  p.v_bf16 = vbd.ptr;
  p.k_codes = kcd.ptr;
  p.v_codes = vcd.ptr;
  p.k_scale_zero = kszd.ptr;
  p.v_scale_zero = vszd.ptr;
  p.bf16_block_table = btd.ptr;
  p.int2_block_table = itd.ptr;
  p.bf16_table_stride = bstride;
  p.int2_table_stride = istride;
  p.sink_len = sd.ptr;
  p.int2_len = id.ptr;
  p.recent_len = rd.ptr;
  p.max_pages_per_sequence = max_pages;
  p.out = out.ptr;
  p.num_splits = c.num_splits;
  p.path = c.path;
  // One workspace (zeroed once, as DecodeParams asks) for three calls: the case itself, the same
  // cache with another split count (a different number of blocks counts on the merge
  // counters), and the case again, which must give the first result bit for bit; every call
  // must leave the counters zero.
  DecodeParams other = p;
  other.num_splits = p.num_splits == 3 ? 5 : 3;
  DeviceBuffer<std::uint8_t> ws(std::max(decode_workspace_bytes(p), decode_workspace_bytes(other)));
  p.workspace = other.workspace = ws.ptr;
  p.workspace_bytes = other.workspace_bytes = ws.count;
  ASSERT_EQ(decode_attention(p), Status::kOk) << last_error_message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = out.download();
  ASSERT_EQ(decode_attention(other), Status::kOk) << last_error_message();
  ASSERT_EQ(decode_attention(p), Status::kOk) << last_error_message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(out.download(), got) << "a reused workspace changed the result";
  const auto counters = ws.download();
  EXPECT_TRUE(std::all_of(counters.begin(), counters.begin() + decode_counter_bytes(p),
                          [](std::uint8_t x) { return x == 0; }))
      << "the merge counters were not left at zero";

  for (int b = 0; b < batch; ++b) {
    const auto [s, i, r] = c.lengths[b];
    const int sp = (s + ps - 1) / ps;
    for (int h = 0; h < hkv; ++h) {
      // The sequence's rows in token order: sink, INT2 (dequantized), recent.
      std::vector<float> keys, values, row(static_cast<std::size_t>(d));
      auto add_bf16 = [&](int page, int t) {
        const std::size_t idx = ((static_cast<std::size_t>(page) * hkv + h) * ps + t) * d;
        keys.insert(keys.end(), kb.begin() + idx, kb.begin() + idx + d);
        values.insert(values.end(), vb.begin() + idx, vb.begin() + idx + d);
      };
      for (int t = 0; t < s; ++t) add_bf16(bf16_pages[b][t / ps], t % ps);
      for (int t = 0; t < i; ++t) {
        const std::size_t idx =
            (static_cast<std::size_t>(int2_pages[b][t / ps]) * hkv + h) * ps + t % ps;
        ref::dequantize_cache_row(&kcodes[idx * d / 4], &ksz[idx * 2], d, row.data());
        keys.insert(keys.end(), row.begin(), row.end());
        ref::dequantize_cache_row(&vcodes[idx * d / 4], &vsz[idx * 2], d, row.data());
        values.insert(values.end(), row.begin(), row.end());
      }
      for (int t = 0; t < r; ++t) add_bf16(bf16_pages[b][sp + t / ps], t % ps);
      std::vector<double> expected(static_cast<std::size_t>(c.group) * d);
      ref::attention_reference(&q[(static_cast<std::size_t>(b) * hq + h * c.group) * d], c.group,
                               keys.data(), values.data(), s + i + r, d, p.softmax_scale,
                               expected.data());
      double max_ref = 1e-30, max_err = 0.0;
      for (std::size_t e = 0; e < expected.size(); ++e) {
        const float g =
            ref::from_bf16_bits(got[(static_cast<std::size_t>(b) * hq + h * c.group) * d + e]);
        max_ref = std::max(max_ref, std::abs(expected[e]));
        max_err = std::max(max_err, std::abs(g - expected[e]));
      }
      if (s + i + r == 0) {
        EXPECT_EQ(max_err, 0.0) << "an empty sequence must give zeros";
      } else {
        EXPECT_LE(max_err, kDecodeTol * max_ref)
            << "d " << d << " page " << ps << " group " << c.group << " sequence " << b << " (sink "
            << s << ", int2 " << i << ", recent " << r << ") KV head " << h;
      }
    }
  }
}

const char* path_name(DecodePath path) {
  return path == DecodePath::kSimt ? "simt" : "tensor-core";
}

// Both INT2 paths: the SIMT kernel over every page, and the tensor-core kernel over the INT2 tiles
// with the SIMT kernel over the BF16 pages. The tensor-core path rounds queries and p * v_scale
// to fp16 (2^-11 relative), far inside kDecodeTol.
TEST(Int2Decode, MatchesReferenceAcrossShapesLengthsAndWindows) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  // Odd totals 1, 7, 8, 9 and 4097; windows empty (all INT2) or covering everything (all BF16).
  const std::vector<std::array<int, 3>> mixed = {{1, 0, 0},       {4, 3, 0},  {0, 8, 0}, {4, 0, 5},
                                                 {64, 3777, 256}, {0, 0, 37}, {0, 41, 0}};
  for (DecodePath path : {DecodePath::kSimt, DecodePath::kTensorCore}) {
    for (int d : {64, 128, 256}) {
      for (int ps : {8, 16}) {
        for (int group : {1, 2, 4, 8}) {
          SCOPED_TRACE(::testing::Message()
                       << path_name(path) << " d " << d << " page " << ps << " group " << group);
          run_decode_case({d, ps, group, mixed, 0, path});
        }
      }
    }
  }
}

TEST(Int2Decode, SplitCountDoesNotChangeTheResult) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::array<int, 3>> lengths = {{64, 4000, 256}, {3, 100, 20}};
  for (DecodePath path : {DecodePath::kSimt, DecodePath::kTensorCore}) {
    for (int splits : {1, 2, 7, 64, 1000}) {
      SCOPED_TRACE(::testing::Message() << path_name(path) << " " << splits << " splits");
      run_decode_case({128, 16, 4, lengths, splits, path});
    }
  }
}

// Long histories: many tiles per warp, the online-softmax rescale across tiles and splits.
TEST(Int2Decode, LongHistoryOnTensorCores) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int ps : {8, 16}) {
    SCOPED_TRACE(::testing::Message() << "page " << ps);
    run_decode_case({128, ps, 4, {{64, 65521, 256}, {0, 30000, 0}}, 0, DecodePath::kTensorCore});
  }
}

TEST(Int2Decode, EmptySequenceGivesZeros) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (DecodePath path : {DecodePath::kSimt, DecodePath::kTensorCore}) {
    run_decode_case({128, 16, 4, {{0, 0, 0}, {2, 16, 3}}, 0, path});
  }
}

// Buffers the decode kernel cannot use are refused before any launch, with a message.
TEST(Int2Decode, RejectsUnusableBuffers) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer<std::uint16_t> q(8 * 128), out(8 * 128), bf16(16 * 2 * 128);
  DeviceBuffer<std::uint8_t> codes(16 * 2 * 32 + 16), sz(16 * 2 * 4 + 16);
  DeviceBuffer<std::int32_t> table(4), lens(3);
  DecodeParams p;
  p.batch = 1;
  p.num_q_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.page_size = 16;
  p.softmax_scale = 0.1f;
  p.q = q.ptr;
  p.out = out.ptr;
  p.k_bf16 = p.v_bf16 = bf16.ptr;
  p.k_codes = p.v_codes = codes.ptr;
  p.k_scale_zero = p.v_scale_zero = reinterpret_cast<const bf16_bits*>(sz.ptr);
  p.bf16_block_table = p.int2_block_table = table.ptr;
  p.bf16_table_stride = p.int2_table_stride = 1;
  p.sink_len = p.int2_len = p.recent_len = lens.ptr;
  p.max_pages_per_sequence = 1;
  DeviceBuffer<std::uint8_t> ws(decode_workspace_bytes(p));
  p.workspace = ws.ptr;
  p.workspace_bytes = ws.count;
  ASSERT_EQ(decode_attention(p), Status::kOk) << last_error_message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  auto refused = [](DecodeParams bad, const char* expected_message) {
    EXPECT_EQ(decode_attention(bad), Status::kInvalidArgument);
    EXPECT_NE(std::string(last_error_message()).find(expected_message), std::string::npos)
        << last_error_message();
  };
  DecodeParams bad = p;
  bad.k_codes = codes.ptr + 4;  // tensor-core copies are 16-byte chunks
  refused(bad, "16-byte aligned");
  bad = p;
  bad.v_scale_zero = reinterpret_cast<const bf16_bits*>(sz.ptr + 8);
  refused(bad, "16-byte aligned");
  bad = p;
  bad.q = q.ptr + 1;  // queries are read in 16-byte vectors
  refused(bad, "16-byte aligned");
  bad = p;
  bad.workspace_bytes = decode_workspace_bytes(p) - 1;
  refused(bad, "workspace");
  bad = p;
  DeviceBuffer<std::uint8_t> wide_ws(decode_workspace_bytes(p) + 16);
  bad.workspace = wide_ws.ptr + 4;  // the split merge reads partial results as float4
  bad.workspace_bytes = decode_workspace_bytes(p);
  refused(bad, "16-byte aligned workspace");
  bad = p;
  std::vector<std::uint8_t> host_workspace(decode_workspace_bytes(p));
  bad.workspace = host_workspace.data();  // not device memory
  refused(bad, "workspace");
  bad = p;
  bad.int2_block_table = nullptr;
  refused(bad, "null");
  bad = p;
  bad.q = nullptr;
  refused(bad, "null");
  // The CUDA-core path copies no 16-byte chunks: misaligned pools are fine there.
  bad = p;
  bad.path = DecodePath::kSimt;
  bad.k_codes = codes.ptr + 4;
  EXPECT_EQ(decode_attention(bad), Status::kOk) << last_error_message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// A decode step as a serving engine captures it in a CUDA graph: the batch's new rows stored (one
// token a sequence, into BF16 and INT2 slots), a fixed-length list of pages demoted, attention
// decoded. Replayed over several steps with new contents in the buffers it reads (rows, slots,
// page pairs, block tables, lengths, queries), the graph must give, bit for bit, what the same
// calls give launched one by one. The batch carries padding as an engine pads a captured batch: a
// token with both slots -1, demotion pairs of -1, a sequence with no tokens. The capture uses the
// strictest mode (no call that is unsafe while a stream captures, in any thread) and comes before
// any of this case's calls run, so that first-call device queries happen inside it (run this test
// alone to have them all there).
//
// With programmatic dependent launch (enable_pdl on all three calls; on Hopper each call's first
// kernel then starts while the one before finishes), the graph and the same calls one by one must
// still match ordinary launches bit for bit. Each step makes the calls depend on each other: one
// demoted page is the page a token was just stored to, and a sequence's tables list that page and
// the page it was demoted into. With the demotion beside the store (overlap_previous), as an
// engine demotes a window's oldest page while the new token lands in its newest, no page the
// demotion reads or writes is one the store writes; the decode still reads both calls' pages.
struct GraphCase {
  int d, page_size;
  DecodePath path;
  bool values_arrive;   // values arrive rotated (v_rotation null)
  bool pdl;             // enable_pdl on every call of the graph (and of a second run one by one)
  bool beside = false;  // with pdl: the demotion starts beside the store (overlap_previous)
};

class Int2Graph : public ::testing::TestWithParam<GraphCase> {};

TEST_P(Int2Graph, DecodeStepReplaysMatchCallsOneByOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const GraphCase c = GetParam();
  const int d = c.d, ps = c.page_size, hkv = 2, group = 4, hq = hkv * group, batch = 4;
  const int pool_pages = 20, table = 5, steps = 5;  // table: pages of each kind a sequence lists
  const std::size_t pool_rows = static_cast<std::size_t>(pool_pages) * hkv * ps;
  std::mt19937 rng(static_cast<unsigned>(d * 13 + ps + (c.values_arrive ? 1 : 0)));

  // Two identical caches: one for the graph, one for the calls one by one.
  const auto bf16_k = to_bits(random_rows(static_cast<std::int64_t>(pool_rows), d, rng));
  const auto bf16_v = to_bits(random_rows(static_cast<std::int64_t>(pool_rows), d, rng));
  const Int2Rows int2_rows = random_int2_rows(pool_rows, d, rng);
  struct Cache {
    DeviceBuffer<std::uint16_t> bf16[2], scale_zero[2], out;
    DeviceBuffer<std::uint8_t> codes[2], workspace;
  };
  auto make_cache = [&](std::size_t out_elements, std::size_t workspace_bytes) {
    return std::unique_ptr<Cache>(
        new Cache{{DeviceBuffer<std::uint16_t>(bf16_k), DeviceBuffer<std::uint16_t>(bf16_v)},
                  {DeviceBuffer<std::uint16_t>(int2_rows.scale_zero_k),
                   DeviceBuffer<std::uint16_t>(int2_rows.scale_zero_v)},
                  DeviceBuffer<std::uint16_t>(out_elements),
                  {DeviceBuffer<std::uint8_t>(int2_rows.codes_k),
                   DeviceBuffer<std::uint8_t>(int2_rows.codes_v)},
                  DeviceBuffer<std::uint8_t>(workspace_bytes)});
  };

  // The rotation (keys centred and smoothed), prepared once, as an engine does at load time.
  const std::vector<float> rk = random_rotation(hkv, d, rng), rv = random_rotation(hkv, d, rng);
  std::vector<float> k_mean(static_cast<std::size_t>(hkv) * d), k_smooth(k_mean.size()),
      v_mean(k_mean.size());
  for (std::size_t i = 0; i < k_mean.size(); ++i) {
    k_mean[i] = 0.25f * static_cast<float>(i % 5);
    k_smooth[i] = 0.5f + 0.25f * static_cast<float>(i % 4);
    v_mean[i] = -0.125f * static_cast<float>(i % 3);
  }
  const std::vector<float> k_clips = {0.96f, 0.9f}, v_clips = {0.92f, 0.9f};
  DeviceBuffer<float> rkd(rk), rvd(rv), kmd(k_mean), ksd(k_smooth), vmd(v_mean), kcd(k_clips),
      vcd(v_clips);
  DeviceBuffer<std::uint8_t> prepared(store_kv_prepared_bytes(hkv, d));

  // The buffers the step reads, rewritten before each step.
  DeviceBuffer<std::uint16_t> k_rows(static_cast<std::size_t>(batch) * hkv * d),
      v_rows(static_cast<std::size_t>(batch) * hkv * d),
      q(static_cast<std::size_t>(batch) * hq * d);
  DeviceBuffer<std::int64_t> bf16_slot(batch), int2_slot(batch);
  DeviceBuffer<std::int32_t> page_pairs(2 * batch), bf16_table(batch * table),
      int2_table(batch * table), sink_len(batch), int2_len(batch), recent_len(batch);

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);

  StoreKvParams store = store_params(batch, hkv, d, ps, k_rows.ptr, v_rows.ptr, kcd.ptr, vcd.ptr);
  store.k_rotation = rkd.ptr;
  store.k_mean = kmd.ptr;
  store.k_smooth = ksd.ptr;
  if (!c.values_arrive) {
    store.v_rotation = rvd.ptr;
    store.v_mean = vmd.ptr;
  }
  store.bf16_slot = bf16_slot.ptr;
  store.int2_slot = int2_slot.ptr;
  store.prepared = prepared.ptr;
  store.stream = stream;
  ASSERT_EQ(prepare_store_kv(store, prepared.ptr), Status::kOk) << last_error_message();

  DemotePagesParams demote = demote_shape(batch, hkv, d, ps, page_pairs.ptr);
  demote.k_clip = kcd.ptr;
  demote.v_clip = vcd.ptr;
  demote.stream = stream;

  DecodeParams decode = decode_shape(batch, hq, hkv, d, ps);
  decode.q = q.ptr;
  decode.bf16_block_table = bf16_table.ptr;
  decode.int2_block_table = int2_table.ptr;
  decode.bf16_table_stride = decode.int2_table_stride = table;
  decode.sink_len = sink_len.ptr;
  decode.int2_len = int2_len.ptr;
  decode.recent_len = recent_len.ptr;
  decode.max_pages_per_sequence = 2 * table;  // an upper bound, as a captured batch has
  decode.max_bf16_pages_per_sequence = table;
  decode.path = c.path;
  decode.stream = stream;

  const std::size_t out_elements = static_cast<std::size_t>(batch) * hq * d;
  const std::unique_ptr<Cache> captured = make_cache(out_elements, decode_workspace_bytes(decode));
  const std::unique_ptr<Cache> eager = make_cache(out_elements, decode_workspace_bytes(decode));
  // Calls one by one as programmatic dependents (PDL cases only).
  const std::unique_ptr<Cache> eager_pdl =
      c.pdl ? make_cache(out_elements, decode_workspace_bytes(decode)) : nullptr;
  // Wires the three calls to one cache.
  auto wire = [&](const Cache& cache, StoreKvParams& s, DemotePagesParams& m, DecodeParams& a) {
    s = store;
    m = demote;
    a = decode;
    for (int side = 0; side < 2; ++side) {
      std::uint16_t* const rows = cache.bf16[side].ptr;
      std::uint8_t* const codes = cache.codes[side].ptr;
      std::uint16_t* const scale_zero = cache.scale_zero[side].ptr;
      (side == 0 ? s.k_bf16 : s.v_bf16) = rows;
      (side == 0 ? m.k_bf16 : m.v_bf16) = rows;
      (side == 0 ? a.k_bf16 : a.v_bf16) = rows;
      (side == 0 ? s.k_codes : s.v_codes) = codes;
      (side == 0 ? m.k_codes : m.v_codes) = codes;
      (side == 0 ? a.k_codes : a.v_codes) = codes;
      (side == 0 ? s.k_scale_zero : s.v_scale_zero) = scale_zero;
      (side == 0 ? m.k_scale_zero : m.v_scale_zero) = scale_zero;
      (side == 0 ? a.k_scale_zero : a.v_scale_zero) = scale_zero;
    }
    a.out = cache.out.ptr;
    a.workspace = cache.workspace.ptr;
    a.workspace_bytes = cache.workspace.count;
  };
  StoreKvParams graph_store, eager_store, pdl_store;
  DemotePagesParams graph_demote, eager_demote, pdl_demote;
  DecodeParams graph_decode, eager_decode, pdl_decode;
  wire(*captured, graph_store, graph_demote, graph_decode);
  wire(*eager, eager_store, eager_demote, eager_decode);
  graph_store.enable_pdl = graph_demote.enable_pdl = graph_decode.enable_pdl = c.pdl;
  graph_demote.overlap_previous = c.beside;
  if (c.pdl) {
    wire(*eager_pdl, pdl_store, pdl_demote, pdl_decode);
    pdl_store.enable_pdl = pdl_demote.enable_pdl = pdl_decode.enable_pdl = true;
    pdl_demote.overlap_previous = c.beside;
  }

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status stored = store_kv(graph_store);
  const std::string store_error = last_error_message();
  const Status demoted = demote_pages(graph_demote);
  const std::string demote_error = last_error_message();
  const Status decoded = decode_attention(graph_decode);
  const std::string decode_error = last_error_message();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(stored, Status::kOk) << store_error;
  ASSERT_EQ(demoted, Status::kOk) << demote_error;
  ASSERT_EQ(decoded, Status::kOk) << decode_error;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  auto upload = [](auto& buffer, const auto& host) {
    ASSERT_EQ(host.size(), buffer.count);
    ASSERT_EQ(
        cudaMemcpy(buffer.ptr, host.data(), host.size() * sizeof(host[0]), cudaMemcpyHostToDevice),
        cudaSuccess);
  };
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    // New rows: sequence b's token to a BF16 slot on a page of its own; to an INT2 slot as well
    // except for sequence 1; sequence 3 is padding (both slots -1).
    std::vector<int> pages(pool_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<std::int64_t> bslot(batch, -1), islot(batch, -1);
    for (int b = 0; b < batch - 1; ++b) {
      bslot[b] = std::int64_t{pages[b]} * ps + static_cast<int>(rng() % ps);
      if (b != 1)
        islot[b] = std::int64_t{pages[pool_pages - 1 - b]} * ps + static_cast<int>(rng() % ps);
    }
    upload(bf16_slot, bslot);
    upload(int2_slot, islot);
    upload(k_rows, to_bits(random_rows(std::int64_t{batch} * hkv, d, rng)));
    upload(v_rows, to_bits(random_rows(std::int64_t{batch} * hkv, d, rng)));
    upload(q, to_bits(random_rows(std::int64_t{batch} * hq, d, rng)));
    // Demotions: two real pairs and two of padding, their places moving with the step. Beside
    // the store they take pages the store does not write (the stored pages last in the list).
    std::shuffle(pages.begin(), pages.end(), rng);
    if (c.beside) {
      std::vector<int> written;
      for (int b = 0; b < batch; ++b) {
        if (bslot[b] >= 0) written.push_back(static_cast<int>(bslot[b] / ps));
        if (islot[b] >= 0) written.push_back(static_cast<int>(islot[b] / ps));
      }
      std::stable_partition(pages.begin(), pages.end(), [&](int page) {
        return std::find(written.begin(), written.end(), page) == written.end();
      });
      // The pairs below take pages[0, batch) and pages(pair_last - batch, pair_last]: none of
      // the at most 2 batch written pages, which come last.
    }
    const int pair_last = c.beside ? pool_pages - 1 - 2 * batch : pool_pages - 1;
    std::vector<std::int32_t> pairs(2 * batch);
    int real_pair = -1;  // the first pair that is not padding
    for (int b = 0; b < batch; ++b) {
      const bool padding = (b + step) % batch >= 2;
      pairs[2 * b] = padding && b % 2 == 0 ? -1 : pages[b];
      pairs[2 * b + 1] = padding && b % 2 == 1 ? -1 : pages[pair_last - b];
      if (!padding && real_pair < 0) real_pair = b;
    }
    // Called one by one, that pair demotes the page sequence 0's token was just stored to, into a
    // page no other pair writes.
    const auto stored_page = static_cast<std::int32_t>(bslot[0] / ps);
    ASSERT_GE(real_pair, 0);
    if (!c.beside) {
      for (int b = 0; b < batch; ++b) {
        if (pairs[2 * b] == stored_page) pairs[2 * b] = pages[real_pair];
      }
      pairs[2 * real_pair] = stored_page;
    }
    const std::int32_t demoted_into = pairs[2 * real_pair + 1];
    upload(page_pairs, pairs);
    // Each sequence's pages and lengths; sequence 3 has none.
    std::vector<std::int32_t> btab(batch * table), itab(batch * table), sink(batch), int2(batch),
        recent(batch);
    for (int b = 0; b < batch; ++b) {
      std::shuffle(pages.begin(), pages.end(), rng);
      std::copy_n(pages.begin(), table, btab.begin() + b * table);
      std::copy_n(pages.begin() + table, table, itab.begin() + b * table);
      if (b == batch - 1) continue;
      sink[b] = static_cast<int>(rng() % (ps + 3));  // at most 2 pages
      const int sink_pages = (sink[b] + ps - 1) / ps;
      recent[b] = static_cast<int>(rng() % ((table - sink_pages) * ps + 1));
      int2[b] = static_cast<int>(rng() % (table * ps + 1));
    }
    // Sequence 0 reads the page just stored to (its last BF16 page, a full window) and the page
    // just demoted into (its first INT2 page).
    recent[0] = (table - (sink[0] + ps - 1) / ps) * ps;
    int2[0] = std::max(int2[0], 1);
    btab[table - 1] = stored_page;
    itab[0] = demoted_into;
    upload(bf16_table, btab);
    upload(int2_table, itab);
    upload(sink_len, sink);
    upload(int2_len, int2);
    upload(recent_len, recent);

    ASSERT_EQ(store_kv(eager_store), Status::kOk) << last_error_message();
    ASSERT_EQ(demote_pages(eager_demote), Status::kOk) << last_error_message();
    ASSERT_EQ(decode_attention(eager_decode), Status::kOk) << last_error_message();
    if (c.pdl) {
      ASSERT_EQ(store_kv(pdl_store), Status::kOk) << last_error_message();
      ASSERT_EQ(demote_pages(pdl_demote), Status::kOk) << last_error_message();
      ASSERT_EQ(decode_attention(pdl_decode), Status::kOk) << last_error_message();
    }
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const auto out = captured->out.download();
    for (const Cache* run : {captured.get(), eager_pdl.get()}) {
      if (run == nullptr) continue;
      SCOPED_TRACE(run == captured.get() ? "graph" : "calls one by one, programmatic");
      for (int side = 0; side < 2; ++side) {
        const char* name = side == 0 ? "K" : "V";
        ASSERT_EQ(run->bf16[side].download(), eager->bf16[side].download()) << name;
        ASSERT_EQ(run->codes[side].download(), eager->codes[side].download()) << name;
        ASSERT_EQ(run->scale_zero[side].download(), eager->scale_zero[side].download()) << name;
      }
      ASSERT_EQ(run->out.download(), eager->out.download()) << "attention output";
    }
    // The padded sequence decodes to zeros.
    EXPECT_TRUE(std::all_of(out.end() - static_cast<std::ptrdiff_t>(hq) * d, out.end(),
                            [](std::uint16_t x) { return ref::from_bf16_bits(x) == 0.0f; }));
    for (const Cache* cache : {captured.get(), eager.get(), eager_pdl.get()}) {
      if (cache == nullptr) continue;
      const auto counters = cache->workspace.download();
      ASSERT_TRUE(std::all_of(counters.begin(), counters.begin() + decode_counter_bytes(decode),
                              [](std::uint8_t x) { return x == 0; }))
          << "the merge counters were not left at zero";
    }
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(Steps, Int2Graph,
                         ::testing::Values(GraphCase{64, 16, DecodePath::kAuto, false, false},
                                           GraphCase{128, 16, DecodePath::kAuto, false, false},
                                           GraphCase{128, 8, DecodePath::kSimt, true, false},
                                           GraphCase{256, 16, DecodePath::kAuto, true, false},
                                           GraphCase{256, 8, DecodePath::kAuto, false, false},
                                           GraphCase{64, 8, DecodePath::kAuto, true, true},
                                           GraphCase{128, 16, DecodePath::kAuto, false, true},
                                           GraphCase{128, 16, DecodePath::kSimt, false, true},
                                           GraphCase{256, 16, DecodePath::kAuto, true, true},
                                           GraphCase{256, 8, DecodePath::kAuto, false, true},
                                           GraphCase{64, 16, DecodePath::kAuto, false, true, true},
                                           GraphCase{128, 8, DecodePath::kSimt, true, true, true},
                                           GraphCase{256, 16, DecodePath::kAuto, true, true, true}),
                         [](const ::testing::TestParamInfo<GraphCase>& info) {
                           return "d" + std::to_string(info.param.d) + "_page" +
                                  std::to_string(info.param.page_size) +
                                  (info.param.path == DecodePath::kSimt ? "_simt" : "_auto") +
                                  (info.param.values_arrive ? "_values_arrive" : "") +
                                  (info.param.pdl ? "_pdl" : "") +
                                  (info.param.beside ? "_beside" : "");
                         });

TEST(Int2Kernels, RejectBadArguments) {
  DecodeParams p;
  EXPECT_EQ(decode_attention(p), Status::kInvalidArgument);
  p.batch = 1;
  p.num_q_heads = 12;
  p.num_kv_heads = 4;
  p.head_dim = 128;
  p.page_size = 16;
  EXPECT_EQ(decode_attention(p), Status::kUnsupported);  // GQA ratio 3
  p.num_q_heads = 8;
  p.head_dim = 96;
  EXPECT_EQ(decode_attention(p), Status::kInvalidArgument);
  StoreKvParams s;
  s.num_kv_heads = 1;
  s.head_dim = 128;
  s.page_size = 12;
  EXPECT_EQ(store_kv(s), Status::kInvalidArgument);
  {
    // The tensor-core store: 16-byte aligned inputs and pools, a prepared rotation at d 256;
    // refused before anything is read (no tokens; the addresses are never dereferenced).
    alignas(16) static std::uint8_t bytes[64];
    alignas(16) static float rotation[4];
    StoreKvParams t;
    t.num_kv_heads = 1;
    t.head_dim = 256;
    t.page_size = 16;
    t.k = t.v = reinterpret_cast<const bf16_bits*>(bytes);
    t.k_rotation = t.v_rotation = rotation;
    t.path = StoreKvPath::kTensorCore;
    // At head_dim 256 the tensor-core store streams a prepared rotation, and has no mma.sync form.
    EXPECT_EQ(store_kv(t), Status::kInvalidArgument);
    EXPECT_NE(std::string(last_error_message()).find("prepare_store_kv"), std::string::npos);
    t.path = StoreKvPath::kTensorCoreSync;
    EXPECT_EQ(store_kv(t), Status::kUnsupported);
    t.path = StoreKvPath::kTensorCore;
    t.head_dim = 128;
    EXPECT_EQ(store_kv(t), Status::kOk);  // nothing to store
    t.v = reinterpret_cast<const bf16_bits*>(bytes + 2);
    EXPECT_EQ(store_kv(t), Status::kInvalidArgument);
    EXPECT_NE(std::string(last_error_message()).find("16-byte aligned"), std::string::npos);
    t.v = t.k;
    t.v_rotation = rotation + 1;  // R is read as float4
    EXPECT_EQ(store_kv(t), Status::kInvalidArgument);
    t.v_rotation = rotation;
    t.path = static_cast<StoreKvPath>(7);
    EXPECT_EQ(store_kv(t), Status::kInvalidArgument);
    {
      // The column path stores BF16 rows only.
      static std::int64_t slot[1];
      static float clip[1];
      StoreKvParams c = t;
      c.path = StoreKvPath::kFloat32Columns;
      c.int2_slot = slot;
      c.k_codes = c.v_codes = bytes;
      c.k_scale_zero = c.v_scale_zero = reinterpret_cast<bf16_bits*>(bytes);
      c.k_clip = c.v_clip = clip;
      EXPECT_EQ(store_kv(c), Status::kUnsupported);
      EXPECT_NE(std::string(last_error_message()).find("BF16 rows only"), std::string::npos);
      c.int2_slot = nullptr;
      EXPECT_EQ(store_kv(c), Status::kOk);  // nothing to store
    }
    t.path = StoreKvPath::kTensorCore;
    t.prepared = bytes + 8;
    EXPECT_EQ(store_kv(t), Status::kInvalidArgument);
    EXPECT_NE(std::string(last_error_message()).find("prepared"), std::string::npos);
    t.prepared = nullptr;
    {
      // A side without a rotation arrives rotated, so it must arrive centred (and smoothed) too.
      alignas(16) static float mean[128];
      StoreKvParams r = t;
      r.v_rotation = nullptr;
      EXPECT_EQ(store_kv(r), Status::kOk);  // nothing to store
      r.v_mean = mean;
      EXPECT_EQ(store_kv(r), Status::kInvalidArgument);
      EXPECT_NE(std::string(last_error_message()).find("v_mean given without v_rotation"),
                std::string::npos);
      r.v_mean = nullptr;
      r.k_rotation = nullptr;
      r.k_smooth = mean;
      EXPECT_EQ(store_kv(r), Status::kInvalidArgument);
      EXPECT_NE(std::string(last_error_message()).find("k_smooth given without k_rotation"),
                std::string::npos);
      r.k_smooth = nullptr;
      EXPECT_EQ(store_kv(r), Status::kOk);
      EXPECT_EQ(prepare_store_kv(r, bytes), Status::kOk);  // nothing to prepare
    }
    // The prepared rotation: sizes, and refusals before anything is launched.
    EXPECT_EQ(store_kv_prepared_bytes(8, 128), std::size_t{2} * 8 * (4 * 128 * 128 + 4 * 128));
    EXPECT_EQ(store_kv_prepared_bytes(8, 256), std::size_t{2} * 8 * (4 * 256 * 256 + 4 * 256));
    EXPECT_EQ(store_kv_prepared_bytes(8, 96), 0u);
    EXPECT_EQ(store_kv_prepared_bytes(0, 128), 0u);
    EXPECT_EQ(prepare_store_kv(t, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(prepare_store_kv(t, bytes + 8), Status::kInvalidArgument);
    t.head_dim = 96;
    EXPECT_EQ(prepare_store_kv(t, bytes), Status::kUnsupported);
  }
  DemotePagesParams dp;
  EXPECT_EQ(demote_pages(dp), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error_message()), "");
  // The row-per-thread kernel moves rows as 16-byte vectors: a pool off that alignment is refused
  // before anything is read (the addresses below are never dereferenced).
  static std::int32_t pairs[2] = {0, 0};
  static float clip = 0.96f;
  alignas(16) static std::uint8_t pool[64];
  dp.num_pages = 0;
  dp.num_kv_heads = 1;
  dp.head_dim = 128;
  dp.page_size = 16;
  dp.page_pairs = pairs;
  dp.k_clip = dp.v_clip = &clip;
  dp.k_bf16 = dp.v_bf16 = reinterpret_cast<const bf16_bits*>(pool);
  dp.k_codes = pool + 4;
  dp.v_codes = pool;
  dp.k_scale_zero = dp.v_scale_zero = reinterpret_cast<bf16_bits*>(pool);
  dp.kernel = DemoteKernel::kRowPerThread;
  EXPECT_EQ(demote_pages(dp), Status::kInvalidArgument);
  EXPECT_NE(std::string(last_error_message()).find("aligned"), std::string::npos);
  dp.kernel = DemoteKernel::kWarpBatched;
  EXPECT_EQ(demote_pages(dp), Status::kOk);  // nothing to do, any alignment
}

}  // namespace
