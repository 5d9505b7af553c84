// oscar-eval: quality of an INT2 KV cache with every method side by side (perplexity, KL,
// attention error, bits per element, passkey retrieval), teacher-forced on real text.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "oscar/bundle.h"
#include "oscar/calibrate.h"
#include "oscar/calibration_data.h"
#include "oscar/cpu_threads.h"
#include "oscar/error.h"
#include "oscar/evaluation.h"
#include "oscar/file.h"
#include "oscar/model.h"
#include "oscar/progress.h"
#include "oscar/tokenizer.h"
#include "oscar/version.h"
#include "run_app.h"
#include "svg_plot.h"

#ifndef OSCAR_DATASETS_DIR
#define OSCAR_DATASETS_DIR "datasets"
#endif

namespace {

struct Options {
  std::string model_dir, data_path, calib_data, bundle_path, json_path, plot_path;
  std::string methods = "bf16,naive,hadamard,kivi,oscar";
  std::int64_t seq_len = 0, windows = 8, sink = 64, recent = 256, group_size = 0;
  std::int64_t kivi_block = 128, calib_tokens = 32768, calib_seq_len = 0;
  std::int64_t passkey_trials = 8, batch = 1, clip_holdback = 2048;
  std::string passkey_marker = "The pass key is";
  std::string scale_dtype = "bf16", device = "auto", dtype = "auto";
  double clip_k = 0.96, clip_v = 0.92;
  std::uint64_t seed = 1;
  int threads = 0;
  bool quiet = false;
};

struct MethodResult {
  oscar::QuantMethod method;
  double nll_all = 0, nll_q = 0, kl_q = 0;
  std::int64_t n_all = 0, n_q = 0;
  std::unique_ptr<oscar::MixedPrecisionAttention> backend;
  // Answer tokens predicted right / asked, and trials with every answer token right.
  std::int64_t passkey_ok = 0, passkey_total = 0, passkey_exact = 0, passkey_trials = 0;
};

// "oscar", "oscar+layer+keyweight+center+noclip+r": rotation methods calibrated on the fly.
oscar::RotationOptions rotation_options(const std::string& name, const Options& o) {
  oscar::RotationOptions r;
  r.clip_k = o.clip_k;
  r.clip_v = o.clip_v;
  std::stringstream parts(name);
  std::string part;
  std::getline(parts, part, '+');  // "oscar"
  while (std::getline(parts, part, '+')) {
    if (part == "layer") {
      r.grouping = oscar::Grouping::kLayer;
    } else if (part == "keyweight") {
      r.value_objective = oscar::ValueObjective::kKeyWeight;
    } else if (part == "center") {
      r.center_keys = true;
    } else if (part == "vcenter") {
      r.center_values = true;
    } else if (part == "noclip") {
      r.clip_k = r.clip_v = 1.0;
    } else if (part.rfind("smooth", 0) == 0) {
      // "smooth": alpha 0.5; "smooth25": alpha 0.25.
      const std::string digits = part.substr(6);
      OSCAR_CHECK(digits.find_first_not_of("0123456789") == std::string::npos && digits.size() <= 3,
                  "bad key smoothing variant '+{}' in '{}' (smooth or smoothNN, NN = 100 alpha)",
                  part, name);
      r.smooth_keys = digits.empty() ? 0.5 : std::stoi(digits) / 100.0;
    } else if (part == "keys" || part == "values") {
      // handled by the caller: quantize only keys / only values (diagnostics)
    } else if (part == "search") {
      // handled by the caller: per-head clip search on held-back tokens
    } else if (part == "r" || part == "r_h" || part == "h") {
      r.composition = oscar::parse_composition(part);
    } else {
      oscar::fail(
          "unknown oscar variant '+{}' in '{}' (layer, keyweight, center, vcenter, smooth[NN], "
          "noclip, search, r, r_h, h)",
          part, name);
    }
  }
  return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Sum over positions of log-softmax NLL of the next token; and KL(ref || this) where `ref_logp`
// set.
void score_window(const torch::Tensor& logits, const torch::Tensor& tokens,
                  const torch::Tensor& ref_logp, std::int64_t first_quantized, MethodResult& r) {
  const auto logp = torch::log_softmax(logits[0].to(torch::kFloat32), -1);  // [T, V]
  const std::int64_t length = tokens.size(1);
  const auto targets = tokens[0].slice(0, 1, length).to(logp.device());
  const auto nll = -logp.slice(0, 0, length - 1).gather(1, targets.unsqueeze(1)).squeeze(1);
  r.nll_all += nll.sum().item<double>();
  r.n_all += length - 1;
  if (first_quantized < length - 1) {
    r.nll_q += nll.slice(0, first_quantized).sum().item<double>();
    r.n_q += length - 1 - first_quantized;
    if (ref_logp.defined()) {
      const auto p = ref_logp.slice(0, first_quantized, length - 1);
      const auto q = logp.slice(0, first_quantized, length - 1);
      r.kl_q += (p.exp() * (p - q)).sum().item<double>();
    }
  }
}

int run(Options o) {
  oscar::set_cpu_threads(o.threads);
  const auto t0 = std::chrono::steady_clock::now();
  OSCAR_CHECK(oscar::is_directory(o.model_dir), "model directory '{}' does not exist", o.model_dir);
  oscar::check_writable(o.json_path, "JSON report");
  oscar::check_writable(o.plot_path, "plot");
  std::string device_name = o.device;
  if (device_name == "auto") device_name = torch::cuda::is_available() ? "cuda" : "cpu";
  oscar::LoadOptions load;
  load.device = oscar::parse_device_name(device_name);
  if (o.dtype == "stored") {
    load.keep_stored_dtype = true;
  } else if (o.dtype != "auto") {
    load.dtype = oscar::parse_dtype_name(o.dtype);
  }
  const auto tokenizer =
      oscar::Tokenizer::from_file(oscar::join_path(o.model_dir, "tokenizer.json"));
  const auto model = oscar::Model::load(o.model_dir, load);
  const auto& config = model.config();
  const auto device = model.device();
  const std::int64_t seq_len =
      o.seq_len > 0 ? o.seq_len : std::min<std::int64_t>(config.max_position_embeddings, 2048);
  const oscar::WindowParams windows{o.sink, o.recent};
  const std::int64_t first_quantized = o.sink + o.recent;  // positions t >= S0 + W
  OSCAR_CHECK(first_quantized < seq_len - 1,
              "--seq-len {} leaves no position with quantized keys (sink {} + recent {})", seq_len,
              o.sink, o.recent);
  const auto scale_dtype = oscar::int2::parse_scale_dtype(o.scale_dtype);
  const std::int32_t bos =
      config.bos_token_id ? static_cast<std::int32_t>(*config.bos_token_id) : -1;

  // Evaluation windows: the text as one stream from BOS, cut into seq_len windows.
  OSCAR_CHECK(oscar::file_exists(o.data_path), "evaluation data '{}' does not exist", o.data_path);
  auto ids = tokenizer.encode(oscar::read_file(o.data_path));
  if (bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  const std::int64_t available = static_cast<std::int64_t>(ids.size()) / seq_len;
  OSCAR_CHECK(available >= 1, "'{}' holds {} tokens, fewer than one window of {}", o.data_path,
              ids.size(), seq_len);
  const std::int64_t n_windows = std::min(o.windows, available);

  // Methods: baselines, bundles, and rotation methods calibrated here.
  std::vector<MethodResult> results;
  std::optional<oscar::KvStatistics> stats;
  std::optional<oscar::ClipSearch> clip_search;
  for (const std::string& name : split(o.methods, ',')) {
    MethodResult r;
    if (name.rfind("oscar", 0) == 0) {
      if (!o.bundle_path.empty() && name == "oscar") {
        const auto bundle = oscar::read_bundle(o.bundle_path);
        oscar::check_bundle_matches_model(bundle, oscar::model_identity(o.model_dir));
        r.method = oscar::method_from_bundle(name, bundle, o.group_size, scale_dtype, device);
      } else {
        const auto options = rotation_options(name, o);
        if (!stats) {
          // One calibration pass (and the key-weighted second pass) serves every variant.
          if (o.calib_data.empty()) {
            o.calib_data = oscar::join_path(OSCAR_DATASETS_DIR, "oscar-stories-v1.txt");
          }
          oscar::DataOptions d;
          d.seq_len = o.calib_seq_len > 0 ? o.calib_seq_len : seq_len;
          d.tokens = o.calib_tokens;
          d.bos_token = bos;
          // The last --clip-holdback tokens are held back from the statistics for clip search.
          const std::int64_t holdback = (o.clip_holdback + d.seq_len - 1) / d.seq_len;
          d.tokens = o.calib_tokens + holdback * d.seq_len;
          const auto data = oscar::load_calibration_data(o.calib_data, tokenizer, d);
          const auto n_stats = static_cast<std::int64_t>(data.sequences.size()) - holdback;
          stats.emplace(config.num_layers, config.num_heads, config.num_kv_heads, config.head_dim,
                        device);
          clip_search.emplace(config.num_layers, config.num_heads, config.num_kv_heads, windows,
                              o.group_size, scale_dtype);
          oscar::ForwardOptions f;
          oscar::Progress progress("calibrating", (2 * n_stats + holdback) * data.seq_len, "tok",
                                   !o.quiet);
          for (int pass = 0; pass < 3; ++pass) {
            if (pass == 1) stats->begin_keyweight_pass();
            f.observer = pass < 2 ? static_cast<oscar::AttentionObserver*>(&*stats)
                                  : static_cast<oscar::AttentionObserver*>(&*clip_search);
            const std::int64_t begin = pass < 2 ? 0 : n_stats;
            const std::int64_t end = pass < 2 ? n_stats : n_stats + holdback;
            for (std::int64_t i = begin; i < end; ++i) {
              model.hidden_states(torch::tensor(data.sequences[i], torch::kInt64).unsqueeze(0), f);
              progress.advance(data.seq_len);
            }
          }
          progress.finish();
        }
        auto rotations = oscar::compute_rotations(*stats, options);
        if (name.find("+search") != std::string::npos) {
          clip_search->search(rotations, options, oscar::default_clip_grid());
        }
        r.method = oscar::method_from_rotations(name, rotations, options, o.group_size, scale_dtype,
                                                device);
        if (name.find("+search") != std::string::npos) {
          double k_mean = 0, v_mean = 0;
          for (const auto& h : rotations.heads) {
            k_mean += h.k_clip / static_cast<double>(rotations.heads.size());
            v_mean += h.v_clip / static_cast<double>(rotations.heads.size());
          }
          r.method.description +=
              fmt::format(" -> searched per head (mean K {:.3f}, V {:.3f})", k_mean, v_mean);
        }
      }
    } else {
      r.method = oscar::make_baseline_method(name.substr(0, name.find('+')), config, o.group_size,
                                             scale_dtype, device);
      r.method.kivi_block = o.kivi_block;
    }
    r.method.name = name;
    r.method.quantize_keys = name.find("+values") == std::string::npos;
    r.method.quantize_values = name.find("+keys") == std::string::npos;
    results.push_back(std::move(r));
  }
  OSCAR_CHECK(!results.empty() && results.front().method.kind == oscar::MethodKind::kBF16,
              "--methods must start with bf16 (the reference for KL)");
  for (auto& r : results) {
    r.backend =
        std::make_unique<oscar::MixedPrecisionAttention>(r.method, windows, config.num_layers);
  }

  // Teacher-forced windows: the reference first, then every method against it.
  oscar::Progress progress("evaluating", n_windows * static_cast<std::int64_t>(results.size()),
                           "fwd", !o.quiet);
  for (std::int64_t w = 0; w < n_windows; ++w) {
    auto tokens = torch::from_blob(ids.data() + w * seq_len, {1, seq_len}, torch::kInt32)
                      .to(torch::kInt64)
                      .clone();
    torch::Tensor ref_logp;
    for (auto& r : results) {
      oscar::ForwardOptions f;
      f.attention = r.backend.get();
      const auto logits = model.forward(tokens, f);
      score_window(logits, tokens, ref_logp, first_quantized, r);
      if (!ref_logp.defined()) {
        ref_logp = torch::log_softmax(logits[0].to(torch::kFloat32), -1).slice(0, 0, seq_len - 1);
      }
      progress.advance(1);
    }
  }
  progress.finish();

  // Passkey retrieval: needle planted right after the sink, queried at the end of a window.
  if (o.passkey_trials > 0) {
    std::vector<std::vector<std::int32_t>> keys;
    std::uint64_t state = o.seed;
    for (std::int64_t i = 0; i < o.passkey_trials; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const int number = 10000 + static_cast<int>((state >> 33) % 90000);
      keys.push_back(tokenizer.encode(fmt::format(" {}.", number), false));
    }
    const auto marker = tokenizer.encode(" " + o.passkey_marker, false);
    std::vector<std::int32_t> filler(ids.begin() + 1, ids.end());
    const auto trials = oscar::make_passkey_trials(filler, marker, keys, seq_len, o.sink + 8, bos);
    oscar::Progress pk("passkey", static_cast<std::int64_t>(trials.size() * results.size()),
                       "trial", !o.quiet);
    for (auto& r : results) {
      for (const auto& trial : trials) {
        const auto tokens = torch::tensor(trial.tokens, torch::kInt64).unsqueeze(0);
        oscar::ForwardOptions f;
        f.attention = r.backend.get();
        const auto predicted = model.forward(tokens, f)[0].argmax(-1).to(torch::kCPU);
        std::int64_t right = 0;
        for (std::int64_t pos : trial.answer_positions) {
          right += predicted[pos].item<std::int64_t>() == trial.tokens[pos + 1] ? 1 : 0;
        }
        const auto n = static_cast<std::int64_t>(trial.answer_positions.size());
        r.passkey_exact += right == n ? 1 : 0;
        r.passkey_ok += right;
        r.passkey_total += n;
        r.passkey_trials += 1;
        pk.advance(1);
      }
    }
    pk.finish();
  }

  // Report.
  const double ref_ppl_q =
      std::exp(results.front().nll_q / std::max<std::int64_t>(results.front().n_q, 1));
  nlohmann::json methods = nlohmann::json::array();
  fmt::print("{} on {}: {} windows x {} tokens, sink {}, recent {}, group {}, scales {}\n",
             config.architecture, o.data_path, n_windows, seq_len, o.sink, o.recent,
             o.group_size > 0 ? o.group_size : config.head_dim, o.scale_dtype);
  fmt::print("{:<22} {:>9} {:>8} {:>9} {:>9} {:>10} {:>6} {:>8}\n", "method", "ppl(q)", "d ppl",
             "ppl(all)", "KL(q)", "attn err", "bits", "passkey");
  std::vector<oscar_eval::Series> layer_series;
  std::vector<std::pair<std::string, double>> kl_bars;
  for (auto& r : results) {
    const double ppl_q = std::exp(r.nll_q / std::max<std::int64_t>(r.n_q, 1));
    const double ppl_all = std::exp(r.nll_all / std::max<std::int64_t>(r.n_all, 1));
    const double kl = r.kl_q / std::max<std::int64_t>(r.n_q, 1);
    const auto layer_errors = r.backend->layer_relative_errors();
    double mean_err = 0;
    for (double e : layer_errors) mean_err += e / static_cast<double>(layer_errors.size());
    const double bits = r.method.bits_per_element(config.head_dim, seq_len, o.sink, o.recent);
    const double passkey =
        r.passkey_total > 0 ? static_cast<double>(r.passkey_ok) / r.passkey_total : -1.0;
    fmt::print("{:<22} {:>9.4f} {:>7.2f}% {:>9.4f} {:>9.5f} {:>10.4f} {:>6.2f} {:>8}\n",
               r.method.name, ppl_q, 100.0 * (ppl_q / ref_ppl_q - 1.0), ppl_all, kl, mean_err, bits,
               passkey < 0 ? std::string("-") : fmt::format("{:.2f}", passkey));
    methods.push_back(
        {{"name", r.method.name},
         {"description", r.method.description},
         {"ppl_quantized", ppl_q},
         {"ppl_all", ppl_all},
         {"kl", kl},
         {"attn_rel_error", mean_err},
         {"attn_rel_error_per_layer", layer_errors},
         {"bits_per_element", bits},
         {"passkey_accuracy", passkey < 0 ? nlohmann::json(nullptr) : nlohmann::json(passkey)},
         {"passkey_exact_match",
          r.passkey_trials > 0
              ? nlohmann::json(static_cast<double>(r.passkey_exact) / r.passkey_trials)
              : nlohmann::json(nullptr)},
         {"positions_quantized", r.n_q},
         {"positions_all", r.n_all}});
    if (r.method.kind != oscar::MethodKind::kBF16) {
      layer_series.push_back({r.method.name, layer_errors});
      kl_bars.push_back({r.method.name, kl});
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "(q: positions t >= sink + recent, where quantized keys exist; KL(bf16 || method) "
      "mean per position; attn err: per-layer relative error of attention outputs, mean "
      "over layers; passkey: share of the planted number's tokens predicted right; {:.1f} s)\n",
      seconds);
  if (!o.json_path.empty()) {
    const nlohmann::json report = {
        {"model", o.model_dir},
        {"data", o.data_path},
        {"calib_data", o.calib_data},
        {"bundle", o.bundle_path},
        {"seq_len", seq_len},
        {"windows", n_windows},
        {"tokens", n_windows * seq_len},
        {"sink", o.sink},
        {"recent", o.recent},
        {"group_size", o.group_size > 0 ? o.group_size : config.head_dim},
        {"scale_dtype", o.scale_dtype},
        {"kivi_block", o.kivi_block},
        {"passkey_trials", o.passkey_trials},
        {"device", device.str()},
        {"dtype", oscar::dtype_short_name(model.dtype())},
        {"seconds", seconds},
        {"oscar_version", oscar::version()},
        {"methods", methods}};
    oscar::write_file_atomic(o.json_path, report.dump(2) + "\n");
  }
  if (!o.plot_path.empty()) {
    std::string svg =
        "<svg xmlns='http://www.w3.org/2000/svg' width='1000' height='420' "
        "font-family='sans-serif'>\n<rect width='1000' height='420' fill='white'/>\n";
    svg += oscar_eval::line_chart(layer_series, "attention-output relative error per layer",
                                  "relative error", 0, 10, 560, 400);
    svg += oscar_eval::bar_chart(kl_bars, "KL(bf16 || method), quantized positions", 570, 10, 430,
                                 400);
    svg += "</svg>\n";
    oscar::write_file_atomic(o.plot_path, svg);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oscar-eval: INT2 KV-cache quality of every method side by side"};
  Options o;
  app.add_option("--model", o.model_dir, "Hugging Face model directory")->required();
  app.add_option("--data", o.data_path, "Evaluation text (one stream cut into windows)")
      ->required();
  app.add_option("--calib-data", o.calib_data,
                 "Calibration text for rotation methods calibrated here (default: the project's "
                 "oscar-stories-v1.txt)");
  app.add_option("--calib-tokens", o.calib_tokens, "Calibration tokens")->default_val(32768);
  app.add_option("--calib-seq-len", o.calib_seq_len,
                 "Calibration sequence length (default: "
                 "--seq-len)")
      ->default_val(0);
  app.add_option(
         "--methods", o.methods,
         "Comma-separated: bf16 (first), naive, hadamard, kivi, oscar, and variants "
         "oscar+layer, +keyweight, +center, +vcenter, +smooth[NN] (key smoothing, alpha NN/100), "
         "+noclip, +search, +r, +r_h, +h (combinable); +keys / +values quantize one side")
      ->default_val("bf16,naive,hadamard,kivi,oscar");
  app.add_option("--bundle", o.bundle_path, "Bundle for the method 'oscar' (else calibrated here)");
  app.add_option("--seq-len", o.seq_len, "Window length (default: min(context, 2048))")
      ->default_val(0);
  app.add_option("--windows", o.windows, "Windows to evaluate")->default_val(8);
  app.add_option("--sink", o.sink, "S0: first tokens kept in bf16")->default_val(64);
  app.add_option("--recent", o.recent, "W: most recent tokens kept in bf16")->default_val(256);
  app.add_option("--group-size", o.group_size, "INT2 group size (0: head_dim)")->default_val(0);
  app.add_option("--scale-dtype", o.scale_dtype, "Scale/zero dtype: bf16, f16, f32")
      ->default_val("bf16");
  app.add_option("--kivi-block", o.kivi_block, "KIVI: tokens per key-channel group")
      ->default_val(128);
  app.add_option("--clip-k", o.clip_k, "Key clip ratio of calibrated OSCAR variants")
      ->default_val(0.96);
  app.add_option("--clip-v", o.clip_v, "Value clip ratio of calibrated OSCAR variants")
      ->default_val(0.92);
  app.add_option("--clip-holdback", o.clip_holdback,
                 "Calibration tokens held back for oscar+search's clip-ratio search")
      ->default_val(2048);
  app.add_option("--passkey-trials", o.passkey_trials, "Passkey retrieval trials (0: none)")
      ->default_val(8);
  app.add_option("--passkey-marker", o.passkey_marker, "Text before the planted number")
      ->default_val("The pass key is");
  app.add_option("--seed", o.seed, "Seed of the passkey numbers")->default_val(1);
  app.add_option("--device", o.device, "auto, cpu, cuda or cuda:N")->default_val("auto");
  app.add_option("--dtype", o.dtype, "Compute dtype: auto, stored, f32, bf16, f16")
      ->default_val("auto");
  app.add_option("--threads", o.threads, oscar::kCpuThreadsHelp)->default_val(0);
  app.add_option("--json", o.json_path, "Write the report as JSON to this file");
  app.add_option("--plot", o.plot_path, "Write an SVG plot (per-layer error, KL per method)");
  app.add_flag("-q,--quiet", o.quiet, "No progress output");
  app.set_version_flag("--version", std::string(oscar::version()));
  CLI11_PARSE(app, argc, argv);
  return oscar_app::run_app("oscar-eval", [&]() -> int { return run(o); });
}
