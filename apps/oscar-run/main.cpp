// oscar-run: perplexity of a Hugging Face model on a text file, with the project's reference
// forward.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "oscar/cpu_threads.h"
#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/model.h"
#include "oscar/progress.h"
#include "oscar/text.h"
#include "oscar/tokenizer.h"
#include "oscar/version.h"
#include "run_app.h"

namespace {

struct Options {
  std::string model_dir;
  std::string data_path;
  bool paragraphs = false;
  std::int64_t max_paragraphs = 0;
  std::int64_t seq_len = 0;
  std::int64_t max_windows = 0;
  std::int64_t batch = 1;
  std::string dtype = "auto";
  std::string device = "cpu";
  int threads = 0;
  bool json = false;
  bool quiet = false;
};

// Builds the sequences to score: one per paragraph (from BOS, truncated to seq_len), or the whole
// text as one token stream cut into consecutive windows of seq_len.
std::vector<std::vector<std::int32_t>> build_sequences(const Options& o,
                                                       const oscar::Tokenizer& tokenizer,
                                                       const oscar::ModelConfig& config,
                                                       std::int64_t seq_len) {
  const std::string text = oscar::read_file(o.data_path);
  OSCAR_CHECK(!text.empty(), "data file '{}' is empty", o.data_path);
  std::vector<std::vector<std::int32_t>> seqs;
  auto with_bos = [&](std::vector<std::int32_t> ids) {
    if (config.bos_token_id && (ids.empty() || ids.front() != *config.bos_token_id)) {
      ids.insert(ids.begin(), static_cast<std::int32_t>(*config.bos_token_id));
    }
    return ids;
  };
  if (o.paragraphs) {
    auto paras = oscar::split_paragraphs(text);
    if (o.max_paragraphs > 0 && static_cast<std::int64_t>(paras.size()) > o.max_paragraphs) {
      paras.resize(static_cast<std::size_t>(o.max_paragraphs));
    }
    for (const auto& p : paras) {
      auto ids = with_bos(tokenizer.encode(p, /*add_special_tokens=*/true));
      if (static_cast<std::int64_t>(ids.size()) > seq_len)
        ids.resize(static_cast<std::size_t>(seq_len));
      if (ids.size() >= 2) seqs.push_back(std::move(ids));
    }
  } else {
    auto ids = with_bos(tokenizer.encode(text, /*add_special_tokens=*/true));
    for (std::size_t start = 0; start + 1 < ids.size();
         start += static_cast<std::size_t>(seq_len)) {
      std::size_t end = std::min(ids.size(), start + static_cast<std::size_t>(seq_len));
      seqs.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(start),
                        ids.begin() + static_cast<std::ptrdiff_t>(end));
      if (o.max_windows > 0 && static_cast<std::int64_t>(seqs.size()) >= o.max_windows) break;
    }
  }
  OSCAR_CHECK(!seqs.empty(), "no sequence of at least 2 tokens in '{}'", o.data_path);
  return seqs;
}

