// Times the runtime loader on a synthetic bundle: open (with and without the orthogonality check)
// and the CPU apply helpers. Usage: oscar-bench-runtime [LAYERS KV_HEADS HEAD_DIM ROWS].
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/runtime.h"
#include "synthetic_bundle.h"
#include "test_support.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    oscar::test::SyntheticBundleOptions o;
    o.layers = argc > 1 ? std::atoll(argv[1]) : 32;
    o.kv_heads = argc > 2 ? std::atoll(argv[2]) : 8;
    o.head_dim = argc > 3 ? std::atoll(argv[3]) : 128;
    o.heads = 4 * o.kv_heads;
    const std::int64_t rows = argc > 4 ? std::atoll(argv[4]) : 4096;
    const oscar::test::TempDir dir;
    const std::string path = dir.file("bench.oscar");
    oscar::Bundle bundle = oscar::test::synthetic_bundle(o);
    oscar::write_bundle(path, bundle);
    std::printf("bundle: %lld layers, %lld KV heads, head_dim %lld\n",
                static_cast<long long>(o.layers), static_cast<long long>(o.kv_heads),
                static_cast<long long>(o.head_dim));
    for (const bool check : {false, true}) {
      oscar::runtime::Params params;
      params.check_orthogonality = check;
      const auto start = std::chrono::steady_clock::now();
      const auto r = oscar::runtime::Runtime::open(path, params);
      std::printf("open, orthogonality check %s: %.3f s\n", check ? "on " : "off",
                  seconds_since(start));
    }
    const auto r = oscar::runtime::Runtime::open(path);
    std::vector<float> x(static_cast<std::size_t>(rows * o.head_dim), 0.5f), y(x.size());
    for (const auto t : {oscar::runtime::Transform::kKey, oscar::runtime::Transform::kOutput}) {
      const auto start = std::chrono::steady_clock::now();
      r.apply(t, 0, 0, x.data(), y.data(), rows);
      const double s = seconds_since(start);
      std::printf("apply %s to %lld rows: %.2f ms (%.2f us per row)\n",
                  t == oscar::runtime::Transform::kKey ? "key   " : "output",
                  static_cast<long long>(rows), 1e3 * s, 1e6 * s / static_cast<double>(rows));
    }
    std::vector<float> row(static_cast<std::size_t>(o.head_dim), 0.25f);
    row[0] = 3.0f;
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < rows; ++i)
      r.quantize_int2(oscar::runtime::Kind::kKey, 0, 0, row.data());
    std::printf("quantize_int2 %lld rows: %.2f us per row\n", static_cast<long long>(rows),
                1e6 * seconds_since(start) / static_cast<double>(rows));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oscar-bench-runtime: %s\n", e.what());
    return 1;
  }
  return 0;
}
