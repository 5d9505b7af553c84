// oscar-bench: decode attention over the paged INT2 cache vs the same kernel over an all-BF16
// cache, against the card's measured copy bandwidth, plus demotion (quantize-and-pack) and store
// throughput, and a whole decode step launched call by call and as a CUDA graph.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nvtx3/nvToolsExt.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "oscar/kernels/cuda_check.h"
#include "oscar/kernels/int2_cache.h"

#if OSCAR_DECODE_TRACE
namespace oscar::kernels {  // timing studies only: int2_cache.cu built with the same switch
Status decode_trace_clear();
Status decode_trace_report(const char* label);
}  // namespace oscar::kernels
#endif

namespace {

using namespace oscar::kernels;

struct Options {
  std::vector<int> contexts = {4096, 16384, 32768, 131072};
  std::vector<int> batches = {1, 8, 32};
  int q_heads = 32, kv_heads = 8, head_dim = 128, page_size = 16, sink = 64, recent = 256;
  int iters = 20;
  std::string flush = "read";  // how L2 is emptied before a timed run: read, write
  int layers = 36;             // Qwen3-8B: for the whole-model memory figure and the decode step
  int step_context = 4096;     // context of the decode-step figure
  int step_steps = 200;        // timed steps of the decode-step figure (0: skip it)
  // The calls of the decode step launched as programmatic dependents in its "+PDL" columns.
  std::vector<std::string> step_pdl = {"store", "demote", "decode"};
  // The calls a layer of the decode step makes (leaving one out shows its share of a step).
  std::vector<std::string> step_calls = {"store", "demote", "decode"};
  double budget_gib = 40.0;  // fixed KV memory budget for the largest batch at 128K
  // The figures to measure (a quick sweep of one of them skips the others' minutes).
  std::vector<std::string> sections = {"decode", "demote", "store", "step"};
  // The decode figure without its BF16 and CUDA-core columns (a quick comparison of builds).
  bool int2_only = false;
  std::string json_path;

  bool runs(const char* section) const {
    return std::find(sections.begin(), sections.end(), section) != sections.end();
  }
};

[[noreturn]] void die(const std::string& what) {
  std::cerr << "oscar-bench: " << what << ": " << last_error_message() << "\n";
  std::exit(1);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::cerr << "oscar-bench: " << what << ": " << cudaGetErrorString(e) << "\n";
    std::exit(1);
  }
}

