// oscar-bench-forward: forward-pass throughput of the reference model runtime against a plain
// LibTorch implementation of the same model, with a per-component time breakdown.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "oscar/cpu_threads.h"
#include "oscar/error.h"
#include "oscar/model.h"
#include "oscar/safetensors.h"
#include "oscar/version.h"
#include "run_app.h"

namespace {

// The forward one would write without thinking about speed: separate q/k/v and gate/up
// projections, KV heads copied per query head (repeat_kv), the full T x T score matrix with an
// additive mask, softmax in fp32 then cast back (transformers' eager attention).
class PlainForward {
 public:
  PlainForward(const std::string& dir, torch::ScalarType dtype, torch::Device device)
      : config_(oscar::load_model_config(dir)), dtype_(dtype), device_(device) {
    oscar::Checkpoint ck = oscar::Checkpoint::open(dir);
    for (const auto& name : ck.tensor_names()) {
      weights_[name] = oscar::read_checkpoint_tensor(ck, name).to(device_, dtype_);
    }
    inv_freq_ = oscar::rope_inverse_frequencies(config_).first.to(device_);
  }

  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::NoGradGuard no_grad;
    const auto& c = config_;
    const auto B = tokens.size(0), T = tokens.size(1), d = c.head_dim;
    const auto g = c.num_heads / c.num_kv_heads;
    auto w = [&](const std::string& n) {
      auto it = weights_.find(n);
      return it == weights_.end() ? torch::Tensor() : it->second;
    };
    auto lin = [&](const torch::Tensor& x, const std::string& p) {
      auto b = w(p + ".bias");
      return b.defined() ? torch::linear(x, w(p + ".weight"), b)
                         : torch::linear(x, w(p + ".weight"));
    };
    auto norm = [&](const torch::Tensor& x, const torch::Tensor& weight) {
      auto xf = x.to(torch::kFloat32);
      return weight *
             (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + c.rms_norm_eps)).to(x.scalar_type());
    };
    auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
    auto freqs = torch::outer(pos, inv_freq_);
    auto emb = torch::cat({freqs, freqs}, -1);
    auto cos = emb.cos().to(dtype_), sin = emb.sin().to(dtype_);
    auto rope = [&](const torch::Tensor& x) {  // x [B, H, T, d]
      auto x1 = x.narrow(-1, 0, d / 2), x2 = x.narrow(-1, d / 2, d / 2);
      return x * cos + torch::cat({-x2, x1}, -1) * sin;
    };
    auto mask = torch::full({T, T}, -std::numeric_limits<float>::infinity(),
                            torch::TensorOptions().dtype(dtype_).device(device_))
                    .triu(1);
    auto x = torch::embedding(w("model.embed_tokens.weight"), tokens.to(device_));
    for (std::int64_t l = 0; l < c.num_layers; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      auto h = norm(x, w(p + "input_layernorm.weight"));
      auto q = lin(h, p + "self_attn.q_proj").view({B, T, c.num_heads, d});
      auto k = lin(h, p + "self_attn.k_proj").view({B, T, c.num_kv_heads, d});
      auto v = lin(h, p + "self_attn.v_proj").view({B, T, c.num_kv_heads, d}).transpose(1, 2);
      if (c.qk_norm) {
        q = norm(q, w(p + "self_attn.q_norm.weight"));
        k = norm(k, w(p + "self_attn.k_norm.weight"));
      }
      q = rope(q.transpose(1, 2));
      k = rope(k.transpose(1, 2));
      k = k.repeat_interleave(g, 1);
      v = v.repeat_interleave(g, 1);
      auto scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(d)) + mask;
      auto probs = torch::softmax(scores, -1, torch::kFloat32).to(dtype_);
      auto o = torch::matmul(probs, v).transpose(1, 2).reshape({B, T, c.num_heads * d});
      x = x + lin(o, p + "self_attn.o_proj");
      h = norm(x, w(p + "post_attention_layernorm.weight"));
      x = x + lin(torch::silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"),
                  p + "mlp.down_proj");
    }
    x = norm(x, w("model.norm.weight"));
    auto head = c.tie_word_embeddings ? w("model.embed_tokens.weight") : w("lm_head.weight");
    return torch::matmul(x, head.t()).to(torch::kFloat32);
  }

 private:
  oscar::ModelConfig config_;
  torch::ScalarType dtype_;
  torch::Device device_;
  std::map<std::string, torch::Tensor> weights_;
  torch::Tensor inv_freq_;
};

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Median wall time in seconds of `fn` over `iters` runs after `warmup` runs.
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
  CLI::App app{"oscar-bench-forward: forward throughput (tokens/s) of the reference model runtime"};
  std::string model_dir, dtype = "auto", device_name = "cpu", impl = "both";
  std::int64_t seq_len = 2048, batch = 1;
  int warmup = 1, iters = 3, threads = 0;
  bool json = false, breakdown = false;
  app.add_option("--model", model_dir, "Hugging Face model directory")->required();
  app.add_option("--seq-len", seq_len, "Tokens per sequence")->default_val(2048);
  app.add_option("--batch", batch, "Sequences per forward")->default_val(1);
  app.add_option("--dtype", dtype, "auto, stored, f32, bf16, f16")->default_val("auto");
  app.add_option("--device", device_name, "cpu or cuda")->default_val("cpu");
  app.add_option("--impl", impl, "oscar, plain (straightforward LibTorch) or both")
      ->default_val("both")
      ->check(CLI::IsMember({"oscar", "plain", "both"}));
  app.add_option("--warmup", warmup, "Untimed runs first")->default_val(1);
  app.add_option("--iters", iters, "Timed runs (median reported)")->default_val(3);
  app.add_option("--threads", threads, oscar::kCpuThreadsHelp)->default_val(0);
  app.add_flag("--breakdown", breakdown, "Also time each component of one layer at this shape");
  app.add_flag("--json", json, "Print results as JSON on stdout");
  CLI11_PARSE(app, argc, argv);
  return oscar_app::run_app("oscar-bench-forward", [&]() -> int {
    oscar::set_cpu_threads(threads);
    const oscar::CpuThreads cpu = oscar::cpu_threads();
    oscar::LoadOptions load;
    load.device = oscar::parse_device_name(device_name);
    if (dtype == "stored") {
      load.keep_stored_dtype = true;
    } else if (dtype != "auto") {
      load.dtype = oscar::parse_dtype_name(dtype);
    }
    auto model = oscar::Model::load(model_dir, load);
    const auto& c = model.config();
    const auto device = model.device();
    torch::manual_seed(0);
    auto tokens = torch::randint(c.vocab_size, {batch, seq_len}, torch::kInt64).to(device);
    const double n_tokens = static_cast<double>(batch * seq_len);
    nlohmann::json out = {
        {"model", model_dir},       {"seq_len", seq_len},
        {"batch", batch},           {"dtype", oscar::dtype_short_name(model.dtype())},
        {"device", device.str()},   {"threads", cpu.torch},
        {"blas_threads", cpu.blas}, {"oscar_version", oscar::version()}};
    fmt::print(stderr, "{} | batch {} x seq {} | {} on {} ({} LibTorch / {} BLAS threads)\n",
               oscar::describe(c), batch, seq_len, oscar::dtype_short_name(model.dtype()),
               device.str(), cpu.torch, cpu.blas);
    auto report = [&](const std::string& name, double seconds) {
      out[name] = {{"seconds", seconds}, {"tokens_per_second", n_tokens / seconds}};
      fmt::print(stderr, "{:>8}: {:9.2f} ms per forward, {:10.1f} tokens/s\n", name, 1e3 * seconds,
                 n_tokens / seconds);
    };
    if (impl == "oscar" || impl == "both") {
      report("oscar", time_median([&] { model.forward(tokens); }, warmup, iters, device));
    }
    if (impl == "plain" || impl == "both") {
      PlainForward plain(model_dir, model.dtype(), device);
      // Both implementations must compute the same function before their speed is compared.
      auto a =
          model.forward(tokens.narrow(0, 0, 1).narrow(1, 0, std::min<std::int64_t>(seq_len, 256)));
      auto b =
          plain.forward(tokens.narrow(0, 0, 1).narrow(1, 0, std::min<std::int64_t>(seq_len, 256)));
      out["plain_max_abs_diff"] = (a - b).abs().max().item<double>();
      report("plain", time_median([&] { plain.forward(tokens); }, warmup, iters, device));
      if (out.contains("oscar")) {
        out["speedup_vs_plain"] =
            out["plain"]["seconds"].get<double>() / out["oscar"]["seconds"].get<double>();
        fmt::print(stderr, "speedup over plain LibTorch: {:.2f}x\n",
                   out["speedup_vs_plain"].get<double>());
      }
    }
    if (breakdown) {
      // One layer's components at this shape, times the layer count; the head once.
      torch::NoGradGuard no_grad;
      auto opts = torch::TensorOptions().dtype(model.dtype()).device(device);
      const auto H = c.hidden_size, d = c.head_dim, Hq = c.num_heads, Hkv = c.num_kv_heads;
      auto x = torch::randn({batch, seq_len, H}, opts);
      auto wqkv = torch::randn({(Hq + 2 * Hkv) * d, H}, opts) * 0.02;
      auto wo = torch::randn({H, Hq * d}, opts) * 0.02;
      auto wgu = torch::randn({2 * c.intermediate_size, H}, opts) * 0.02;
      auto wd = torch::randn({H, c.intermediate_size}, opts) * 0.02;
      auto whead = torch::randn({c.vocab_size, H}, opts) * 0.02;
      auto q = torch::randn({batch, seq_len, Hq, d}, opts);
      auto k = torch::randn({batch, seq_len, Hkv, d}, opts);
      auto act = torch::randn({batch, seq_len, c.intermediate_size}, opts);
      auto o = torch::randn({batch, seq_len, Hq * d}, opts);
      const double layers = static_cast<double>(c.num_layers);
      std::vector<std::pair<std::string, double>> parts = {
          {"qkv projection",
           layers * time_median([&] { torch::linear(x, wqkv); }, 1, iters, device)},
          {"attention",
           layers * time_median([&] { oscar::causal_attention(q, k, k, 0.1); }, 1, iters, device)},
          {"o projection", layers * time_median([&] { torch::linear(o, wo); }, 1, iters, device)},
          {"mlp gate/up", layers * time_median([&] { torch::linear(x, wgu); }, 1, iters, device)},
          {"mlp act", layers * time_median([&] { torch::silu(act) * act; }, 1, iters, device)},
          {"mlp down", layers * time_median([&] { torch::linear(act, wd); }, 1, iters, device)},
          {"lm head", time_median([&] { torch::matmul(x, whead.t()); }, 1, iters, device)},
      };
      double measured = 0;
      for (auto& [name, sec] : parts) measured += sec;
      // What the isolated components do not explain: norms, RoPE, residual adds, layout copies,
      // the embedding lookup and allocation, measured as the forward's time minus their sum.
      if (out.contains("oscar")) {
        parts.emplace_back("rest (norms, rope, copies)",
                           std::max(0.0, out["oscar"]["seconds"].get<double>() - measured));
      }
      double total = 0;
      for (auto& [name, sec] : parts) total += sec;
      fmt::print(stderr, "where the time goes (one forward, {:.2f} ms):\n", 1e3 * total);
      for (auto& [name, sec] : parts) {
        fmt::print(stderr, "  {:<28} {:9.2f} ms {:5.1f}%\n", name, 1e3 * sec, 100.0 * sec / total);
        out["breakdown_seconds"][name] = sec;
      }
    }
    if (json) std::cout << out.dump(2) << "\n";
    return 0;
  });
}
