// oscar::Tokenizer: loads tokenizer.json, splits on added tokens, runs the pipeline, decodes.
#include "oscar/tokenizer.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "internal.h"
#include "oscar/file.h"

namespace oscar {

using tok::Json;
using tok::Piece;

namespace {

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;

  bool operator==(const AddedToken& o) const {
    return content == o.content && single_word == o.single_word && lstrip == o.lstrip &&
           rstrip == o.rstrip && normalized == o.normalized && special == o.special;
  }
};

// Leftmost-longest multi-pattern search (the Aho-Corasick automaton of `tokenizers`), done by
// bucketing patterns on their first byte: added-token lists are short.
class TokenMatcher {
 public:
  void add(std::string pattern, std::int32_t id) {
    auto first = static_cast<std::uint8_t>(pattern[0]);
    auto& bucket = buckets_[first];
    for (auto& e : bucket) {
      if (e.first == pattern) {
        e.second = id;
        return;
      }
    }
    bucket.emplace_back(std::move(pattern), id);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    empty_ = false;
  }
  bool empty() const { return empty_; }

  // The next match at or after `from`: (start, length, id); length 0 when none.
  std::tuple<std::size_t, std::size_t, std::int32_t> find(std::string_view s,
                                                          std::size_t from) const {
    for (std::size_t pos = from; pos < s.size(); ++pos) {
      const auto& bucket = buckets_[static_cast<std::uint8_t>(s[pos])];
      for (const auto& [pattern, id] : bucket) {
        if (s.compare(pos, pattern.size(), pattern) == 0) return {pos, pattern.size(), id};
      }
    }
    return {s.size(), 0, -1};
  }

 private:
  std::array<std::vector<std::pair<std::string, std::int32_t>>, 256> buckets_;
  bool empty_ = true;
};

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return tok::is_word_char(tok::next_char(s, k));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = 0;
  return tok::is_word_char(tok::next_char(s, i));
}

// Start of the trailing run of whitespace in `s`.
std::size_t trailing_space_start(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t k = end - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    std::size_t j = k;
    if (!tok::is_whitespace(tok::next_char(s, j))) break;
    end = k;
  }
  return end;
}

// Length of the leading run of whitespace in `s`.
std::size_t leading_space_len(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    if (!tok::is_whitespace(tok::next_char(s, j))) break;
    i = j;
  }
  return i;
}

struct Split {
  std::size_t begin, end;
  std::int32_t id;  // -1: plain text
};

enum class Direction { kLeft, kRight };

// Nesting depth of a JSON value, computed without recursion: component factories recurse into
// Sequence members, so absurdly deep files are refused before they could exhaust the stack.
std::size_t json_depth(const Json& root) {
  std::size_t max_depth = 0;
  std::vector<std::pair<const Json*, std::size_t>> stack = {{&root, 1}};
  while (!stack.empty()) {
    auto [j, d] = stack.back();
    stack.pop_back();
    max_depth = std::max(max_depth, d);
    if (j->is_structured()) {
      for (const Json& child : *j) stack.emplace_back(&child, d + 1);
    }
  }
  return max_depth;
}

constexpr std::size_t kMaxComponentDepth = 64;

}  // namespace

struct Tokenizer::Impl {
  std::string origin;
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tok::BpeModel> model;
  std::unique_ptr<tok::PostProcessor> post_processor;
  std::unique_ptr<tok::Decoder> decoder;

  // Added vocabulary, as tokenizers' AddedVocabulary.
  std::unordered_map<std::string, std::int32_t> added_map;
  std::map<std::int32_t, AddedToken> added_by_id;
  std::unordered_map<std::int32_t, std::string> normalized_form;  // when it differs from content
  std::unordered_set<std::string> special_set;
  TokenMatcher raw_matcher;         // tokens with normalized == false
  TokenMatcher normalized_matcher;  // tokens with normalized == true

  struct Truncation {
    std::size_t max_length;
    bool only_second;
    Direction direction;
  };
  std::optional<Truncation> truncation;
  struct Padding {
    std::optional<std::size_t> fixed;
    std::size_t multiple = 0;
    Direction direction = Direction::kRight;
    std::int32_t pad_id = 0;
  };
  std::optional<Padding> padding;