int run(const Options& o) {
  oscar::set_cpu_threads(o.threads);
  oscar::LoadOptions load;
  load.device = oscar::parse_device_name(o.device);
  if (o.dtype == "stored") {
    load.keep_stored_dtype = true;
  } else if (o.dtype != "auto") {
    load.dtype = oscar::parse_dtype_name(o.dtype);
  }
  OSCAR_CHECK(oscar::is_directory(o.model_dir), "model directory '{}' does not exist", o.model_dir);
  const std::string tokenizer_path = oscar::join_path(o.model_dir, "tokenizer.json");
  OSCAR_CHECK(oscar::file_exists(tokenizer_path), "no tokenizer.json in '{}'", o.model_dir);
  auto tokenizer = oscar::Tokenizer::from_file(tokenizer_path);
  auto model = oscar::Model::load(o.model_dir, load);
  const auto& config = model.config();
  const std::int64_t seq_len =
      o.seq_len > 0 ? o.seq_len : std::min<std::int64_t>(config.max_position_embeddings, 2048);
  OSCAR_CHECK(seq_len >= 2, "--seq-len must be at least 2");
  if (seq_len > config.max_position_embeddings) {
    fmt::print(stderr, "warning: --seq-len {} exceeds the model's max_position_embeddings {}\n",
               seq_len, config.max_position_embeddings);
  }
  if (!o.quiet) {
    fmt::print(stderr, "model: {} ({} on {})\n", oscar::describe(config),
               oscar::dtype_short_name(model.dtype()), model.device().str());
  }
  auto seqs = build_sequences(o, tokenizer, config, seq_len);
  std::int64_t total_predictions = 0;
  for (const auto& s : seqs) total_predictions += static_cast<std::int64_t>(s.size()) - 1;

  oscar::NllSum sum;
  oscar::Progress progress("scoring", total_predictions, "tok", !o.quiet);
  auto t0 = std::chrono::steady_clock::now();
  // Sequences of equal length are batched together (paragraphs usually differ: batch of one).
  std::size_t i = 0;
  while (i < seqs.size()) {
    std::size_t j = i + 1;
    while (j < seqs.size() && static_cast<std::int64_t>(j - i) < o.batch &&
           seqs[j].size() == seqs[i].size()) {
      ++j;
    }
    const auto T = static_cast<std::int64_t>(seqs[i].size());
    auto tokens = torch::empty({static_cast<std::int64_t>(j - i), T}, torch::kInt64);
    for (std::size_t r = i; r < j; ++r) {
      auto row = tokens[static_cast<std::int64_t>(r - i)];
      for (std::int64_t t = 0; t < T; ++t) row[t] = seqs[r][static_cast<std::size_t>(t)];
    }
    auto part = model.score(tokens);
    sum.nll += part.nll;
    sum.count += part.count;
    progress.advance(part.count);
    i = j;
  }
  progress.finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double ppl = sum.perplexity();
  if (o.json) {
    nlohmann::json j = {
        {"model", o.model_dir},
        {"data", o.data_path},
        {"mode", o.paragraphs ? "paragraphs" : "windows"},
        {"sequences", seqs.size()},
        {"seq_len", seq_len},
        {"tokens", sum.count},
        {"nll_per_token", sum.nll / static_cast<double>(sum.count)},
        {"perplexity", ppl},
        {"dtype", oscar::dtype_short_name(model.dtype())},
        {"device", model.device().str()},
        {"seconds", seconds},
        {"tokens_per_second", static_cast<double>(sum.count) / seconds},
        {"oscar_version", oscar::version()},
    };
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("perplexity {:.4f} over {} tokens in {} sequences ({:.1f} tok/s)\n", ppl, sum.count,
               seqs.size(), static_cast<double>(sum.count) / seconds);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oscar-run: perplexity of a Hugging Face model on a text file"};
  Options o;
  app.add_option("--model", o.model_dir,
                 "Hugging Face model directory (config.json, safetensors, tokenizer.json)")
      ->required();
  app.add_option("--data", o.data_path, "UTF-8 text file to score")->required();
  app.add_flag("--paragraphs", o.paragraphs,
               "Score blank-line separated paragraphs, each from BOS (default: one stream cut into "
               "windows of --seq-len)");
  app.add_option("--max-paragraphs", o.max_paragraphs,
                 "With --paragraphs: score only the first N (0: all)")
      ->default_val(0);
  app.add_option("--seq-len", o.seq_len,
                 "Window length / paragraph truncation in tokens (default: min(context, 2048))")
      ->default_val(0);
  app.add_option("--windows", o.max_windows, "Score at most N windows (0: all)")->default_val(0);
  app.add_option("--batch", o.batch, "Sequences per forward (equal-length windows)")
      ->default_val(1)
      ->check(CLI::PositiveNumber);
  app.add_option("--dtype", o.dtype,
                 "Compute dtype: auto (stored on GPU, f32 on CPU), stored, f32, bf16, f16")
      ->default_val("auto")
      ->check(CLI::IsMember({"auto", "stored", "f32", "bf16", "f16"}));
  app.add_option("--device", o.device, "cpu, cuda or cuda:N")->default_val("cpu");
  app.add_option("--threads", o.threads, oscar::kCpuThreadsHelp)->default_val(0);
  app.add_flag("--json", o.json, "Print a JSON object (perplexity, tokens, ...) on stdout");
  app.add_flag("-q,--quiet", o.quiet, "No progress output");
  app.set_version_flag("--version", std::string(oscar::version()));
  CLI11_PARSE(app, argc, argv);
  return oscar_app::run_app("oscar-run", [&]() -> int { return run(o); });
}