struct Buffer {
  void* ptr = nullptr;
  explicit Buffer(std::size_t bytes) {
    check(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 16)), "cudaMalloc");
    // Zeroed: a decode workspace's merge counters must start at zero.
    check(cudaMemset(ptr, 0, std::max<std::size_t>(bytes, 16)), "cudaMemset");
  }
  ~Buffer() { cudaFree(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

// Copies a host vector to the start of a device buffer.
template <typename T>
void upload(const Buffer& b, const std::vector<T>& host) {
  check(cudaMemcpy(b.ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "copy");
}

// Fills a buffer with bf16 values of N(0, 1) (or random bytes): the kernels' speed does not depend
// on the values, but NaN-free data keeps the softmax honest.
void fill_bf16(Buffer& b, std::size_t count, std::mt19937& rng) {
  std::vector<std::uint16_t> host(std::min<std::size_t>(count, 1 << 20));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& h : host) {
    float v = normal(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h = static_cast<std::uint16_t>(bits >> 16);
  }
  for (std::size_t off = 0; off < count; off += host.size()) {
    const std::size_t n = std::min(host.size(), count - off);
    check(cudaMemcpy(b.as<std::uint16_t>() + off, host.data(), n * 2, cudaMemcpyHostToDevice),
          "fill");
  }
}

EvictMode g_evict_mode = EvictMode::kRead;
// --flush none: each timed run finds L2 as the run before left it (back-to-back calls).
bool g_flush_none = false;

// An NVTX range over a part of the benchmark, so that profilers can select it by name (e.g.
// scripts/gpu-check profile-store: ncu --nvtx --nvtx-include "store_kv-int2-auto-prepared/").
class ProfileRange {
 public:
  explicit ProfileRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
  ~ProfileRange() { nvtxRangePop(); }
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;
};

// Median time in microseconds of `fn` over `iters` runs, events around each run. Before each run
// 256 MiB are streamed through L2 (50 MB on H100), so that every run reads its cache from HBM as a
// decode step over a model's layers does, and the GPU is kept busy while the host enqueues the
// run, so that host-side launch costs are not timed (as in a CUDA graph). The default flush reads
// (L2 is left with clean lines, as after the weight-reading GEMMs that precede attention);
// --flush write memsets instead, and the timed run then also pays for writing ~50 MB of dirty
// lines back. scripts/gpu/bench_sdpa.py times torch the same way.
// `stream`: where fn launches (the events go there too); flush_l2 false keeps L2 as fn left it.
// Streams 256 MiB through L2 on `stream` (read, or written with --flush write), so that what
// runs next reads its data from HBM.
void flush_l2_cache(cudaStream_t stream) {
  if (g_flush_none) return;
  constexpr std::size_t kBytes = std::size_t(256) << 20;
  static Buffer scratch(kBytes);
  if (evict_l2(scratch.ptr, kBytes, g_evict_mode, stream) != Status::kOk) {
    check(cudaGetLastError(), "L2 flush");
  }
}

template <typename Fn>
double time_us(Fn&& fn, int iters, cudaStream_t stream = nullptr, bool flush_l2 = true) {
  for (int i = 0; i < 3; ++i) fn();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    if (flush_l2) flush_l2_cache(stream);
    cudaEventRecord(start, stream);
    fn();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float t = 0.0f;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

double copy_bandwidth_gbs(int iters) {
  const std::size_t bytes = std::size_t(2) << 30;
  Buffer a(bytes), b(bytes);
  check(cudaMemset(a.ptr, 1, bytes), "memset");
  const double us =
      time_us([&] { cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice); }, iters);
  return 2.0 * static_cast<double>(bytes) / (us * 1e3);  // read + write, GB/s
}

// The decode parameters both cache kinds share.
DecodeParams base_params(int batch, int hq, int hkv, int d, int ps, const bf16_bits* q) {
  DecodeParams p;
  p.batch = batch;
  p.num_q_heads = hq;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.page_size = ps;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.q = q;
  return p;
}

// A store of `tokens` rows a KV head with its shape set (no buffers yet).
StoreKvParams store_shape(int tokens, int hkv, int d, int ps) {
  StoreKvParams p;
  p.num_tokens = tokens;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.page_size = ps;
  return p;
}

// A demotion of `pages` page pairs with its shape set (no buffers yet).
DemotePagesParams demote_shape(int pages, int hkv, int d, int ps) {
  DemotePagesParams p;
  p.num_pages = pages;
  p.num_kv_heads = hkv;
  p.head_dim = d;
  p.page_size = ps;
  return p;
}

// A paged mixed-precision cache of `batch` sequences of `context` tokens, random contents: the sink
// and the recent window in BF16 pages, the rest in INT2 pages, with the decode parameters over it.
struct MixedCache {
  int sink_len = 0, recent_len = 0, int2_tokens = 0, sink_pages = 0, recent_pages = 0,
      int2_pages = 0;
  std::unique_ptr<Buffer> k, v, codes_k, codes_v, scale_zero_k, scale_zero_v, bf16_table,
      int2_table, sink, int2, recent;
  int batch, hq, hkv, d, ps;

  MixedCache(int batch_, int context, const Options& o, std::mt19937& rng)
      : batch(batch_), hq(o.q_heads), hkv(o.kv_heads), d(o.head_dim), ps(o.page_size) {
    sink_pages = (o.sink + ps - 1) / ps;
    recent_pages = (o.recent + ps - 1) / ps;
    int2_tokens = std::max(0, context - o.sink - o.recent);
    int2_pages = (int2_tokens + ps - 1) / ps;
    sink_len = std::min(context, o.sink);
    recent_len = std::min(context - sink_len, o.recent);
    const std::size_t bf16_rows = static_cast<std::size_t>(batch) * bf16_stride() * hkv * ps;
    const std::size_t int2_rows = static_cast<std::size_t>(batch) * int2_stride() * hkv * ps;
    k = std::make_unique<Buffer>(bf16_rows * d * 2);
    v = std::make_unique<Buffer>(bf16_rows * d * 2);
    fill_bf16(*k, bf16_rows * d, rng);
    fill_bf16(*v, bf16_rows * d, rng);
    codes_k = std::make_unique<Buffer>(int2_rows * d / 4);
    codes_v = std::make_unique<Buffer>(int2_rows * d / 4);
    scale_zero_k = std::make_unique<Buffer>(int2_rows * 4);
    scale_zero_v = std::make_unique<Buffer>(int2_rows * 4);
    check(cudaMemset(codes_k->ptr, 0x1b, int2_rows * d / 4), "memset");
    check(cudaMemset(codes_v->ptr, 0xe4, int2_rows * d / 4), "memset");
    fill_bf16(*scale_zero_k, int2_rows * 2, rng);
    fill_bf16(*scale_zero_v, int2_rows * 2, rng);
    // Every sequence's pages in pool order.
    auto table = [&](int stride) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(batch) * stride);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i);
      auto buffer = std::make_unique<Buffer>(ids.size() * 4);
      upload(*buffer, ids);
      return buffer;
    };
    bf16_table = table(bf16_stride());
    int2_table = table(int2_stride());
    auto lengths = [&](int length) {
      auto buffer = std::make_unique<Buffer>(static_cast<std::size_t>(batch) * 4);
      upload(*buffer, std::vector<std::int32_t>(batch, length));
      return buffer;
    };
    sink = lengths(sink_len);
    int2 = lengths(int2_tokens);
    recent = lengths(recent_len);
  }
  int bf16_stride() const { return sink_pages + recent_pages; }
  int int2_stride() const { return std::max(int2_pages, 1); }
  // The decode over this cache (no output, workspace or path yet).
  DecodeParams params(const bf16_bits* q) const {
    DecodeParams p = base_params(batch, hq, hkv, d, ps, q);
    p.k_bf16 = k->as<bf16_bits>();
    p.v_bf16 = v->as<bf16_bits>();
    p.k_codes = codes_k->as<std::uint8_t>();
    p.v_codes = codes_v->as<std::uint8_t>();
    p.k_scale_zero = scale_zero_k->as<bf16_bits>();
    p.v_scale_zero = scale_zero_v->as<bf16_bits>();
    p.bf16_block_table = bf16_table->as<std::int32_t>();
    p.int2_block_table = int2_table->as<std::int32_t>();
    p.bf16_table_stride = bf16_stride();
    p.int2_table_stride = int2_stride();
    p.sink_len = sink->as<std::int32_t>();
    p.int2_len = int2->as<std::int32_t>();
    p.recent_len = recent->as<std::int32_t>();
    p.max_pages_per_sequence = sink_pages + int2_pages + recent_pages;
    p.max_bf16_pages_per_sequence = bf16_stride();
    return p;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Decode attention speed: INT2 paged cache vs BF16, against copy bandwidth"};
  app.add_option("--contexts", o.contexts, "Context lengths")->delimiter(',');
  app.add_option("--batches", o.batches, "Batch sizes")->delimiter(',');
  app.add_option("--q-heads", o.q_heads, "Query heads")->default_val(32);
  app.add_option("--kv-heads", o.kv_heads, "KV heads")->default_val(8);
  app.add_option("--head-dim", o.head_dim, "head_dim (64, 128, 256)")->default_val(128);
  app.add_option("--page-size", o.page_size, "Tokens per page (8 or 16)")->default_val(16);
  app.add_option("--sink", o.sink, "S0: BF16 sink tokens of the INT2 cache")->default_val(64);
  app.add_option("--recent", o.recent, "W: BF16 recent tokens of the INT2 cache")->default_val(256);
  app.add_option("--iters", o.iters, "Timed runs per point (median reported)")->default_val(20);
  app.add_option("--layers", o.layers,
                 "Layers of the model for the memory figure and the decode step")
      ->default_val(36);
  app.add_option("--step-context", o.step_context, "Context of the decode-step figure")
      ->default_val(4096);
  app.add_option("--step-steps", o.step_steps,
                 "Timed steps of the decode-step figure, calls one by one and a CUDA graph (0: "
                 "skip it)")
      ->default_val(200);
  app.add_option("--step-pdl", o.step_pdl,
                 "Calls of the decode step launched with enable_pdl in its +PDL columns")
      ->delimiter(',')
      ->check(CLI::IsMember({"store", "demote", "decode"}));
  app.add_option("--step-calls", o.step_calls,
                 "Calls a layer of the decode step makes (leave one out to see its share)")
      ->delimiter(',')
      ->check(CLI::IsMember({"store", "demote", "decode"}));
  app.add_option("--budget-gib", o.budget_gib, "KV memory budget for the largest-batch figure")
      ->default_val(40.0);
  app.add_option("--flush", o.flush,
                 "How L2 is emptied before each timed run: read (a 256 MiB read, clean lines), "
                 "write (a 256 MiB memset, dirty lines written back during the run) or none (L2 "
                 "as the run before left it; host launch costs may show in the times)")
      ->check(CLI::IsMember({"read", "write", "none"}))
      ->default_val("read");
  app.add_option("--sections", o.sections,
                 "Figures to measure: decode (attention), demote, store, step (a decode step over "
                 "the layers); the memory figure is always printed")
      ->delimiter(',')
      ->check(CLI::IsMember({"decode", "demote", "store", "step"}));
  app.add_flag("--int2-only", o.int2_only,
               "Decode figure: time the INT2 decode alone, not the kernel's BF16 variant and the "
               "CUDA-core path (quicker, for comparing builds of the kernels)");
  app.add_option("--json", o.json_path, "Write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  g_evict_mode = o.flush == "write" ? EvictMode::kWrite : EvictMode::kRead;
  g_flush_none = o.flush == "none";
  if (cuda_device_count() == 0) {
    std::cerr << "oscar-bench: no CUDA device; this benchmark needs a GPU\n";
    return 1;
  }
  DeviceInfo info;
  cuda_device_info(0, &info);
  const int d = o.head_dim, ps = o.page_size, hkv = o.kv_heads, hq = o.q_heads;
  std::mt19937 rng(1);

  const double copy_gbs = copy_bandwidth_gbs(o.iters);
  fmt::print("device {} ({} SMs); copy bandwidth {:.0f} GB/s (cudaMemcpy D2D, read + write)\n",
             info.name, info.multiprocessors, copy_gbs);
  fmt::print(
      "shape: {} q heads, {} KV heads, head_dim {}, page {}, INT2 cache: sink {} + recent {} "
      "BF16; L2 flushed by a 256 MiB {} before each run\n\n",
      hq, hkv, d, ps, o.sink, o.recent, o.flush);
  fmt::print("{:>6} {:>8}  {:>10} {:>9} {:>10} {:>9} {:>7}  {:>8} {:>12}\n", "batch", "context",
             "bf16 us", "bf16 GB/s", "int2 us", "int2 GB/s", "of copy", "speedup", "int2 simt us");

  nlohmann::json points = nlohmann::json::array();
  for (int batch : o.runs("decode") ? o.batches : std::vector<int>{}) {
    for (int context : o.contexts) {
      const int pages_all = (context + ps - 1) / ps;
      const int int2_tokens = std::max(0, context - o.sink - o.recent);
      const std::size_t bf16_row = static_cast<std::size_t>(d) * 2;
      // BF16 cache: every token in BF16 pages.
      const std::size_t bf16_pool_rows = static_cast<std::size_t>(batch) * pages_all * hkv * ps;
      const std::size_t bf16_bytes = 2 * bf16_pool_rows * bf16_row;
      if (!o.int2_only && bf16_bytes > (std::size_t(70) << 30)) {
        fmt::print("{:>6} {:>8}  skipped: {:.1f} GiB of BF16 cache does not fit\n", batch, context,
                   static_cast<double>(bf16_bytes) / (1 << 30));
        continue;
      }
      double bf16_us = 0.0, int2_us = 0.0, int2_simt_us = 0.0, bf16_read = 0.0, int2_read = 0.0;
      Buffer q(static_cast<std::size_t>(batch) * hq * d * 2),
          out(static_cast<std::size_t>(batch) * hq * d * 2);
      fill_bf16(q, static_cast<std::size_t>(batch) * hq * d, rng);
      if (!o.int2_only) {
        Buffer k(bf16_pool_rows * bf16_row), v(bf16_pool_rows * bf16_row);
        fill_bf16(k, bf16_pool_rows * d, rng);
        fill_bf16(v, bf16_pool_rows * d, rng);
        std::vector<std::int32_t> table(static_cast<std::size_t>(batch) * pages_all);
        for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<std::int32_t>(i);
        std::vector<std::int32_t> zeros(batch, 0), lens(batch, context);
        Buffer tab(table.size() * 4), z(batch * 4), l(batch * 4), dummy(64);
        upload(tab, table);
        upload(z, zeros);
        upload(l, lens);
        DecodeParams p = base_params(batch, hq, hkv, d, ps, q.as<bf16_bits>());
        p.k_bf16 = k.as<bf16_bits>();
        p.v_bf16 = v.as<bf16_bits>();
        p.k_codes = p.v_codes = dummy.as<std::uint8_t>();
        p.k_scale_zero = p.v_scale_zero = dummy.as<bf16_bits>();
        p.bf16_block_table = tab.as<std::int32_t>();
        p.int2_block_table = tab.as<std::int32_t>();
        p.bf16_table_stride = p.int2_table_stride = pages_all;
        p.sink_len = z.as<std::int32_t>();
        p.int2_len = z.as<std::int32_t>();
        p.recent_len = l.as<std::int32_t>();
        p.max_pages_per_sequence = pages_all;
        p.out = out.as<bf16_bits>();
        p.path = DecodePath::kSimt;  // no INT2 pages: the BF16 kernel alone
        Buffer ws(decode_workspace_bytes(p));
        p.workspace = ws.ptr;
        p.workspace_bytes = decode_workspace_bytes(p);
        if (decode_attention(p) != Status::kOk) die("bf16 decode");
        bf16_us = time_us([&] { decode_attention(p); }, o.iters);
        bf16_read = static_cast<double>(batch) * context * hkv * 2.0 * bf16_row;
      }
      {
        MixedCache cache(batch, context, o, rng);
        const int sink_len = cache.sink_len, recent_len = cache.recent_len;
        DecodeParams p = cache.params(q.as<bf16_bits>());
        p.out = out.as<bf16_bits>();
        DecodeParams simt = p;
        simt.path = DecodePath::kSimt;
        const std::size_t ws_bytes =
            std::max(decode_workspace_bytes(p), decode_workspace_bytes(simt));
        Buffer ws(ws_bytes);
        p.workspace = ws.ptr;
        p.workspace_bytes = ws_bytes;
        if (decode_attention(p) != Status::kOk) die("int2 decode");
        int2_us = time_us([&] { decode_attention(p); }, o.iters);
#if OSCAR_DECODE_TRACE
        {
          check(cudaDeviceSynchronize(), "trace");
          flush_l2_cache(nullptr);
          if (decode_trace_clear() != Status::kOk || decode_attention(p) != Status::kOk) {
            die("decode trace");
          }
          check(cudaDeviceSynchronize(), "trace");
          decode_trace_report(fmt::format("batch {} context {}", batch, context).c_str());
        }
#endif
        // The CUDA-core path over the same cache, for comparison.
        if (!o.int2_only) {
          p.path = DecodePath::kSimt;
          if (decode_attention(p) != Status::kOk) die("int2 decode (simt)");
          int2_simt_us = time_us([&] { decode_attention(p); }, o.iters);
        }
        int2_read = static_cast<double>(batch) * hkv * 2.0 *
                    (static_cast<double>(int2_tokens) * (d / 4 + 4) +
                     static_cast<double>(sink_len + recent_len) * bf16_row);
      }
      const double bf16_gbs = bf16_read / (bf16_us * 1e3), int2_gbs = int2_read / (int2_us * 1e3);
      // --int2-only: the columns not measured print as "-" and go to the JSON as null.
      auto cell = [&](double value, const char* spec) {
        return o.int2_only ? std::string("-") : fmt::format(fmt::runtime(spec), value);
      };
      auto measured = [&](double value) {
        return o.int2_only ? nlohmann::json(nullptr) : nlohmann::json(value);
      };
      fmt::print("{:>6} {:>8}  {:>10} {:>9} {:>10.1f} {:>9.0f} {:>6.0f}%  {:>8} {:>12}\n", batch,
                 context, cell(bf16_us, "{:.1f}"), cell(bf16_gbs, "{:.0f}"), int2_us, int2_gbs,
                 100.0 * int2_gbs / copy_gbs, cell(bf16_us / int2_us, "{:.2f}x"),
                 cell(int2_simt_us, "{:.1f}"));
      points.push_back({{"batch", batch},
                        {"context", context},
                        {"bf16_us", measured(bf16_us)},
                        {"bf16_bytes", measured(bf16_read)},
                        {"bf16_gbs", measured(bf16_gbs)},
                        {"int2_us", int2_us},
                        {"int2_bytes", int2_read},
                        {"int2_gbs", int2_gbs},
                        {"int2_fraction_of_copy", int2_gbs / copy_gbs},
                        {"int2_simt_us", measured(int2_simt_us)},
                        {"speedup_vs_own_bf16", measured(bf16_us / int2_us)}});
    }
  }

  // Demotion (quantize-and-pack) throughput: many full pages of BF16 rows into INT2, with the
  // default kernel (the headline figure) and each kernel, at clip ratios 0.96 for both and at the
  // defaults (K 0.96, V 0.92: a longer clip selection for values), and the time of a small
  // demotion (64 pages, a decode step's worth at a large batch).
  double demote_gbs = 0.0;
  nlohmann::json demotions = nlohmann::json::array();
  auto bench_demotion = [&](int pages, float k_clip, float v_clip, DemoteKernel kernel,
                            bool print_line = true) {
    const std::size_t rows = static_cast<std::size_t>(pages) * hkv * ps;
    Buffer k(rows * d * 2), v(rows * d * 2), kc(rows * d / 4), vc(rows * d / 4), ksz(rows * 4),
        vsz(rows * 4), kclip(hkv * 4), vclip(hkv * 4), pairs(pages * 8);
    fill_bf16(k, rows * d, rng);
    fill_bf16(v, rows * d, rng);
    std::vector<std::int32_t> pp(static_cast<std::size_t>(pages) * 2);
    for (int i = 0; i < pages; ++i) pp[2 * i] = pp[2 * i + 1] = i;
    upload(kclip, std::vector<float>(hkv, k_clip));
    upload(vclip, std::vector<float>(hkv, v_clip));
    upload(pairs, pp);
    DemotePagesParams p = demote_shape(pages, hkv, d, ps);
    p.page_pairs = pairs.as<std::int32_t>();
    p.k_bf16 = k.as<bf16_bits>();
    p.v_bf16 = v.as<bf16_bits>();
    p.k_clip = kclip.as<float>();
    p.v_clip = vclip.as<float>();
    p.k_codes = kc.as<std::uint8_t>();
    p.v_codes = vc.as<std::uint8_t>();
    p.k_scale_zero = ksz.as<bf16_bits>();
    p.v_scale_zero = vsz.as<bf16_bits>();
    p.kernel = kernel;
    if (demote_pages(p) != Status::kOk) die("demote");
    const double us = time_us([&] { demote_pages(p); }, o.iters);
    const double bytes = 2.0 * static_cast<double>(rows) * (d * 2 + d / 4 + 4);
    const double gbs = bytes / (us * 1e3);
    const char* name = kernel == DemoteKernel::kRowPerThread  ? "row-per-thread"
                       : kernel == DemoteKernel::kWarpBatched ? "warp-batched"
                       : kernel == DemoteKernel::kWarpPerRow  ? "warp-per-row"
                                                              : "auto";
    demotions.push_back({{"kernel", name},
                         {"pages", pages},
                         {"k_clip", k_clip},
                         {"v_clip", v_clip},
                         {"us", us},
                         {"gbs", gbs},
                         {"fraction_of_copy", gbs / copy_gbs}});
    if (!print_line) return us;
    fmt::print(
        "demotion (quantize-and-pack, {}) of {} pages x {} heads, clip K {:.2f} V {:.2f}: "
        "{:.1f} us, {:.0f} GB/s ({:.0f}% of copy), {:.1f} M rows/s\n",
        name, pages, hkv, k_clip, v_clip, us, gbs, 100.0 * gbs / copy_gbs,
        2.0 * static_cast<double>(rows) / us);
    return us;
  };
  if (o.runs("demote")) {
    fmt::print("\n");
    {
      const int pages = 16384;
      const double rows = 2.0 * pages * hkv * ps;
      demote_gbs = rows * (d * 2 + d / 4 + 4) /
                   (bench_demotion(pages, 0.96f, 0.96f, DemoteKernel::kAuto) * 1e3);
    }
    for (const DemoteKernel kernel : {DemoteKernel::kWarpBatched, DemoteKernel::kRowPerThread}) {
      for (const float v_clip : {0.96f, 0.92f}) bench_demotion(16384, 0.96f, v_clip, kernel);
    }
    // Small demotions, a decode step's (a page or a few per sequence): latency by kernel.
    {
      const std::vector<DemoteKernel> kernels = {DemoteKernel::kAuto, DemoteKernel::kWarpPerRow,
                                                 DemoteKernel::kWarpBatched,
                                                 DemoteKernel::kRowPerThread};
      fmt::print(
          "demotion latency by pages (us; clip K 0.96 V 0.92)\n{:>6} {:>8} {:>13} {:>13} "
          "{:>15}\n",
          "pages", "auto", "warp-per-row", "warp-batched", "row-per-thread");
      for (const int pages : {1, 2, 4, 8, 16, 32, 64, 256}) {
        fmt::print("{:>6}", pages);
        for (const DemoteKernel kernel : kernels) {
          fmt::print(" {:>{}.1f}", bench_demotion(pages, 0.96f, 0.92f, kernel, false),
                     kernel == DemoteKernel::kAuto           ? 8
                     : kernel == DemoteKernel::kRowPerThread ? 15
                                                             : 13);
        }
        fmt::print("\n");
      }
    }
  }

  // Store (rotate + clip + quantize + pack) of a prefill chunk: new K/V rows of every KV head
  // rotated by R_K / R_V (d x d per head) and written as INT2 rows, or as BF16 rows; keys centred
  // and smoothed as in the default bundles (a mean and scales per channel), values plain. Each
  // path: float32 FMAs, and bf16 tensor cores with split operands (d 64 / 128).
  double store_int2_gbs = 0.0, store_bf16_gbs = 0.0;
  nlohmann::json stores = nlohmann::json::array(), store_sweep = nlohmann::json::array();
  if (o.runs("store")) {
    const int tokens = 32768;
    const std::size_t rows = static_cast<std::size_t>(tokens) * hkv;
    Buffer k(rows * d * 2), v(rows * d * 2), rot(static_cast<std::size_t>(hkv) * d * d * 4),
        clip(hkv * 4), slots(static_cast<std::size_t>(tokens) * 8), kc(rows * d / 4),
        vc(rows * d / 4), ksz(rows * 4), vsz(rows * 4), kb(rows * d * 2), vb(rows * d * 2),
        kmean(static_cast<std::size_t>(hkv) * d * 4),
        ksmooth(static_cast<std::size_t>(hkv) * d * 4);
    fill_bf16(k, rows * d, rng);
    fill_bf16(v, rows * d, rng);
    std::vector<float> identity(static_cast<std::size_t>(hkv) * d * d, 0.0f);
    for (int h = 0; h < hkv; ++h)
      for (int i = 0; i < d; ++i) identity[(static_cast<std::size_t>(h) * d + i) * d + i] = 1.0f;
    std::vector<float> clips(hkv, 0.96f);
    std::vector<std::int64_t> slot(tokens);
    for (int i = 0; i < tokens; ++i) slot[i] = i;
    upload(rot, identity);
    upload(clip, clips);
    upload(slots, slot);
    upload(kmean, std::vector<float>(static_cast<std::size_t>(hkv) * d, 0.0f));
    upload(ksmooth, std::vector<float>(static_cast<std::size_t>(hkv) * d, 1.0f));
    StoreKvParams p = store_shape(tokens, hkv, d, ps);
    p.k = k.as<bf16_bits>();
    p.v = v.as<bf16_bits>();
    p.k_rotation = p.v_rotation = rot.as<float>();  // the values do not change the work
    p.k_mean = kmean.as<float>();
    p.k_smooth = ksmooth.as<float>();
    p.k_clip = p.v_clip = clip.as<float>();
    p.k_codes = kc.as<std::uint8_t>();
    p.v_codes = vc.as<std::uint8_t>();
    p.k_scale_zero = ksz.as<bf16_bits>();
    p.v_scale_zero = vsz.as<bf16_bits>();
    p.k_bf16 = kb.as<bf16_bits>();
    p.v_bf16 = vb.as<bf16_bits>();
    // Tensor cores: mma.sync, then the default kernel (the warpgroup MMA on Hopper), building R'
    // from R in every block and then with the rotation prepared once (prepare_store_kv), as an
    // engine stores with it (PagedInt2Attention prepares one per layer).
    // At head_dim 256 the tensor-core store is the warpgroup MMA streaming the prepared rotation
    // (Hopper only; elsewhere the float32 path serves it).
    Buffer prepared(store_kv_prepared_bytes(hkv, d));
    if (prepare_store_kv(p, prepared.ptr) != Status::kOk) die("prepare_store_kv");
    bool tc256 = false;
    if (d == 256) {
      StoreKvParams probe = p;
      probe.num_tokens = 0;
      probe.path = StoreKvPath::kTensorCore;
      probe.prepared = prepared.ptr;
      tc256 = store_kv(probe) == Status::kOk;
    }
    // Then the sides that arrive rotated (StoreKvParams' rotation null): the values, as from an
    // engine that folds R_V into v_proj, and both sides (the quantize-and-pack alone).
    enum class Arriving { kNone, kValues, kBoth };
    struct StoreRun {
      StoreKvPath path;
      bool prepared;
      const char* name;
      Arriving arriving = Arriving::kNone;
      bool headline = false;
    };
    std::vector<StoreRun> runs = {{StoreKvPath::kFloat32, false, "float32"}};
    if (d != 256) {
      runs.insert(runs.end(),
                  {{StoreKvPath::kTensorCoreSync, false, "tensor cores (mma.sync)"},
                   {StoreKvPath::kTensorCore, false, "tensor cores"},
                   {StoreKvPath::kTensorCore, true, "tensor cores, rotation prepared"}});
      runs.push_back(
          {StoreKvPath::kAuto, true, "the default path, rotation prepared", Arriving::kNone, true});
      runs.push_back({StoreKvPath::kAuto, true,
                      "keys on the default path, prepared; values arrive rotated",
                      Arriving::kValues});
    } else if (tc256) {
      runs.push_back({StoreKvPath::kTensorCore, true, "tensor cores, rotation prepared"});
      runs.push_back(
          {StoreKvPath::kAuto, true, "the default path, rotation prepared", Arriving::kNone, true});
      runs.push_back({StoreKvPath::kAuto, true,
                      "keys on the default path, prepared; values arrive rotated",
                      Arriving::kValues});
    } else {
      runs.back().headline = true;
      runs.push_back({StoreKvPath::kAuto, false, "keys on the default path; values arrive rotated",
                      Arriving::kValues});
    }
    runs.push_back(
        {StoreKvPath::kAuto, false, "none, keys and values arrive rotated", Arriving::kBoth});
    fmt::print("\n");
    for (const StoreRun& run : runs) {
      StoreKvParams to_int2 = p, to_bf16 = p;
      to_int2.path = to_bf16.path = run.path;
      if (run.prepared) to_int2.prepared = to_bf16.prepared = prepared.ptr;
      if (run.arriving != Arriving::kNone) {
        to_int2.v_rotation = to_bf16.v_rotation = nullptr;
      }
      if (run.arriving == Arriving::kBoth) {
        to_int2.k_rotation = to_bf16.k_rotation = nullptr;
        to_int2.k_mean = to_bf16.k_mean = nullptr;
        to_int2.k_smooth = to_bf16.k_smooth = nullptr;
      }
      to_int2.int2_slot = slots.as<std::int64_t>();
      to_bf16.bf16_slot = slots.as<std::int64_t>();
      if (store_kv(to_int2) != Status::kOk || store_kv(to_bf16) != Status::kOk) die("store_kv");
      // Named for profilers: store_kv-<int2|bf16>-<path>[-prepared][-<side>_arriving].
      const char* path_key = run.path == StoreKvPath::kFloat32          ? "float32"
                             : run.path == StoreKvPath::kTensorCoreSync ? "mma_sync"
                             : run.path == StoreKvPath::kTensorCore     ? "tensor_core"
                                                                        : "auto";
      const std::string range_key =
          fmt::format("{}{}{}", path_key, run.prepared ? "-prepared" : "",
                      run.arriving == Arriving::kValues ? "-values_arriving"
                      : run.arriving == Arriving::kBoth ? "-both_arriving"
                                                        : "");
      double int2_us = 0, bf16_us = 0;
      {
        ProfileRange range("store_kv-int2-" + range_key);
        int2_us = time_us([&] { store_kv(to_int2); }, o.iters);
      }
      {
        ProfileRange range("store_kv-bf16-" + range_key);
        bf16_us = time_us([&] { store_kv(to_bf16); }, o.iters);
      }
      const double in_bytes = 2.0 * static_cast<double>(rows) * d * 2;
      const double int2_gbs =
          (in_bytes + 2.0 * static_cast<double>(rows) * (d / 4 + 4)) / (int2_us * 1e3);
      const double bf16_gbs = 2.0 * in_bytes / (bf16_us * 1e3);
      // The default path as an engine runs it (the last: prepared where tensor cores serve the
      // head size) gives the headline.
      if (run.headline) {
        store_int2_gbs = int2_gbs;
        store_bf16_gbs = bf16_gbs;
      }
      fmt::print(
          "store (rotation: {}; clip, quantize, pack) of {} tokens x {} heads: to INT2 "
          "{:.1f} us, {:.0f} GB/s ({:.0f}% of copy), {:.1f} M rows/s; to BF16 {:.1f} us, {:.0f} "
          "GB/s\n",
          run.name, tokens, hkv, int2_us, int2_gbs, 100.0 * int2_gbs / copy_gbs,
          2.0 * static_cast<double>(rows) / int2_us, bf16_us, bf16_gbs);
      stores.push_back(
          {{"path", run.name},
           {"prepared", run.prepared},
           {"arriving_rotated", run.arriving == Arriving::kNone     ? "none"
                                : run.arriving == Arriving::kValues ? "values"
                                                                    : "keys and values"},
           {"int2_us", int2_us},
           {"int2_gbs", int2_gbs},
           {"bf16_us", bf16_us},
           {"bf16_gbs", bf16_gbs}});
    }
    // Smaller stores (a decode step writes one token per sequence, a prefill chunk thousands):
    // the latency floor of each path and where one overtakes the other (StoreKvPath::kAuto's
    // choice rests on it).
    {
      // Columns of the table: a path, with or without the prepared rotation (head_dim 256 has
      // its tensor-core path only with one, and on Hopper).
      struct SweepColumn {
        StoreKvPath path;
        bool prepared;
        const char* title;
        const char* key;
        bool values_arrive_rotated = false;  // v_rotation null (R_V folded into v_proj)
      };
      std::vector<SweepColumn> columns = {{StoreKvPath::kFloat32, false, "float32", "float32"}};
      if (d != 256) {
        columns.insert(
            columns.end(),
            {{StoreKvPath::kTensorCoreSync, false, "mma.sync", "mma_sync"},
             {StoreKvPath::kTensorCore, false, "tensor cores", "tensor_core"},
             {StoreKvPath::kAuto, false, "auto", "auto"},
             {StoreKvPath::kTensorCoreSync, true, "prep. mma.sync", "prepared_mma_sync"},
             {StoreKvPath::kTensorCore, true, "prep. tensor c.", "prepared_tensor_core"},
             {StoreKvPath::kAuto, true, "prep. auto", "prepared_auto"},
             {StoreKvPath::kAuto, true, "prep. auto, V rot.", "prepared_auto_v_arriving", true}});
      } else {
        columns.insert(columns.end(),
                       {{StoreKvPath::kAuto, false, "auto", "auto"},
                        {StoreKvPath::kAuto, false, "auto, V rot.", "auto_v_arriving", true}});
        if (tc256) {
          columns.insert(
              columns.end(),
              {{StoreKvPath::kTensorCore, true, "prep. tensor c.", "prepared_tensor_core"},
               {StoreKvPath::kAuto, true, "prep. auto", "prepared_auto"},
               {StoreKvPath::kAuto, true, "prep. auto, V rot.", "prepared_auto_v_arriving", true}});
        }
      }
      fmt::print(
          "store time by token count (us; INT2 / BF16 destination; \"prep.\": the rotation "
          "prepared once; \"V rot.\": values arrive rotated; columns: the column path, BF16 "
          "only)\n{:>8}",
          "tokens");
      for (const SweepColumn& column : columns) fmt::print(" {:>15}", column.title);
      fmt::print(" {:>8}\n", "columns");
      for (const int n : {1, 8, 32, 64, 128, 512, 1024, 2048, 8192, 32768}) {
        nlohmann::json entry = {{"tokens", n}};
        fmt::print("{:>8}", n);
        for (const SweepColumn& column : columns) {
          StoreKvParams to_int2 = p, to_bf16 = p;
          to_int2.num_tokens = to_bf16.num_tokens = n;
          to_int2.path = to_bf16.path = column.path;
          if (column.prepared) to_int2.prepared = to_bf16.prepared = prepared.ptr;
          if (column.values_arrive_rotated) to_int2.v_rotation = to_bf16.v_rotation = nullptr;
          to_int2.int2_slot = slots.as<std::int64_t>();
          to_bf16.bf16_slot = slots.as<std::int64_t>();
          if (store_kv(to_int2) != Status::kOk || store_kv(to_bf16) != Status::kOk) die("store_kv");
          const double int2_us = time_us([&] { store_kv(to_int2); }, o.iters);
          const double bf16_us = time_us([&] { store_kv(to_bf16); }, o.iters);
          fmt::print(" {:>6.1f} / {:<6.1f}", int2_us, bf16_us);
          entry[fmt::format("{}_int2_us", column.key)] = int2_us;
          entry[fmt::format("{}_bf16_us", column.key)] = bf16_us;
        }
        StoreKvParams by_columns = p;
        by_columns.num_tokens = n;
        by_columns.path = StoreKvPath::kFloat32Columns;
        by_columns.bf16_slot = slots.as<std::int64_t>();
        if (store_kv(by_columns) != Status::kOk) die("store_kv");
        const double columns_us = time_us([&] { store_kv(by_columns); }, o.iters);
        fmt::print(" {:>8.1f}\n", columns_us);
        entry["columns_bf16_us"] = columns_us;
        store_sweep.push_back(entry);
      }
    }
  }

  // A decode step over a model's layers as an engine runs it. Per layer: the batch's new token
  // rotated into its recent window (both sides, the rotation prepared), a demotion list of one
  // pair a sequence (all padding but one: a sequence demotes a page every page_size steps), the
  // decode. Timed on the host clock over many steps, launched call by call and as one CUDA graph,
  // each with ordinary launches and as programmatic dependents (enable_pdl: a kernel starts while
  // the one before finishes), so that launch costs show. Every layer works on the same cache (L2
  // is not flushed here).
  nlohmann::json decode_steps = nlohmann::json::array();
  if (o.step_steps > 0 && o.runs("step")) {
    fmt::print(
        "\ndecode step of {} layers ({}; store: a token a sequence), context {}; us a "
        "step on the host clock over {} steps (calls one by one, one CUDA graph; +PDL: "
        "programmatic dependent launches; beside: graph+PDL with the demotion started beside the "
        "store, overlap_previous), then each call alone on the GPU (us a layer):\n{:>6}  "
        "{:>9} {:>9} {:>9} {:>9} {:>9} {:>7}  {:>7} {:>7} {:>7}\n",
        o.layers, fmt::join(o.step_calls, ", "), o.step_context, o.step_steps, "batch", "calls",
        "calls+PDL", "graph", "graph+PDL", "beside", "PDL", "store", "demote", "decode");
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    for (const int batch : o.batches) {
      MixedCache cache(batch, o.step_context, o, rng);
      const std::size_t rows = static_cast<std::size_t>(batch) * hkv;
      Buffer q(static_cast<std::size_t>(batch) * hq * d * 2),
          out(static_cast<std::size_t>(batch) * hq * d * 2), new_k(rows * d * 2),
          new_v(rows * d * 2), rotation(static_cast<std::size_t>(hkv) * d * d * 4), clip(hkv * 4),
          slots(static_cast<std::size_t>(batch) * 8), pairs(static_cast<std::size_t>(batch) * 8),
          prepared(store_kv_prepared_bytes(hkv, d));
      fill_bf16(q, static_cast<std::size_t>(batch) * hq * d, rng);
      fill_bf16(new_k, rows * d, rng);
      fill_bf16(new_v, rows * d, rng);
      std::vector<float> identity(static_cast<std::size_t>(hkv) * d * d, 0.0f);
      for (int h = 0; h < hkv; ++h)
        for (int i = 0; i < d; ++i) identity[(static_cast<std::size_t>(h) * d + i) * d + i] = 1.0f;
      upload(rotation, identity);
      upload(clip, std::vector<float>(hkv, 0.96f));
      // Sequence b's token goes to the first row of its window's last page; sequence 0 demotes
      // its window's first page into INT2 page 0, the others pass padding.
      std::vector<std::int64_t> slot(batch);
      std::vector<std::int32_t> pair(2 * static_cast<std::size_t>(batch), -1);
      for (int b = 0; b < batch; ++b) {
        slot[b] = (std::int64_t{b} * cache.bf16_stride() + cache.bf16_stride() - 1) * ps;
      }
      pair[0] = cache.sink_pages;
      pair[1] = 0;
      upload(slots, slot);
      upload(pairs, pair);

      StoreKvParams store = store_shape(batch, hkv, d, ps);
      store.k = new_k.as<bf16_bits>();
      store.v = new_v.as<bf16_bits>();
      store.k_rotation = store.v_rotation = rotation.as<float>();
      store.k_clip = store.v_clip = clip.as<float>();
      store.bf16_slot = slots.as<std::int64_t>();
      store.k_bf16 = cache.k->as<bf16_bits>();
      store.v_bf16 = cache.v->as<bf16_bits>();
      store.stream = stream;
      if (prepare_store_kv(store, prepared.ptr) != Status::kOk) die("prepare_store_kv");
      store.prepared = prepared.ptr;
      DemotePagesParams demote = demote_shape(batch, hkv, d, ps);
      demote.page_pairs = pairs.as<std::int32_t>();
      demote.k_bf16 = cache.k->as<bf16_bits>();
      demote.v_bf16 = cache.v->as<bf16_bits>();
      demote.k_clip = demote.v_clip = clip.as<float>();
      demote.k_codes = cache.codes_k->as<std::uint8_t>();
      demote.v_codes = cache.codes_v->as<std::uint8_t>();
      demote.k_scale_zero = cache.scale_zero_k->as<bf16_bits>();
      demote.v_scale_zero = cache.scale_zero_v->as<bf16_bits>();
      demote.stream = stream;
      DecodeParams decode = cache.params(q.as<bf16_bits>());
      decode.out = out.as<bf16_bits>();
      decode.stream = stream;
      Buffer workspace(decode_workspace_bytes(decode));
      decode.workspace = workspace.ptr;
      decode.workspace_bytes = decode_workspace_bytes(decode);
      const auto in_step = [&](const char* call) {
        return std::find(o.step_calls.begin(), o.step_calls.end(), call) != o.step_calls.end();
      };
      const bool step_store = in_step("store"), step_demote = in_step("demote"),
                 step_decode = in_step("decode");
      const auto step = [&] {
        for (int layer = 0; layer < o.layers; ++layer) {
          if (step_store && store_kv(store) != Status::kOk) die("store_kv");
          if (step_demote && demote_pages(demote) != Status::kOk) die("demote_pages");
          if (step_decode && decode_attention(decode) != Status::kOk) die("decode_attention");
        }
      };
      const auto host_us_per_step = [&](auto&& run) {
        run();  // warm-up
        check(cudaStreamSynchronize(stream), "warm-up");
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < o.step_steps; ++i) run();
        check(cudaStreamSynchronize(stream), "steps");
        const std::chrono::duration<double, std::micro> elapsed =
            std::chrono::steady_clock::now() - start;
        return elapsed.count() / o.step_steps;
      };
      const auto graph_us_per_step = [&] {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
        step();
        check(cudaStreamEndCapture(stream, &graph), "end capture");
        check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
        const double us =
            host_us_per_step([&] { check(cudaGraphLaunch(exec, stream), "graph launch"); });
        check(cudaGraphExecDestroy(exec), "graph");
        check(cudaGraphDestroy(graph), "graph");
        return us;
      };
      const auto set_pdl = [&](bool on) {
        const auto chosen = [&](const char* call) {
          return on && std::find(o.step_pdl.begin(), o.step_pdl.end(), call) != o.step_pdl.end();
        };
        store.enable_pdl = chosen("store");
        demote.enable_pdl = chosen("demote");
        decode.enable_pdl = chosen("decode");
      };
      const double calls_us = host_us_per_step(step);
      const double graph_us = graph_us_per_step();
      set_pdl(true);
      const double calls_pdl_us = host_us_per_step(step);
      const double graph_pdl_us = graph_us_per_step();
      // The step's demotion shares no page with its store (sequence 0's oldest window page
      // against every sequence's newest): it may start beside the store. Without a store just
      // before it there is nothing it may overlap (NaN).
      double graph_beside_us = std::numeric_limits<double>::quiet_NaN();
      if (step_store && step_demote) {
        demote.overlap_previous = true;
        graph_beside_us = graph_us_per_step();
        demote.overlap_previous = false;
      }
      set_pdl(false);
      // Where a layer's share goes: each call alone over the layers (median of o.iters runs, L2
      // as the calls leave it), per layer.
      const auto gpu_us_per_layer = [&](auto&& call) {
        const auto layers = [&] {
          for (int layer = 0; layer < o.layers; ++layer) call();
        };
        return time_us(layers, o.iters, stream, false) / o.layers;
      };
      const double store_us = gpu_us_per_layer([&] { store_kv(store); });
      const double demote_us = gpu_us_per_layer([&] { demote_pages(demote); });
      const double decode_us = gpu_us_per_layer([&] { decode_attention(decode); });
      fmt::print(
          "{:>6}  {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>6.2f}x  {:>7.1f} {:>7.1f} "
          "{:>7.1f}\n",
          batch, calls_us, calls_pdl_us, graph_us, graph_pdl_us, graph_beside_us,
          graph_us / graph_pdl_us, store_us, demote_us, decode_us);
      decode_steps.push_back({{"batch", batch},
                              {"context", o.step_context},
                              {"layers", o.layers},
                              {"calls_us", calls_us},
                              {"calls_pdl_us", calls_pdl_us},
                              {"graph_us", graph_us},
                              {"graph_pdl_us", graph_pdl_us},
                              {"graph_pdl_beside_us", graph_beside_us},
                              {"pdl_calls", o.step_pdl},
                              {"step_calls", o.step_calls},
                              {"layer_store_us", store_us},
                              {"layer_demote_us", demote_us},
                              {"layer_decode_us", decode_us}});
    }
    check(cudaStreamDestroy(stream), "stream");
  }

  // Memory: KV bytes per token per layer and the largest batch at 128K in the budget.
  const double bf16_tok = 2.0 * hkv * d * 2.0;
  const double int2_tok = 2.0 * hkv * (d / 4.0 + 4.0);
  const int ctx = 131072;
  const double int2_seq = int2_tok * (ctx - o.sink - o.recent) + bf16_tok * (o.sink + o.recent);
  const double budget = o.budget_gib * (1 << 30);
  fmt::print(
      "\nKV bytes per token per layer: BF16 {:.0f}, INT2 {:.0f} ({:.2f}x fewer); at 128K "
      "context per layer a sequence takes BF16 {:.1f} MiB, INT2 {:.1f} MiB\n",
      bf16_tok, int2_tok, bf16_tok / int2_tok, bf16_tok * ctx / (1 << 20), int2_seq / (1 << 20));
  const double bf16_seq_model = bf16_tok * ctx * o.layers, int2_seq_model = int2_seq * o.layers;
  const long long bf16_fit = static_cast<long long>(budget / bf16_seq_model);
  const long long int2_fit = static_cast<long long>(budget / int2_seq_model);
  fmt::print(
      "{} layers at 128K: BF16 {:.2f} GiB per sequence, INT2 {:.2f} GiB; in {:.0f} GiB of KV "
      "memory: BF16 batch {}, INT2 batch {}\n",
      o.layers, bf16_seq_model / (1 << 30), int2_seq_model / (1 << 30), o.budget_gib, bf16_fit,
      int2_fit);
  if (!o.json_path.empty()) {
    nlohmann::json j{{"device", info.name},
                     {"copy_bandwidth_gbs", copy_gbs},
                     {"l2_flush", o.flush},
                     {"shape",
                      {{"q_heads", hq},
                       {"kv_heads", hkv},
                       {"head_dim", d},
                       {"page_size", ps},
                       {"sink", o.sink},
                       {"recent", o.recent}}},
                     {"decode", points},
                     {"demotion_gbs", demote_gbs},
                     {"demotion", demotions},
                     {"store_int2_gbs", store_int2_gbs},
                     {"store_bf16_gbs", store_bf16_gbs},
                     {"store", stores},
                     {"store_by_tokens", store_sweep},
                     {"decode_step", decode_steps},
                     {"kv_bytes_per_token_layer", {{"bf16", bf16_tok}, {"int2", int2_tok}}},
                     {"per_layer_bytes_128k", {{"bf16", bf16_tok * ctx}, {"int2", int2_seq}}},
                     {"budget_gib", o.budget_gib},
                     {"layers", o.layers},
                     {"largest_batch_128k", {{"bf16", bf16_fit}, {"int2", int2_fit}}}};
    std::ofstream(o.json_path) << j.dump(2) << "\n";
  }
  return 0;
}
