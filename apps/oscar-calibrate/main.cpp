// oscar-calibrate: streams calibration text through a model, accumulates the OSCAR statistics and
// writes a versioned rotation bundle.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
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
#include "oscar/sha256.h"
#include "oscar/tokenizer.h"
#include "oscar/version.h"
#include "run_app.h"

#ifndef OSCAR_DATASETS_DIR
#define OSCAR_DATASETS_DIR "datasets"
#endif

namespace {

constexpr const char* kDefaultData = "oscar-stories-v1.txt";

struct Options {
  std::string model_dir, data_path, out_path, format = "auto";
  std::int64_t tokens = 32768, seq_len = 0, batch = 1;
  std::uint64_t seed = 0;
  std::string device = "auto", dtype = "auto";
  std::string value_objective = "attn", grouping = "head", composition = "r_h_pbr";
  // Defaults are the best configuration measured on the three reference models (docs/results.md):
  // centred and smoothed keys.
  bool center_keys = true, center_values = false, clip_search = false;
  std::int64_t clip_holdback = 2048;
  double clip_k = 0.96, clip_v = 0.92, smooth_keys = 0.5;
  std::int64_t group_size = 0, sink = 64, recent = 256;
  std::string scale_dtype = "bf16", eigen = "auto";
  std::string save_stats, resume_stats, keyweight_from, shard = "0/1";
  std::vector<std::string> merge_stats;
  double save_interval = 60.0;
  int threads = 0;
  std::string json_path;
  bool json = false, quiet = false;
};

std::string default_data_path() {
  const char* env = std::getenv("OSCAR_DATASETS");
  return oscar::join_path(env != nullptr ? env : OSCAR_DATASETS_DIR, kDefaultData);
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::pair<std::int64_t, std::int64_t> parse_shard(const std::string& text) {
  std::int64_t index = -1, count = 0;
  char slash = 0;
  std::istringstream in(text);
  in >> index >> slash >> count;
  OSCAR_CHECK(in && in.peek() == EOF && slash == '/' && count >= 1 && index >= 0 && index < count,
              "--shard must be I/N with 0 <= I < N (got '{}')", text);
  return {index, count};
}

// How much of the provenance two statistics must share: the model (merging shards), also the
// data (a shard's key-weighted pass from the merged main pass), also the shard (resuming).
enum class SameSource { kModel, kData, kShard };

void check_same_source(const oscar::StatsProvenance& a, const oscar::StatsProvenance& b,
                       const std::string& what, SameSource scope) {
  std::vector<std::string> diffs;
  if (a.config_sha256 != b.config_sha256 || a.weights_header_sha256 != b.weights_header_sha256) {
    diffs.push_back(fmt::format("model {} vs {}", a.model_name, b.model_name));
  }
  if (a.seq_len != b.seq_len)
    diffs.push_back(fmt::format("seq_len {} vs {}", a.seq_len, b.seq_len));
  if (a.compute_dtype != b.compute_dtype) {
    diffs.push_back(fmt::format("dtype {} vs {}", a.compute_dtype, b.compute_dtype));
  }
  if (scope != SameSource::kModel) {
    if (a.dataset_sha256 != b.dataset_sha256) {
      diffs.push_back(fmt::format("dataset {} vs {}", a.dataset_name, b.dataset_name));
    }
    if (a.seed != b.seed) diffs.push_back(fmt::format("seed {} vs {}", a.seed, b.seed));
  }
  if (scope == SameSource::kShard &&
      (a.shard_index != b.shard_index || a.shard_count != b.shard_count)) {
    diffs.push_back(fmt::format("shard {}/{} vs {}/{}", a.shard_index, a.shard_count, b.shard_index,
                                b.shard_count));
  }
  OSCAR_CHECK(diffs.empty(), "{}: {}", what, fmt::join(diffs, "; "));
}

// Runs sequences [done, end) through the model with `stats` listening, saving on the way.
void stream_pass(const oscar::Model& model, const oscar::CalibrationData& data,
                 const std::vector<std::size_t>& selected, oscar::KvStatistics& stats,
                 std::int64_t& done, const Options& o, const oscar::StatsProvenance& provenance,
                 const char* label) {
  const auto total = static_cast<std::int64_t>(selected.size());
  if (done >= total) return;
  oscar::Progress progress(label, (total - done) * data.seq_len, "tok", !o.quiet);
  auto last_save = std::chrono::steady_clock::now();
  oscar::ForwardOptions forward;
  forward.observer = &stats;
  while (done < total) {
    const std::int64_t n = std::min<std::int64_t>(o.batch, total - done);
    auto tokens = torch::empty({n, data.seq_len}, torch::kInt64);
    auto* dst = tokens.data_ptr<std::int64_t>();
    for (std::int64_t r = 0; r < n; ++r) {
      const auto& seq = data.sequences[selected[static_cast<std::size_t>(done + r)]];
      std::copy(seq.begin(), seq.end(), dst + r * data.seq_len);
    }
    model.hidden_states(tokens, forward);
    stats.check_finite();
    done += n;
    progress.advance(n * data.seq_len);
    const auto now = std::chrono::steady_clock::now();
    if (!o.save_stats.empty() &&
        std::chrono::duration<double>(now - last_save).count() >= o.save_interval) {
      stats.save(o.save_stats, provenance);
      last_save = now;
    }
  }
  progress.finish();
}

void print_summary(const oscar::RotationResult& r, std::int64_t heads) {
  fmt::print("{:>5}  {:>11} {:>10}  {:>11} {:>10}  {:>6} {:>6}\n", "layer", "K top share", "K cond",
             "V top share", "V cond", "clip K", "clip V");
  for (std::size_t first = 0; first < r.heads.size(); first += static_cast<std::size_t>(heads)) {
    double k_share = 0, v_share = 0, k_cond = 0, v_cond = 0, k_clip = 0, v_clip = 0;
    for (std::int64_t h = 0; h < heads; ++h) {
      const auto& s = r.heads[first + static_cast<std::size_t>(h)];
      k_share += s.k.top_share / heads;
      v_share += s.v.top_share / heads;
      k_cond = std::max(k_cond, s.k.condition);
      v_cond = std::max(v_cond, s.v.condition);
      k_clip += s.k_clip / heads;
      v_clip += s.v_clip / heads;
    }
    fmt::print("{:>5}  {:>11.3f} {:>10.3g}  {:>11.3f} {:>10.3g}  {:>6.3f} {:>6.3f}\n",
               r.heads[first].layer, k_share, k_cond, v_share, v_cond, k_clip, v_clip);
  }
  fmt::print(
      "(top share: largest eigenvalue / trace, mean over KV heads; cond: largest / "
      "smallest eigenvalue, worst KV head)\n");
}

int run(Options o) {
  oscar::set_cpu_threads(o.threads);
  const auto t0 = std::chrono::steady_clock::now();
  OSCAR_CHECK(oscar::is_directory(o.model_dir), "model directory '{}' does not exist", o.model_dir);
  OSCAR_CHECK(!o.out_path.empty() || !o.save_stats.empty(),
              "nothing to write: give --out (a bundle) and/or --save-stats");
  oscar::check_writable(o.out_path, "bundle");
  oscar::check_writable(o.save_stats, "statistics file");
  const auto [shard_index, shard_count] = parse_shard(o.shard);

  oscar::RotationOptions rot;
  rot.grouping = oscar::parse_grouping(o.grouping);
  rot.value_objective = oscar::parse_value_objective(o.value_objective);
  rot.composition = oscar::parse_composition(o.composition);
  rot.center_keys = o.center_keys;
  rot.center_values = o.center_values;
  rot.smooth_keys = o.smooth_keys;
  rot.clip_k = o.clip_k;
  rot.clip_v = o.clip_v;
  rot.eigen_backend = oscar::parse_eigen_backend(o.eigen);

  const oscar::ModelIdentity identity = oscar::model_identity(o.model_dir);
  const oscar::ModelConfig config = oscar::load_model_config(o.model_dir);
  if (rot.composition != oscar::Composition::kR) oscar::hadamard_matrix(config.head_dim);
  OSCAR_CHECK(o.group_size == 0 || (o.group_size > 0 && config.head_dim % o.group_size == 0),
              "--group-size {} does not divide head_dim {}", o.group_size, config.head_dim);

  std::string device_name = o.device;
  if (device_name == "auto") device_name = torch::cuda::is_available() ? "cuda" : "cpu";
  const torch::Device device = oscar::parse_device_name(device_name);

  oscar::StatsProvenance provenance;
  provenance.model_name = identity.name;
  provenance.config_sha256 = identity.config_sha256;
  provenance.weights_header_sha256 = identity.weights_header_sha256;
  provenance.shard_index = shard_index;
  provenance.shard_count = shard_count;

  std::optional<oscar::KvStatistics> stats;
  std::optional<oscar::ClipSearch> clip_search;
  std::int64_t tokens_used = 0;
  if (!o.merge_stats.empty()) {
    // Combine shards computed elsewhere; no data pass for the main statistics.
    for (const std::string& path : o.merge_stats) {
      oscar::StatsProvenance p;
      auto part = oscar::KvStatistics::load(path, device, &p);
      if (stats) {
        check_same_source(provenance, p, fmt::format("statistics '{}' do not fit the others", path),
                          SameSource::kModel);
      }
      OSCAR_CHECK(p.config_sha256 == identity.config_sha256 &&
                      p.weights_header_sha256 == identity.weights_header_sha256,
                  "statistics '{}' were computed for model '{}', not for '{}'", path, p.model_name,
                  o.model_dir);
      if (!stats) {
        stats.emplace(std::move(part));
        provenance = p;
        provenance.shard_index = 0;
        provenance.shard_count = 1;
      } else {
        stats->merge(part);
        if (p.dataset_sha256 != provenance.dataset_sha256) {
          provenance.dataset_name += "+" + p.dataset_name;
          provenance.dataset_sha256 =
              oscar::sha256_hex(provenance.dataset_sha256 + p.dataset_sha256);
        }
      }
    }
    OSCAR_CHECK(!o.clip_search,
                "--clip-search needs the data and the model: not with --merge-stats");
    OSCAR_CHECK(o.keyweight_from.empty(),
                "--keyweight-from starts a data pass: not with "
                "--merge-stats");
    OSCAR_CHECK(rot.value_objective == oscar::ValueObjective::kAttn || stats->in_keyweight_pass(),
                "--value-objective keyweight needs key-weighted statistics: merge the main-pass "
                "shards (--merge-stats ... --save-stats main.st), run each shard's key-weighted "
                "pass from them (--shard I/N --value-objective keyweight --keyweight-from main.st "
                "--save-stats kw_I.st), then merge those");
    tokens_used = stats->main_tokens();
    if (!o.quiet) {
      fmt::print(stderr, "merged {} statistics files: {} tokens{}\n", o.merge_stats.size(),
                 tokens_used,
                 stats->in_keyweight_pass()
                     ? fmt::format(" ({} in the key-weighted pass)", stats->keyweight_tokens())
                     : "");
    }
    if (!o.save_stats.empty()) stats->save(o.save_stats, provenance);
  } else {
    if (o.data_path.empty()) o.data_path = default_data_path();
    oscar::LoadOptions load;
    load.device = device;
    if (o.dtype == "stored") {
      load.keep_stored_dtype = true;
    } else if (o.dtype != "auto") {
      load.dtype = oscar::parse_dtype_name(o.dtype);
    }
    const std::string tokenizer_path = oscar::join_path(o.model_dir, "tokenizer.json");
    OSCAR_CHECK(oscar::file_exists(tokenizer_path), "no tokenizer.json in '{}'", o.model_dir);
    const auto tokenizer = oscar::Tokenizer::from_file(tokenizer_path);
    oscar::DataOptions data_options;
    data_options.format = oscar::parse_data_format(o.format);
    data_options.seq_len =
        o.seq_len > 0 ? o.seq_len : std::min<std::int64_t>(config.max_position_embeddings, 2048);
    data_options.tokens = o.tokens * shard_count;  // every shard gets --tokens
    // --clip-search holds the last sequences back from the statistics to choose clip ratios on.
    const std::int64_t holdback =
        o.clip_search ? (o.clip_holdback + data_options.seq_len - 1) / data_options.seq_len : 0;
    data_options.tokens += holdback * data_options.seq_len;
    data_options.seed = o.seed;
    if (config.bos_token_id)
      data_options.bos_token = static_cast<std::int32_t>(*config.bos_token_id);
    const auto data = oscar::load_calibration_data(o.data_path, tokenizer, data_options);
    std::vector<std::size_t> selected;
    const std::size_t stats_sequences = data.sequences.size() - static_cast<std::size_t>(holdback);
    for (std::size_t i = 0; i < stats_sequences; ++i) {
      if (static_cast<std::int64_t>(i) % shard_count == shard_index) selected.push_back(i);
    }
    provenance.dataset_name = data.name;
    provenance.dataset_sha256 = data.sha256;
    provenance.seq_len = data.seq_len;
    provenance.seed = o.seed;

    auto model = oscar::Model::load(o.model_dir, load);
    provenance.compute_dtype = oscar::dtype_short_name(model.dtype());
    if (!o.quiet) {
      fmt::print(stderr, "model: {} ({} on {})\n", oscar::describe(config),
                 oscar::dtype_short_name(model.dtype()), model.device().str());
      fmt::print(stderr, "data: {} ({}, {} documents, {} tokens available): {} sequences x {}\n",
                 data.name, oscar::data_format_name(data.format), data.documents,
                 data.available_tokens, selected.size(), data.seq_len);
    }
    OSCAR_CHECK(
        o.keyweight_from.empty() || rot.value_objective == oscar::ValueObjective::kKeyWeight,
        "--keyweight-from runs the key-weighted pass: give --value-objective keyweight");
    if (!o.resume_stats.empty() && oscar::file_exists(o.resume_stats)) {
      oscar::StatsProvenance saved;
      stats.emplace(oscar::KvStatistics::load(o.resume_stats, device, &saved));
      check_same_source(saved, provenance,
                        fmt::format("cannot resume from '{}': it was computed from different "
                                    "inputs",
                                    o.resume_stats),
                        SameSource::kShard);
      if (!o.quiet) {
        fmt::print(stderr, "resuming from {}: {} + {} sequences done\n", o.resume_stats,
                   stats->main_sequences, stats->keyweight_sequences);
      }
    } else if (!o.keyweight_from.empty()) {
      // The second pass of a sharded key-weighted calibration: C_Q from the merged main pass of
      // all shards, so that every shard weights its values alike and the parts merge.
      oscar::StatsProvenance main_pass;
      stats.emplace(oscar::KvStatistics::load(o.keyweight_from, device, &main_pass));
      check_same_source(main_pass, provenance,
                        fmt::format("statistics '{}' do not fit this run", o.keyweight_from),
                        SameSource::kData);
      OSCAR_CHECK(!stats->in_keyweight_pass(),
                  "statistics '{}' are already in the key-weighted pass: give the merged "
                  "main-pass statistics",
                  o.keyweight_from);
      stats->begin_keyweight_pass();
      if (!o.quiet) {
        fmt::print(stderr, "key-weighted pass with C_Q from {} ({} tokens)\n", o.keyweight_from,
                   stats->main_tokens());
      }
    } else {
      stats.emplace(config.num_layers, config.num_heads, config.num_kv_heads, config.head_dim,
                    device);
    }
    if (!stats->in_keyweight_pass()) {
      stream_pass(model, data, selected, *stats, stats->main_sequences, o, provenance,
                  "statistics");
    }
    if (rot.value_objective == oscar::ValueObjective::kKeyWeight) {
      if (!stats->in_keyweight_pass()) stats->begin_keyweight_pass();
      stream_pass(model, data, selected, *stats, stats->keyweight_sequences, o, provenance,
                  "key-weighted values");
    }
    tokens_used = stats->main_tokens();
    if (!o.save_stats.empty()) stats->save(o.save_stats, provenance);
    if (o.clip_search) {
      clip_search.emplace(config.num_layers, config.num_heads, config.num_kv_heads,
                          oscar::WindowParams{o.sink, o.recent}, o.group_size,
                          oscar::int2::parse_scale_dtype(o.scale_dtype));
      oscar::ForwardOptions f;
      f.observer = &*clip_search;
      for (std::size_t i = stats_sequences; i < data.sequences.size(); ++i) {
        model.hidden_states(torch::tensor(data.sequences[i], torch::kInt64).unsqueeze(0), f);
      }
    }
  }

  nlohmann::json report = {{"model", o.model_dir},
                           {"tokens", tokens_used},
                           {"seq_len", provenance.seq_len},
                           {"device", device.str()}};
  if (!o.out_path.empty()) {
    const auto te = std::chrono::steady_clock::now();
    auto rotations = oscar::compute_rotations(*stats, rot);
    if (clip_search) clip_search->search(rotations, rot, oscar::default_clip_grid());
    const double eigen_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - te).count();
    oscar::QuantizationParams quant;
    quant.group_size = o.group_size;
    quant.sink_tokens = o.sink;
    quant.recent_tokens = o.recent;
    quant.scale_dtype = o.scale_dtype;
    oscar::CalibrationProvenance cal;
    cal.dataset_name = provenance.dataset_name;
    cal.dataset_sha256 = provenance.dataset_sha256;
    cal.tokens = tokens_used;
    cal.seq_len = provenance.seq_len;
    cal.seed = provenance.seed;
    cal.device = device.is_cuda() ? "cuda" : "cpu";
    cal.clip_method = clip_search ? "search" : "fixed";
    auto bundle = oscar::make_bundle(rotations, rot, identity, quant, cal);
    bundle.created = utc_now();
    oscar::write_bundle(o.out_path, bundle);
    const auto check = oscar::read_bundle(o.out_path);  // what an engine will see
    const double k_err = oscar::max_orthogonality_error(check, 'k');
    const double v_err = oscar::max_orthogonality_error(check, 'v');
    if (!o.quiet || !o.json) print_summary(rotations, config.num_kv_heads);
    report["bundle"] = o.out_path;
    report["tensor_sha256"] = check.tensor_sha256;
    report["eigen_backend"] = rotations.eigen_backend;
    report["eigen_seconds"] = eigen_seconds;
    report["orthogonality_error"] = {{"k", k_err}, {"v", v_err}};
    nlohmann::json heads = nlohmann::json::array();
    for (const auto& s : rotations.heads) {
      heads.push_back({{"layer", s.layer},
                       {"head", s.head},
                       {"k_top_share", s.k.top_share},
                       {"k_condition", s.k.condition},
                       {"v_top_share", s.v.top_share},
                       {"v_condition", s.v.condition},
                       {"k_clip", s.k_clip},
                       {"v_clip", s.v_clip}});
    }
    report["heads"] = heads;
    report["manifest"] = nlohmann::json::parse(oscar::bundle_manifest_json(check));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report["seconds"] = seconds;
  report["tokens_per_second"] = static_cast<double>(tokens_used) / seconds;
  if (!o.json_path.empty()) {
    oscar::write_file_atomic(o.json_path, report.dump(2) + "\n");
  }
  if (o.json) {
    std::cout << report.dump(2) << "\n";
  } else if (!o.out_path.empty()) {
    fmt::print("wrote {} ({} layers x {} KV heads, d {}; {} tokens; {:.1f} s, {:.0f} tok/s)\n",
               o.out_path, config.num_layers, config.num_kv_heads, config.head_dim, tokens_used,
               seconds, static_cast<double>(tokens_used) / seconds);
  } else {
    fmt::print("saved statistics to {} ({} tokens)\n", o.save_stats, tokens_used);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "oscar-calibrate: computes OSCAR KV-cache rotations for a Hugging Face model from "
      "calibration text and writes a rotation bundle"};
  Options o;
  app.add_option("--model", o.model_dir,
                 "Hugging Face model directory (config.json, safetensors, tokenizer.json)")
      ->required();
  app.add_option("--data", o.data_path,
                 fmt::format("Calibration data: text (blank-line separated paragraphs or one "
                             "document), .jsonl with a \"text\" field, or .json token ids "
                             "(default: the project's {})",
                             kDefaultData));
  app.add_option("--format", o.format, "Data format: auto, paragraphs, document, jsonl, ids")
      ->default_val("auto");
  app.add_option("--out", o.out_path, "Bundle to write (.safetensors)");
  app.add_option("--tokens", o.tokens, "Calibration tokens (rounded up to whole sequences)")
      ->default_val(32768)
      ->check(CLI::PositiveNumber);
  app.add_option("--seq-len", o.seq_len, "Sequence length (default: min(context, 2048))")
      ->default_val(0);
  app.add_option("--batch", o.batch, "Sequences per forward")
      ->default_val(1)
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "Document order: 0 keeps file order, other values shuffle")
      ->default_val(0);
  app.add_option("--device", o.device, "auto (cuda when available), cpu, cuda or cuda:N")
      ->default_val("auto");
  app.add_option("--dtype", o.dtype,
                 "Compute dtype: auto (stored on GPU, f32 on CPU), stored, f32, bf16, f16")
      ->default_val("auto")
      ->check(CLI::IsMember({"auto", "stored", "f32", "bf16", "f16"}));
  app.add_option("--value-objective", o.value_objective,
                 "C_S: attn (second moment of attention outputs) or keyweight (key-weighted value "
                 "proxy; a second pass)")
      ->default_val("attn");
  app.add_option("--grouping", o.grouping, "head (one rotation per KV head) or layer")
      ->default_val("head");
  app.add_option("--composition", o.composition, "R = r_h_pbr (U H P), r, r_h or h")
      ->default_val("r_h_pbr");
  app.add_flag("--center-keys,!--no-center-keys", o.center_keys,
               "Store per-head key means for key centring (default on; --no-center-keys: off)");
  app.add_flag("--center-values", o.center_values,
               "Store per-head value means for value centring (exact: softmax rows sum to 1)");
  app.add_option(
         "--smooth-keys", o.smooth_keys,
         "Key smoothing strength alpha in [0, 1]: keys / s, queries * s per channel with "
         "s = (sigma_k / sigma_q)^alpha (exact for q . k; 0: off, which writes a v1 bundle)")
      ->default_val(0.5)
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--clip-k", o.clip_k, "Key clip ratio")->default_val(0.96);
  app.add_option("--clip-v", o.clip_v, "Value clip ratio")->default_val(0.92);
  app.add_flag("--clip-search", o.clip_search,
               "Choose K/V clip ratios per layer and head (grid 0.80..1.00) by the attention-aware "
               "error on held-back calibration tokens");
  app.add_option("--clip-holdback", o.clip_holdback,
                 "Tokens held back from the statistics for --clip-search")
      ->default_val(2048);
  app.add_option("--group-size", o.group_size, "Quantization group size (0: head_dim)")
      ->default_val(0);
  app.add_option("--sink", o.sink, "BF16 sink tokens S0 recorded in the bundle")->default_val(64);
  app.add_option("--recent", o.recent, "BF16 recent window W recorded in the bundle")
      ->default_val(256);
  app.add_option("--scale-dtype", o.scale_dtype, "Scale/zero dtype recorded in the bundle")
      ->default_val("bf16")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  app.add_option("--eigen", o.eigen, "Eigensolver: auto, lapack, cusolver, torch")
      ->default_val("auto");
  app.add_option("--save-stats", o.save_stats,
                 "Save the accumulated statistics here (periodically and at the end)");
  app.add_option("--save-interval", o.save_interval, "Seconds between statistics saves")
      ->default_val(60.0);
  app.add_option("--resume-stats", o.resume_stats,
                 "Continue from saved statistics (skips the sequences already consumed)");
  app.add_option("--merge-stats", o.merge_stats,
                 "Merge saved statistics files (shards) instead of reading data")
      ->delimiter(',');
  app.add_option("--keyweight-from", o.keyweight_from,
                 "Sharded --value-objective keyweight: run only the key-weighted pass, with C_Q "
                 "from these merged main-pass statistics");
  app.add_option("--shard", o.shard, "Use sequences i with i % N == I (I/N), for sharded runs")
      ->default_val("0/1");
  app.add_option("--threads", o.threads, oscar::kCpuThreadsHelp)->default_val(0);
  app.add_flag("--json", o.json, "Print the report as JSON on stdout");
  app.add_option("--json-out", o.json_path, "Also write the JSON report to this file");
  app.add_flag("-q,--quiet", o.quiet, "No progress output");
  app.set_version_flag("--version", std::string(oscar::version()));
  CLI11_PARSE(app, argc, argv);
  return oscar_app::run_app("oscar-calibrate", [&]() -> int { return run(o); });
}
