// oscar-tokenize: encodes text (or decodes ids) with a tokenizer.json, for checks against Python.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/tokenizer.h"
#include "run_app.h"

namespace {

struct Options {
  std::string tokenizer;
  std::string text_file;
  std::string text;
  bool have_string = false;
  bool no_special = false;
  bool decode = false;
  bool keep_special = false;
  bool with_decode = false;
  std::string unit = "file";
  std::string json_out;
};

using Span = std::pair<std::size_t, std::size_t>;  // byte range [first, second)

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

// Byte ranges of the units of `text`. "line": each '\n'-separated line that is not empty;
// "paragraph": runs of lines separated by blank (whitespace-only) lines, trimmed of surrounding
// whitespace; "file": the whole text. Ranges (not strings) go into the JSON so that the Python
// checker encodes exactly the same bytes.
std::vector<Span> split_units(const std::string& text, const std::string& unit) {
  std::vector<Span> spans;
  if (unit == "file") {
    spans.emplace_back(0, text.size());
    return spans;
  }
  std::vector<Span> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t nl = text.find('\n', start);
    std::size_t end = nl == std::string::npos ? text.size() : nl;
    lines.emplace_back(start, end);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  if (unit == "line") {
    for (auto& l : lines) {
      if (l.second > l.first) spans.push_back(l);
    }
    return spans;
  }
  auto blank = [&](const Span& l) {
    for (std::size_t k = l.first; k < l.second; ++k) {
      if (!is_space(text[k])) return false;
    }
    return true;
  };
  std::size_t k = 0;
  while (k < lines.size()) {
    if (blank(lines[k])) {
      ++k;
      continue;
    }
    std::size_t first = lines[k].first;
    std::size_t last = lines[k].second;
    while (k < lines.size() && !blank(lines[k])) last = lines[k++].second;
    while (first < last && is_space(text[first])) ++first;
    while (last > first && is_space(text[last - 1])) --last;
    spans.emplace_back(first, last);
  }
  return spans;
}

std::vector<std::int32_t> parse_ids(const std::string& s) {
  std::vector<std::int32_t> ids;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    try {
      std::size_t used = 0;
      long long v = std::stoll(cur, &used);
      OSCAR_CHECK(used == cur.size() && v >= INT32_MIN && v <= INT32_MAX, "bad token id '{}'", cur);
      ids.push_back(static_cast<std::int32_t>(v));
    } catch (const std::logic_error&) {
      oscar::fail("bad token id '{}'", cur);
    }
    cur.clear();
  };
  for (char c : s) {
    if (is_space(c) || c == ',' || c == '[' || c == ']') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  return ids;
}

int run(const Options& o) {
  OSCAR_CHECK(o.have_string != !o.text_file.empty(), "give exactly one of --text and --string");
  oscar::Tokenizer tok = oscar::Tokenizer::from_file(o.tokenizer);
  std::string input = o.have_string ? o.text : oscar::read_file(o.text_file);

  if (o.decode) {
    fmt::print("{}", tok.decode(parse_ids(input), !o.keep_special));
    return 0;
  }

  const bool add_special = !o.no_special;
  std::vector<Span> spans = split_units(input, o.unit);
  nlohmann::json all_ids = nlohmann::json::array();
  nlohmann::json json_spans = nlohmann::json::array();
  nlohmann::json decoded = nlohmann::json::array();
  for (const Span& s : spans) {
    auto ids = tok.encode(std::string_view(input).substr(s.first, s.second - s.first), add_special);
    if (o.json_out.empty()) fmt::print("{}\n", fmt::join(ids, " "));
    all_ids.push_back(ids);
    json_spans.push_back({s.first, s.second});
    if (o.with_decode) decoded.push_back(tok.decode(ids, true));
  }
  if (!o.json_out.empty()) {
    nlohmann::json out = {{"tokenizer", o.tokenizer},
                          {"unit", o.unit},
                          {"add_special_tokens", add_special},
                          {"spans", json_spans},
                          {"ids", all_ids}};
    if (o.with_decode) out["decoded"] = decoded;
    oscar::write_file_atomic(o.json_out, out.dump() + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oscar-tokenize: encode text or decode ids with a Hugging Face tokenizer.json"};
  Options o;
  app.add_option("--tokenizer", o.tokenizer, "tokenizer.json")->required();
  auto* text = app.add_option("--text", o.text_file, "Input file (text, or ids with --decode)");
  auto* str = app.add_option("--string", o.text, "Input string (text, or ids with --decode)");
  text->excludes(str);
  app.add_flag("--no-special", o.no_special, "Encode without the post-processor's special tokens");
  app.add_option("--unit", o.unit,
                 "Encode the whole file, each blank-line separated paragraph, or each line")
      ->check(CLI::IsMember({"file", "paragraph", "line"}));
  app.add_option("--json", o.json_out,
                 "Write {unit, add_special_tokens, spans, ids} as JSON instead of printing ids");
  app.add_flag("--decode", o.decode, "Decode whitespace/comma separated ids instead of encoding");
  app.add_flag("--with-decode", o.with_decode,
               "With --json: also store each unit's decoded ids (special tokens skipped)");
  app.add_flag("--keep-special", o.keep_special, "With --decode: keep special tokens");
  CLI11_PARSE(app, argc, argv);
  o.have_string = str->count() > 0;
  return oscar_app::run_app("oscar-tokenize", [&]() -> int { return run(o); });
}