  void load(const Json& root);
  void add_tokens(const Json& list);
  std::vector<Split> find_added(std::string_view s, const TokenMatcher& m) const;
  void encode_into(const std::string& text, std::vector<std::int32_t>& ids) const;
  void post_process(std::vector<std::int32_t>& ids, bool add_special_tokens) const;
  const std::string* id_to_token(std::int32_t id) const;
};

void Tokenizer::Impl::load(const Json& root) {
  if (!root.is_object()) tok::config_fail(origin, "the top level must be a JSON object");
  auto version = root.find("version");
  if (version != root.end() && !(version->is_string() && *version == "1.0")) {
    tok::config_fail(origin, fmt::format("unknown tokenizer version {}", version->dump()));
  }
  const Json& model_json = tok::require_field(root, "model", origin, "the top level");
  // Files written by `tokenizers` always tag the model; untagged ones are BPE if they merge.
  std::string model_type =
      model_json.is_object() && model_json.contains("type")
          ? tok::component_type(model_json, origin, "model")
          : (model_json.is_object() && model_json.contains("merges") ? "BPE" : "(untagged)");
  if (model_type != "BPE") {
    tok::config_fail(
        origin, fmt::format("unsupported model type '{}' (only BPE is supported)", model_type));
  }
  for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder"}) {
    auto it = root.find(key);
    if (it != root.end() && json_depth(*it) > kMaxComponentDepth) {
      tok::config_fail(origin, fmt::format("'{}' is nested too deeply", key));
    }
  }
  normalizer = tok::make_normalizer(root.value("normalizer", Json()), origin);
  pre_tokenizer = tok::make_pre_tokenizer(root.value("pre_tokenizer", Json()), origin);
  model = std::make_unique<tok::BpeModel>(model_json, origin);
  post_processor = tok::make_post_processor(root.value("post_processor", Json()), origin);
  decoder = tok::make_decoder(root.value("decoder", Json()), origin);

  const Json trunc = root.value("truncation", Json());
  if (!trunc.is_null()) {
    const std::string where = "truncation";
    std::int64_t max_length = tok::get_int_or(trunc, "max_length", 512, origin, where);
    if (max_length < 0) tok::config_fail(origin, "truncation: max_length must be >= 0");
    std::string strategy = tok::get_string_or(trunc, "strategy", "LongestFirst", origin, where);
    if (strategy != "LongestFirst" && strategy != "OnlyFirst" && strategy != "OnlySecond") {
      tok::config_fail(origin, fmt::format("truncation: unknown strategy '{}'", strategy));
    }
    std::string direction = tok::get_string_or(trunc, "direction", "Right", origin, where);
    if (direction != "Left" && direction != "Right") {
      tok::config_fail(origin, fmt::format("truncation: unknown direction '{}'", direction));
    }
    truncation = Truncation{static_cast<std::size_t>(max_length), strategy == "OnlySecond",
                            direction == "Left" ? Direction::kLeft : Direction::kRight};
  }
  const Json pad = root.value("padding", Json());
  if (!pad.is_null()) {
    const std::string where = "padding";
    Padding p;
    const Json& strategy = tok::require_field(pad, "strategy", origin, where);
    if (strategy.is_object() && strategy.contains("Fixed") &&
        strategy["Fixed"].is_number_unsigned()) {
      p.fixed = strategy["Fixed"].get<std::size_t>();
    } else if (!(strategy.is_string() && strategy == "BatchLongest")) {
      tok::config_fail(origin, fmt::format("padding: unknown strategy {}", strategy.dump()));
    }
    std::int64_t multiple = tok::get_int_or(pad, "pad_to_multiple_of", 0, origin, where);
    p.multiple = multiple > 0 ? static_cast<std::size_t>(multiple) : 0;
    // Every encode allocates the padded length, so an absurd one (a corrupt file) would ask for
    // gigabytes per call; 2^24 tokens is far beyond any model's context.
    constexpr std::size_t kMaxPaddedLength = std::size_t{1} << 24;
    if (p.fixed.value_or(0) > kMaxPaddedLength || p.multiple > kMaxPaddedLength) {
      tok::config_fail(origin,
                       fmt::format("padding: length {} exceeds the limit of {} tokens",
                                   std::max(p.fixed.value_or(0), p.multiple), kMaxPaddedLength));
    }
    p.direction = tok::get_string_or(pad, "direction", "Right", origin, where) == "Left"
                      ? Direction::kLeft
                      : Direction::kRight;
    p.pad_id = static_cast<std::int32_t>(tok::get_int_or(pad, "pad_id", 0, origin, where));
    padding = p;
  }

  auto added = root.find("added_tokens");
  if (added != root.end() && !added->is_null()) add_tokens(*added);
}

