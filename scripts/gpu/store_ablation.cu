// Times store_kv into INT2 and into BF16 (tensor cores, rotation prepared; 32768 tokens x 8 KV
// heads, d 128 unless STORE_ABLATION_TOKENS / STORE_ABLATION_HEAD_DIM say otherwise) for
// scripts/gpu/store-ablation, which links it against int2_cache.cu built with
// each OSCAR_STORE_ABLATE_* switch. Torch-free. Rows: gaussian bf16 (none that the
// one-row-per-thread quantizer declines); keys centred and smoothed, both rotated by a signed
// Hadamard matrix per head; clip 0.96 for keys, 0.96 and then 0.92 for values.
// With STORE_ABLATION_ARRIVING=values the values arrive rotated (v_rotation null: R_V folded into
// v_proj), so the keys' tensor-core store takes them beside it; =both: both sides arrive rotated
// (store_kv_rows_kernel alone). Built with OSCAR_STORE_TRACE=1 (with int2_cache.cu), it prints
// the timeline of the store's steps after each clip's figures.
// With STORE_ABLATION_DEMOTE=1 it also times demote_pages (DemoteKernel::kAuto) over every page of
// the BF16 pools the store filled, into the INT2 pools: the bulk demotion after a prefill.
// Usage: store_ablation NAME [ITERATIONS]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_timing.cuh"
#include "oscar/kernels/int2_cache.h"

using namespace oscar::kernels;

#if OSCAR_STORE_TRACE
// Defined in int2_cache.cu when it is built with OSCAR_STORE_TRACE=1 (as this driver then is).
namespace oscar::kernels {
Status store_trace_clear();
Status store_trace_report(const char* label);
}  // namespace oscar::kernels
#endif

static std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

template <class T>
T* dev(std::size_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, n * sizeof(T)));
  CK(cudaMemset(p, 0, n * sizeof(T)));
  return p;
}

static std::uint64_t hash_dev(const void* p, std::size_t bytes) {
  std::vector<unsigned char> h(bytes);
  CK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
  std::uint64_t x = 1469598103934665603ull;
  for (unsigned char c : h) x = (x ^ c) * 1099511628211ull;
  return x;
}

