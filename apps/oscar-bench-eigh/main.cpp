// oscar-bench-eigh: batched fp64 symmetric eigendecomposition speed, the project's cuSOLVER
// backend against torch::linalg::eigh on the same device and matrices.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "oscar/cpu_threads.h"
#include "oscar/eigen.h"
#include "oscar/error.h"
#include "oscar/model.h"
#include "oscar/version.h"
#include "run_app.h"

namespace {

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Median wall time in seconds of `fn` over `iters` runs after `warmup` runs; the device is
// synchronized before and after each run so queued GPU work is counted.
double time_median(const std::function<void()>& fn, int warmup, int iters,
                   const torch::Device& device) {
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(device);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    synchronize(device);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oscar-bench-eigh: batched fp64 symmetric eigendecomposition, cuSOLVER vs torch"};
  std::int64_t batch = 576, dim = 128;
  int warmup = 2, iters = 5, threads = 0;
  std::uint64_t seed = 0;
  std::string device_name = "cpu";
  bool json = false;
  app.add_option("--batch", batch, "Matrices per call (layers x KV heads)")
      ->default_val(576)
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--dim", dim, "Matrix order (head dimension)")
      ->default_val(128)
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--device", device_name, "cpu or cuda[:N]")->default_val("cpu");
  app.add_option("--warmup", warmup, "Untimed calls first per backend")->default_val(2);
  app.add_option("--iters", iters, "Timed calls per backend (median reported)")
      ->default_val(5)
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", threads, oscar::kCpuThreadsHelp)->default_val(0);
  app.add_option("--seed", seed, "Seed of the random covariance matrices")->default_val(0);
  app.add_flag("--json", json, "Print results as JSON on stdout");
  CLI11_PARSE(app, argc, argv);
  return oscar_app::run_app("oscar-bench-eigh", [&]() -> int {
    oscar::set_cpu_threads(threads);
    const oscar::CpuThreads cpu = oscar::cpu_threads();
    const torch::Device device = oscar::parse_device_name(device_name);
    torch::NoGradGuard no_grad;
    // Covariance-like SPD matrices (2 * dim samples each), built on the CPU so every device sees
    // the same ones for a given seed.
    torch::manual_seed(seed);
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
    auto x = torch::randn({batch, dim, 2 * dim}, f64);
    auto matrices = (torch::matmul(x, x.transpose(1, 2)) / (2.0 * dim)).to(device);
    x = torch::Tensor();

    nlohmann::json out = {{"batch", batch},           {"dim", dim},
                          {"device", device.str()},   {"iters", iters},
                          {"warmup", warmup},         {"threads", cpu.torch},
                          {"blas_threads", cpu.blas}, {"oscar_version", oscar::version()}};
    fmt::print(stderr,
               "{} symmetric {}x{} fp64 matrices on {} ({} LibTorch / {} BLAS threads), median of "
               "{}\n",
               batch, dim, dim, device.str(), cpu.torch, cpu.blas, iters);

    // The reference: torch's own eigh on this device (LAPACK on the CPU).
    torch::Tensor reference_values;
    const double torch_seconds =
        time_median([&] { reference_values = std::get<0>(torch::linalg_eigh(matrices, "L")); },
                    warmup, iters, device);

    struct Row {
      std::string name;
      std::optional<double> seconds;
      std::optional<double> max_diff;
      std::string note;
    };
    std::vector<Row> rows;
    auto run_oscar = [&](oscar::EigenBackend backend) {
      torch::Tensor values;
      const double seconds = time_median(
          [&] { values = oscar::symmetric_eigh(matrices, backend).values; }, warmup, iters, device);
      const double diff = (values - reference_values).abs().max().item<double>();
      rows.push_back(
          {fmt::format("oscar {}", oscar::eigen_backend_name(backend)), seconds, diff, ""});
    };
    if (device.is_cuda() && oscar::cusolver_eigh_built()) {
      run_oscar(oscar::EigenBackend::kCusolver);
    } else {
      rows.push_back({"oscar cusolver", std::nullopt, std::nullopt,
                      device.is_cuda() ? "n/a (built without the CUDA kernels)"
                                       : "n/a (CPU run; use --device cuda)"});
      if (!device.is_cuda()) run_oscar(oscar::EigenBackend::kLapack);
    }
    rows.push_back({"torch::linalg::eigh", torch_seconds, std::nullopt, "reference"});

    fmt::print(stderr, "{:<22} {:>12} {:>12} {:>22}\n", "backend", "ms/call", "matrices/s",
               "max |dw| vs torch");
    const double max_value = reference_values.abs().max().item<double>();
    for (const auto& r : rows) {
      nlohmann::json entry;
      if (!r.seconds) {
        fmt::print(stderr, "{:<22} {}\n", r.name, r.note);
        entry["available"] = false;
        entry["note"] = r.note;
      } else {
        const double per_second = static_cast<double>(batch) / *r.seconds;
        fmt::print(stderr, "{:<22} {:>12.3f} {:>12.1f} {:>22}\n", r.name, 1e3 * *r.seconds,
                   per_second, r.max_diff ? fmt::format("{:.3e}", *r.max_diff) : r.note);
        entry = {{"available", true}, {"seconds", *r.seconds}, {"matrices_per_second", per_second}};
        if (r.max_diff) entry["max_abs_eigenvalue_diff_vs_torch"] = *r.max_diff;
      }
      out["backends"][r.name] = entry;
    }
    fmt::print(stderr, "(largest |eigenvalue| {:.3e})\n", max_value);
    out["max_abs_eigenvalue"] = max_value;
    if (json) std::cout << out.dump(2) << "\n";
    return 0;
  });
}