void Tokenizer::Impl::add_tokens(const Json& list) {
  if (!list.is_array()) tok::config_fail(origin, "'added_tokens' must be a list");
  // The "id" stored in the file is not used: like `tokenizers`, a token takes its id from the
  // vocabulary when present there, else the next id after the model's vocabulary.
  auto next_id = static_cast<std::int32_t>(model->vocab_size());
  for (const Json& item : list) {
    const std::string where = "added token";
    AddedToken t;
    t.content = tok::get_string(item, "content", origin, where);
    t.single_word = tok::get_bool_or(item, "single_word", false, origin, where);
    t.lstrip = tok::get_bool_or(item, "lstrip", false, origin, where);
    t.rstrip = tok::get_bool_or(item, "rstrip", false, origin, where);
    t.special = tok::get_bool_or(item, "special", false, origin, where);
    t.normalized = tok::get_bool_or(item, "normalized", !t.special, origin, where);
    if (t.content.empty()) continue;
    OSCAR_CHECK(tok::is_valid_utf8(t.content), "tokenizer.json '{}': added token is not UTF-8",
                origin);
    auto existing = added_map.find(t.content);
    if (existing != added_map.end()) {
      auto r = added_by_id.find(existing->second);
      if (r != added_by_id.end() && r->second == t) continue;
    }
    std::int32_t id;
    if (existing != added_map.end()) {
      id = existing->second;
    } else if (auto mid = model->token_to_id(t.content)) {
      id = *mid;
    } else {
      id = next_id++;
    }
    if (t.normalized && normalizer) {
      Piece p = Piece::whole(t.content, true);
      normalizer->normalize(p);
      if (p.text != t.content) normalized_form[id] = p.text;
    }
    added_map[t.content] = id;
    if (t.special) special_set.insert(t.content);
    added_by_id[id] = t;
  }
  for (const auto& [id, t] : added_by_id) {
    if (t.normalized) {
      auto nf = normalized_form.find(id);
      const std::string& pattern = nf != normalized_form.end() ? nf->second : t.content;
      if (!pattern.empty()) normalized_matcher.add(pattern, id);
    } else {
      raw_matcher.add(t.content, id);
    }
  }
}