int main(int argc, char** argv) {
  const char* name = argc > 1 ? argv[1] : "variant";
  const int iters = argc > 2 ? std::atoi(argv[2]) : 50;
  // STORE_ABLATION_TOKENS and STORE_ABLATION_HEAD_DIM (64, 128 or 256) change the shape.
  const char* tokens_env = std::getenv("STORE_ABLATION_TOKENS");
  const char* head_dim_env = std::getenv("STORE_ABLATION_HEAD_DIM");
  const int tokens = tokens_env != nullptr ? std::atoi(tokens_env) : 32768, hkv = 8,
            d = head_dim_env != nullptr ? std::atoi(head_dim_env) : 128, ps = 16;
  if (tokens < 1 || (d != 64 && d != 128 && d != 256)) {
    std::fprintf(stderr, "store_ablation: bad STORE_ABLATION_TOKENS or STORE_ABLATION_HEAD_DIM\n");
    return 1;
  }
  const std::size_t rows = static_cast<std::size_t>(tokens) * hkv;
  // The pools hold whole pages: token t goes to page t / ps, whose rows are every KV head's.
  const std::size_t pool_rows = static_cast<std::size_t>((tokens + ps - 1) / ps) * ps * hkv;
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> hk(rows * d), hv(rows * d);
  for (auto& x : hk) x = to_bf16(normal(rng));
  for (auto& x : hv) x = to_bf16(normal(rng));
  // A rotation: normalized Hadamard times random signs, per head.
  std::vector<float> rot(static_cast<std::size_t>(hkv) * d * d);
  for (int h = 0; h < hkv; ++h) {
    std::vector<float> sign(d);
    for (auto& s : sign) s = (rng() & 1) ? 1.0f : -1.0f;
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j)
        rot[(static_cast<std::size_t>(h) * d + i) * d + j] =
            sign[i] * ((__builtin_popcount(i & j) & 1) ? -1.0f : 1.0f) / std::sqrt(float(d));
  }
  std::vector<float> mean(hkv * d), smooth(hkv * d);
  for (auto& m : mean) m = 0.3f * normal(rng);
  for (auto& s : smooth) s = 0.5f + 0.75f * (rng() % 1000) / 1000.0f;
  std::vector<std::int64_t> slot(tokens);
  for (int i = 0; i < tokens; ++i) slot[i] = i;

  auto* k = dev<bf16_bits>(rows * d);
  auto* v = dev<bf16_bits>(rows * d);
  CK(cudaMemcpy(k, hk.data(), rows * d * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(v, hv.data(), rows * d * 2, cudaMemcpyHostToDevice));
  auto* drot = dev<float>(rot.size());
  CK(cudaMemcpy(drot, rot.data(), rot.size() * 4, cudaMemcpyHostToDevice));
  auto* dmean = dev<float>(mean.size());
  auto* dsmooth = dev<float>(smooth.size());
  CK(cudaMemcpy(dmean, mean.data(), mean.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsmooth, smooth.data(), smooth.size() * 4, cudaMemcpyHostToDevice));
  auto* dslot = dev<std::int64_t>(tokens);
  CK(cudaMemcpy(dslot, slot.data(), tokens * 8, cudaMemcpyHostToDevice));
  float* kclip = dev<float>(hkv);
  float* vclip = dev<float>(hkv);
  auto* kc = dev<std::uint8_t>(pool_rows * d / 4);
  auto* vc = dev<std::uint8_t>(pool_rows * d / 4);
  auto* ksz = dev<bf16_bits>(pool_rows * 2);
  auto* vsz = dev<bf16_bits>(pool_rows * 2);
  auto* kb = dev<bf16_bits>(pool_rows * d);
  auto* vb = dev<bf16_bits>(pool_rows * d);

  StoreKvParams p;
  p.num_tokens = tokens;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.page_size = ps;
  p.k = k;
  p.v = v;
  p.k_rotation = drot;
  p.v_rotation = drot;
  p.k_mean = dmean;
  p.k_smooth = dsmooth;
  p.k_clip = kclip;
  p.v_clip = vclip;
  p.k_codes = kc;
  p.v_codes = vc;
  p.k_scale_zero = ksz;
  p.v_scale_zero = vsz;
  p.k_bf16 = kb;
  p.v_bf16 = vb;
  const char* arriving = std::getenv("STORE_ABLATION_ARRIVING");
  if (arriving != nullptr && std::strcmp(arriving, "values") == 0) p.v_rotation = nullptr;
  if (arriving != nullptr && std::strcmp(arriving, "both") == 0) {
    p.k_rotation = p.v_rotation = nullptr;  // a plain quantize-and-pack: nothing to centre either
    p.k_mean = p.k_smooth = nullptr;
  }
  void* prepared = nullptr;
  CK(cudaMalloc(&prepared, store_kv_prepared_bytes(hkv, d)));
  if (prepare_store_kv(p, prepared) != Status::kOk) {
    std::fprintf(stderr, "store_ablation: prepare_store_kv failed (this build is for sm_90a)\n");
    return 2;
  }
  p.prepared = prepared;

  const double copy_gbs = copy_bandwidth_gbs();
  const double in_bytes = 2.0 * rows * d * 2, out_int2 = 2.0 * rows * (d / 4 + 4);
  for (float vclip_ratio : {0.96f, 0.92f}) {
    std::vector<float> kcv(hkv, 0.96f), vcv(hkv, vclip_ratio);
    CK(cudaMemcpy(kclip, kcv.data(), hkv * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(vclip, vcv.data(), hkv * 4, cudaMemcpyHostToDevice));
    StoreKvParams to_int2 = p, to_bf16 = p;
    to_int2.int2_slot = dslot;
    to_bf16.bf16_slot = dslot;
    CK(cudaMemset(kc, 0, pool_rows * d / 4));
    CK(cudaMemset(vc, 0, pool_rows * d / 4));
    if (store_kv(to_int2) != Status::kOk || store_kv(to_bf16) != Status::kOk) {
      std::fprintf(stderr, "store_ablation: store_kv failed (this build is for sm_90a)\n");
      return 3;
    }
    CK(cudaDeviceSynchronize());
    const std::uint64_t h =
        hash_dev(kc, pool_rows * d / 4) ^ (hash_dev(vc, pool_rows * d / 4) * 3) ^
        (hash_dev(ksz, pool_rows * 4) * 5) ^ (hash_dev(vsz, pool_rows * 4) * 7) ^
        (hash_dev(kb, pool_rows * d * 2) * 11);
    const double t_int2 = median_us([&] { store_kv(to_int2); }, iters);
    const double t_bf16 = median_us([&] { store_kv(to_bf16); }, iters);
#if OSCAR_STORE_TRACE
    if (store_trace_clear() != Status::kOk || store_kv(to_int2) != Status::kOk ||
        cudaDeviceSynchronize() != cudaSuccess ||
        store_trace_report(vclip_ratio > 0.94f ? "clip V 0.96" : "clip V 0.92") != Status::kOk) {
      std::fprintf(stderr, "store_ablation: the traced store failed\n");
      return 4;
    }
#endif
    const char* demote_env = std::getenv("STORE_ABLATION_DEMOTE");
    if (demote_env != nullptr && std::strcmp(demote_env, "1") == 0) {
      // Every page demoted in place of itself: BF16 page i into INT2 page i, keys and values.
      const int pages = static_cast<int>(pool_rows / (static_cast<std::size_t>(ps) * hkv));
      std::vector<std::int32_t> pairs(2 * static_cast<std::size_t>(pages));
      for (int i = 0; i < pages; ++i) pairs[2 * i] = pairs[2 * i + 1] = i;
      auto* dpairs = dev<std::int32_t>(pairs.size());
      CK(cudaMemcpy(dpairs, pairs.data(), pairs.size() * 4, cudaMemcpyHostToDevice));
      DemotePagesParams dp;
      dp.num_pages = pages;
      dp.num_kv_heads = hkv;
      dp.head_dim = d;
      dp.page_size = ps;
      dp.page_pairs = dpairs;
      dp.k_bf16 = kb;
      dp.v_bf16 = vb;
      dp.k_clip = kclip;
      dp.v_clip = vclip;
      dp.k_codes = kc;
      dp.v_codes = vc;
      dp.k_scale_zero = ksz;
      dp.v_scale_zero = vsz;
      if (demote_pages(dp) != Status::kOk) {
        std::fprintf(stderr, "store_ablation: demote_pages failed\n");
        return 5;
      }
      CK(cudaDeviceSynchronize());
      const std::uint64_t hd =
          hash_dev(kc, pool_rows * d / 4) ^ (hash_dev(vc, pool_rows * d / 4) * 3) ^
          (hash_dev(ksz, pool_rows * 4) * 5) ^ (hash_dev(vsz, pool_rows * 4) * 7);
      const double t_demote = median_us([&] { demote_pages(dp); }, iters);
      const double demote_bytes = 2.0 * pool_rows * d * 2 + 2.0 * pool_rows * (d / 4 + 4);
      const double dgbs = demote_bytes / (t_demote * 1e3);
      std::printf(
          "%-12s %5d pages d %3d clip K 0.96 V %.2f: demotion %6.1f us, %5.0f GB/s (%2.0f%% of "
          "copy); demoted bits %016llx\n",
          name, pages, d, vclip_ratio, t_demote, dgbs, 100.0 * dgbs / copy_gbs,
          static_cast<unsigned long long>(hd));
      CK(cudaFree(dpairs));
    }
    const double gbs = (in_bytes + out_int2) / (t_int2 * 1e3);
    std::printf(
        "%-12s %5d tokens d %3d clip K 0.96 V %.2f: into INT2 %6.1f us, %5.0f GB/s (%2.0f%% of "
        "copy); into BF16 %6.1f us; stored bits %016llx\n",
        name, tokens, d, vclip_ratio, t_int2, gbs, 100.0 * gbs / copy_gbs, t_bf16,
        static_cast<unsigned long long>(h));
  }
  return 0;
}
