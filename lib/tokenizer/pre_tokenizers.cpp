// Pre-tokenizers: Sequence, ByteLevel, Split, Metaspace, Digits, Whitespace(Split), Punctuation.
#include "internal.h"

namespace oscar::tok {

namespace {

// Segments of `text` where each character satisfying `pred` is a match of its own, as the
// `Fn(char) -> bool` pattern of `tokenizers` reports them.
template <typename Pred>
std::vector<Segment> char_matches(std::string_view text, Pred&& pred) {
  std::vector<Segment> out;
  if (text.empty()) {
    out.push_back({0, 0, false});
    return out;
  }
  std::size_t last = 0, i = 0;
  while (i < text.size()) {
    std::size_t start = i;
    char32_t c = next_char(text, i);
    if (pred(c)) {
      if (last < start) out.push_back({last, start, false});
      out.push_back({start, i, true});
      last = i;
    }
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
  return out;
}

SplitBehavior parse_behavior(const Json& j, const char* key, SplitBehavior fallback,
                             const std::string& origin, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  std::string s = it->is_string() ? it->get<std::string>() : it->dump();
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  config_fail(origin, fmt::format("{}: unknown split behavior '{}'", where, s));
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

const Regex& gpt2_regex() {
  static const Regex re(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
      "ByteLevel pre-tokenizer");
  return re;
}

std::string bytes_to_unicode(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += byte_to_unicode(static_cast<std::uint8_t>(c));
  return out;
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (Piece& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.prepend(" ");
      if (use_regex_) {
        std::vector<Segment> segs;
        auto m = gpt2_regex().find_all(p.text);
        std::size_t prev = 0;
        for (auto [s, e] : m) {
          if (prev != s) segs.push_back({prev, s, false});
          segs.push_back({s, e, true});
          prev = e;
        }
        if (prev != p.text.size() || p.text.empty()) segs.push_back({prev, p.text.size(), false});
        split_piece(p, std::move(segs), SplitBehavior::kIsolated, out);
      } else if (!p.text.empty()) {
        out.push_back(std::move(p));
      }
    }
    for (Piece& p : out) {
      if (p.origin_len > 0) p.origin_len = bytes_to_unicode(p.text.substr(0, p.origin_len)).size();
      p.text = bytes_to_unicode(p.text);
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Pattern> pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    for (const Piece& p : pieces) {
      auto segs = pattern_->find_matches(p.text);
      if (invert_) {
        for (auto& s : segs) s.is_match = !s.is_match;
      }
      split_piece(p, std::move(segs), behavior_, out);
    }
    pieces = std::move(out);
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(rep_, replacement);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    for (Piece& p : pieces) {
      replace_matches(p, char_matches(p.text, [](char32_t c) { return c == U' '; }), rep_);
      bool starts = p.text.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && p.at_origin))) {
        p.prepend(rep_);
      }
      if (split_) {
        char32_t r = replacement_;
        split_piece(p, char_matches(p.text, [r](char32_t c) { return c == r; }),
                    SplitBehavior::kMergedWithNext, out);
      } else if (!p.text.empty()) {
        out.push_back(std::move(p));
      }
    }
    pieces = std::move(out);
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

// Splits on characters matching a predicate with a fixed behaviour (Digits, Punctuation, ...).
template <typename Pred>
class CharSplitPreTokenizer : public PreTokenizer {
 public:
  CharSplitPreTokenizer(Pred pred, SplitBehavior behavior) : pred_(pred), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    for (const Piece& p : pieces) split_piece(p, char_matches(p.text, pred_), behavior_, out);
    pieces = std::move(out);
  }

 private:
  Pred pred_;
  SplitBehavior behavior_;
};

template <typename Pred>
std::unique_ptr<PreTokenizer> make_char_split(Pred pred, SplitBehavior behavior) {
  return std::make_unique<CharSplitPreTokenizer<Pred>>(pred, behavior);
}

// `\w+|[^\w\s]+` (Rust regex), inverted and removed: keeps runs of word characters and runs of
// other non-space characters, drops whitespace.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    for (const Piece& p : pieces) {
      const std::string& t = p.text;
      std::size_t i = 0;
      int run = -1;  // 0: word, 1: other, 2: space
      std::size_t run_start = 0;
      auto flush = [&](std::size_t end) {
        if (run == 0 || run == 1) out.push_back(p.slice(run_start, end));
      };
      while (i < t.size()) {
        std::size_t start = i;
        char32_t c = next_char(t, i);
        int kind = is_word_char(c) ? 0 : (is_whitespace(c) ? 2 : 1);
        if (kind != run) {
          if (run >= 0) flush(start);
          run = kind;
          run_start = start;
        }
      }
      if (run >= 0) flush(t.size());
    }
    pieces = std::move(out);
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& origin) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, origin, "pre_tokenizer");
  std::string where = fmt::format("pre_tokenizer '{}'", type);
  if (type == "Sequence") {
    const Json& list = require_field(j, "pretokenizers", origin, where);
    if (!list.is_array()) {
      config_fail(origin, "pre_tokenizer 'Sequence': 'pretokenizers' must be a list");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const Json& item : list) {
      if (item.is_null()) config_fail(origin, "pre_tokenizer 'Sequence' contains null");
      parts.push_back(make_pre_tokenizer(item, origin));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(
        get_bool_or(j, "add_prefix_space", true, origin, where),
        get_bool_or(j, "use_regex", true, origin, where));
  }
  if (type == "Split") {
    std::string what = fmt::format("tokenizer.json '{}': pre_tokenizer 'Split'", origin);
    auto pattern = make_json_pattern(require_field(j, "pattern", origin, where), what);
    return std::make_unique<SplitPreTokenizer>(
        std::move(pattern), parse_behavior(j, "behavior", SplitBehavior::kIsolated, origin, where),
        get_bool_or(j, "invert", false, origin, where));
  }
  if (type == "Metaspace") {
    char32_t replacement = get_char(j, "replacement", origin, where);
    std::string scheme_name = get_string_or(j, "prepend_scheme", "always", origin, where);
    PrependScheme scheme;
    if (scheme_name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (scheme_name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (scheme_name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      config_fail(origin, fmt::format("{}: unknown prepend_scheme '{}'", where, scheme_name));
    }
    // Older files carry add_prefix_space instead; false means "never".
    auto aps = j.find("add_prefix_space");
    if (aps != j.end() && aps->is_boolean() && !aps->get<bool>()) {
      if (scheme != PrependScheme::kNever && j.contains("prepend_scheme")) {
        config_fail(origin,
                    fmt::format("{}: add_prefix_space does not match prepend_scheme", where));
      }
      scheme = PrependScheme::kNever;
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, scheme,
                                                   get_bool_or(j, "split", true, origin, where));
  }
  if (type == "Digits") {
    bool individual = get_bool_or(j, "individual_digits", false, origin, where);
    return make_char_split([](char32_t c) { return is_numeric(c); },
                           individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") {
    return make_char_split([](char32_t c) { return is_whitespace(c); }, SplitBehavior::kRemoved);
  }
  if (type == "Punctuation") {
    return make_char_split([](char32_t c) { return is_punctuation(c); },
                           parse_behavior(j, "behavior", SplitBehavior::kIsolated, origin, where));
  }
  if (type == "CharDelimiterSplit" || type == "Delimiter") {
    char32_t d = get_char(j, "delimiter", origin, where);
    return make_char_split([d](char32_t c) { return c == d; }, SplitBehavior::kRemoved);
  }
  config_fail(origin, fmt::format("unsupported pre_tokenizer type '{}'", type));
}

}  // namespace oscar::tok