// AddedVocabulary::find_matches: splits `s` into plain text and added tokens.
std::vector<Split> Tokenizer::Impl::find_added(std::string_view s, const TokenMatcher& m) const {
  std::vector<Split> splits;
  if (m.empty()) {
    splits.push_back({0, s.size(), -1});
    return splits;
  }
  std::size_t start_offset = 0;
  std::size_t search = 0;
  while (search < s.size()) {
    auto [mstart, mlen, id] = m.find(s, search);
    if (mlen == 0) break;
    search = mstart + mlen;  // the automaton resumes after the match, even a discarded one
    std::size_t start = mstart, stop = mstart + mlen;
    const AddedToken& t = added_by_id.at(id);
    if (t.single_word) {
      bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
    if (t.rstrip) stop += leading_space_len(s.substr(stop));
    if (start_offset < start) splits.push_back({start_offset, start, -1});
    splits.push_back({start, stop, id});
    start_offset = stop;
  }
  if (start_offset < s.size()) splits.push_back({start_offset, s.size(), -1});
  return splits;
}

void Tokenizer::Impl::encode_into(const std::string& text, std::vector<std::int32_t>& ids) const {
  std::vector<Piece> words;
  auto run_pipeline = [&](Piece&& piece) {
    words.clear();
    words.push_back(std::move(piece));
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(words);
    for (const Piece& w : words) model->tokenize(w.text, ids);
  };
  for (const Split& outer : find_added(text, raw_matcher)) {
    if (outer.end <= outer.begin) continue;
    if (outer.id >= 0) {
      ids.push_back(outer.id);
      continue;
    }
    // Pieces between added tokens are normalized separately (e.g. Prepend applies to each).
    Piece piece = Piece::whole(text.substr(outer.begin, outer.end - outer.begin), outer.begin == 0);
    if (normalizer) normalizer->normalize(piece);
    if (piece.text.empty()) continue;
    for (const Split& inner : find_added(piece.text, normalized_matcher)) {
      if (inner.end <= inner.begin) continue;
      if (inner.id >= 0) {
        ids.push_back(inner.id);
      } else {
        run_pipeline(piece.slice(inner.begin, inner.end));
      }
    }
  }
}

void Tokenizer::Impl::post_process(std::vector<std::int32_t>& ids, bool add_special_tokens) const {
  if (truncation) {
    std::size_t max_length = truncation->max_length;
    std::size_t n_added = post_processor ? post_processor->added_tokens() : 0;
    bool apply = true;
    if (add_special_tokens && n_added > 0) {
      // `tokenizers` subtracts in unsigned arithmetic; a negative budget wraps to "no limit".
      if (max_length < n_added) apply = false;
      max_length -= std::min(max_length, n_added);
    }
    if (apply && (max_length == 0 || ids.size() > max_length)) {
      OSCAR_CHECK(!truncation->only_second || max_length == 0,
                  "tokenizer '{}': Truncation error: Second sequence not provided", origin);
      if (truncation->direction == Direction::kRight) {
        ids.resize(max_length);
      } else {
        ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(max_length));
      }
    }
  }
  if (post_processor) post_processor->process(ids, add_special_tokens);
  if (padding) {
    std::size_t target = padding->fixed ? *padding->fixed : ids.size();
    if (padding->multiple > 0 && target % padding->multiple != 0) {
      target += padding->multiple - target % padding->multiple;
    }
    if (ids.size() < target) {
      std::size_t n = target - ids.size();
      if (padding->direction == Direction::kRight) {
        ids.insert(ids.end(), n, padding->pad_id);
      } else {
        ids.insert(ids.begin(), n, padding->pad_id);
      }
    }
  }
}

const std::string* Tokenizer::Impl::id_to_token(std::int32_t id) const {
  auto nf = normalized_form.find(id);
  if (nf != normalized_form.end()) return &nf->second;
  auto a = added_by_id.find(id);
  if (a != added_by_id.end()) return &a->second.content;
  return model->id_to_token(id);
}

// ---------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::string text = read_file(path);
  return from_json(text, path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& origin) {
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::exception& e) {
    fail("tokenizer.json '{}': invalid JSON: {}", origin, e.what());
  }
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  try {
    impl->load(root);
  } catch (const Json::exception& e) {
    // Type errors from nlohmann::json that our checks did not anticipate.
    fail("tokenizer.json '{}': malformed content: {}", origin, e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  // `tokenizers` takes a Rust &str, which is always valid UTF-8; ill-formed input is first
  // converted as Python's bytes.decode("utf-8", "replace") / Rust's from_utf8_lossy would.
  std::string valid;
  if (tok::to_valid_utf8(text, valid)) valid.assign(text);
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode_into(valid, ids);
  impl_->post_process(ids, add_special_tokens);
  return ids;
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids,
                              bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int32_t id : ids) {
    const std::string* t = impl_->id_to_token(id);
    if (t == nullptr) continue;  // unknown ids are dropped, as in `tokenizers`
    if (skip_special_tokens && impl_->special_set.count(*t) != 0) continue;
    tokens.push_back(*t);
  }
  if (!impl_->decoder) {
    std::string out;
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      if (k > 0) out += ' ';
      out += tokens[k];
    }
    return out;
  }
  impl_->decoder->decode_chain(tokens);
  std::string out;
  for (auto& t : tokens) out += t;
  return out;
}

std::int32_t Tokenizer::vocab_size() const {
  std::size_t n = impl_->model->vocab_size();
  for (const auto& [content, id] : impl_->added_map) {
    if (!impl_->model->token_to_id(content)) ++n;
  }
  return static_cast<std::int32_t>(n);
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_map.find(std::string(token));
  if (it != impl_->added_map.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(std::int32_t id) const {
  const std::string* t = impl_->id_to_token(id);
  if (t == nullptr) return std::nullopt;
  return *t;
}

}  // namespace oscar
