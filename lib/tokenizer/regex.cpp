// Oniguruma-compatible regexes on PCRE2, patterns, and the split/replace primitives of
// `tokenizers`.
#include <pcre2.h>

#include <algorithm>
#include <cstring>

#include "internal.h"

namespace oscar::tok {

// ---------------------------------------------------------------------------------------------
// Piece

Piece Piece::whole(std::string text, bool at_origin) {
  Piece p;
  p.at_origin = at_origin;
  if (at_origin && !text.empty()) {
    // A fresh string aligns each character with itself: only the first starts at offset 0.
    std::size_t i = 0;
    next_char(text, i);
    p.origin_len = i;
  }
  p.text = std::move(text);
  return p;
}

Piece Piece::slice(std::size_t begin, std::size_t end) const {
  Piece p;
  p.text = text.substr(begin, end - begin);
  p.at_origin = at_origin && begin < origin_len;
  p.origin_len = p.at_origin ? std::min(origin_len, end) - begin : 0;
  return p;
}

void Piece::prepend(std::string_view s) {
  if (text.empty()) return;  // `tokenizers` prepends nothing to an empty string
  // Prepended characters share the alignment of the first character.
  if (origin_len > 0) origin_len += s.size();
  text.insert(0, s);
}

// ---------------------------------------------------------------------------------------------
// Regex translation: `tokenizers` (Python wheels) runs Oniguruma with Ruby syntax; PCRE2 differs
// in a few class definitions, which we spell out explicitly.

namespace {

// Oniguruma's Unicode \s is White_Space; PCRE2's also matches U+180E.
constexpr const char* kSpaceSet =
    "\\t\\n\\x0B\\f\\r\\x20\\x85\\xA0\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";
// Oniguruma's Unicode \w is Alphabetic + Mark + Nd + Pc; PCRE2's is L + N + '_'.
constexpr const char* kWordSet =
    "\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}\\x{1F150}-"
    "\\x{1F169}\\x{1F170}-\\x{1F189}";
// Ruby's \h is a hexadecimal digit (PCRE2: horizontal space).
constexpr const char* kHexSet = "0-9a-fA-F";

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

std::string onig_to_pcre2(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  std::size_t class_start = 0;  // index just after '[' or '[^'
  const std::size_t n = pattern.size();
  std::size_t i = 0;
  while (i < n) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < n) {
      char e = pattern[i + 1];
      std::string set;
      bool negated = false;
      switch (e) {
        case 's':
        case 'S':
          set = kSpaceSet, negated = e == 'S';
          break;
        case 'w':
        case 'W':
          set = kWordSet, negated = e == 'W';
          break;
        case 'h':
        case 'H':
          set = kHexSet, negated = e == 'H';
          break;
        default:
          break;
      }
      if (!set.empty()) {
        if (!in_class) {
          out += negated ? "[^" : "[";
          out += set;
          out += "]";
        } else if (!negated) {
          out += set;
        } else if (e == 'H') {
          out += "\\x00-/:-@G-`g-\\x{10FFFF}";
        } else {
          out += '\\';  // a negated set inside a class: PCRE2's own definition is the best we have
          out += e;
        }
        i += 2;
        continue;
      }
      if (e == 'u' && i + 6 <= n && is_hex(pattern[i + 2]) && is_hex(pattern[i + 3]) &&
          is_hex(pattern[i + 4]) && is_hex(pattern[i + 5])) {
        out += "\\x{" + pattern.substr(i + 2, 4) + "}";
        i += 6;
        continue;
      }
      // Any other escape has the same meaning in both; copy it with its whole (UTF-8) character.
      out += c;
      ++i;
      std::size_t j = i;
      next_char(pattern, j);
      out.append(pattern, i, j - i);
      i = j;
      continue;
    }
    if (in_class) {
      if (c == ']' && i != class_start) in_class = false;
      out += c;
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < n && pattern[i] == '^') {
        out += '^';
        ++i;
      }
      class_start = i;
      continue;
    }
    if (c == '(' && i + 2 < n && pattern[i + 1] == '?') {
      // Inline options: Ruby's (?m) is PCRE2's (?s) (dot matches newline).
      std::size_t j = i + 2;
      while (j < n &&
             (pattern[j] == 'i' || pattern[j] == 'm' || pattern[j] == 'x' || pattern[j] == '-')) {
        ++j;
      }
      if (j > i + 2 && j < n && (pattern[j] == ':' || pattern[j] == ')')) {
        out += "(?";
        for (std::size_t k = i + 2; k < j; ++k) out += pattern[k] == 'm' ? 's' : pattern[k];
        i = j;
        continue;
      }
    }
    out += c;
    ++i;
  }
  return out;
}

std::string regex_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) {
    if (std::strchr("\\.+*?()|[]{}^$#&-~", c) != nullptr && c != '\0') out += '\\';
    out += c;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Regex

Regex::Regex(const std::string& pattern, const std::string& what) : what_(what) {
  std::string translated = onig_to_pcre2(pattern);
  pcre2_compile_context* cctx = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  // Ruby syntax: ^ and $ always match at line boundaries.
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &err_off, cctx);
  pcre2_compile_context_free(cctx);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    fail("{}: invalid regex '{}': {} (at offset {} of the translated pattern)", what, pattern,
         reinterpret_cast<const char*>(buf), static_cast<std::size_t>(err_off));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when unavailable
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  OSCAR_CHECK(is_valid_utf8(text), "{}: regex applied to invalid UTF-8", what_);
  auto* code = static_cast<pcre2_code*>(code_);
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  pcre2_match_context* mctx = nullptr;
  auto cleanup = [&] {
    pcre2_match_data_free(md);
    if (mctx != nullptr) pcre2_match_context_free(mctx);
  };
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t last_end = 0;
  bool have_last_match = false;
  std::size_t last_match_end = 0;
  while (last_end <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), last_end, PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Deep backtracking: redo this search with the interpreter, which uses the heap.
      if (mctx == nullptr) {
        mctx = pcre2_match_context_create(nullptr);
        pcre2_set_heap_limit(mctx, 1u << 20);  // KiB: 1 GiB at most
      }
      rc = pcre2_match(code, subject, text.size(), last_end, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof(buf));
      cleanup();
      fail("{}: regex matching failed: {}", what_, reinterpret_cast<const char*>(buf));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    std::size_t s = ov[0], e = ov[1];
    if (e < s) e = s;  // \K tricks can report end < start
    if (s == e && have_last_match && last_match_end == e) {
      // An empty match right after the previous match: step one character forward.
      if (last_end >= text.size()) break;
      std::size_t j = last_end;
      next_char(text, j);
      last_end = j;
      continue;
    }
    last_end = e;
    have_last_match = true;
    last_match_end = e;
    matches.emplace_back(s, e);
    if (s == e && last_end >= text.size()) break;
  }
  cleanup();
  return matches;
}

// ---------------------------------------------------------------------------------------------
// Patterns

namespace {

std::vector<Segment> segments_from_matches(
    std::size_t len, const std::vector<std::pair<std::size_t, std::size_t>>& matches) {
  std::vector<Segment> out;
  if (len == 0) {
    out.push_back({0, 0, false});
    return out;
  }
  std::size_t prev = 0;
  for (auto [s, e] : matches) {
    if (prev != s) out.push_back({prev, s, false});
    out.push_back({s, e, true});
    prev = e;
  }
  if (prev != len) out.push_back({prev, len, false});
  return out;
}

class RegexPattern : public Pattern {
 public:
  RegexPattern(const std::string& re, const std::string& what) : regex_(re, what) {}
  std::vector<Segment> find_matches(std::string_view text) const override {
    if (text.empty()) return {{0, 0, false}};
    return segments_from_matches(text.size(), regex_.find_all(text));
  }

 private:
  Regex regex_;
};

// A non-empty literal: same matches as its escaped regex, found with a plain substring search.
class LiteralPattern : public Pattern {
 public:
  explicit LiteralPattern(std::string s) : s_(std::move(s)) {}
  std::vector<Segment> find_matches(std::string_view text) const override {
    if (text.empty()) return {{0, 0, false}};
    std::vector<std::pair<std::size_t, std::size_t>> m;
    std::size_t pos = 0;
    while ((pos = text.find(s_, pos)) != std::string_view::npos) {
      m.emplace_back(pos, pos + s_.size());
      pos += s_.size();
    }
    return segments_from_matches(text.size(), m);
  }

 private:
  std::string s_;
};

}  // namespace

std::unique_ptr<Pattern> make_regex_pattern(const std::string& regex, const std::string& what) {
  return std::make_unique<RegexPattern>(regex, what);
}

std::unique_ptr<Pattern> make_json_pattern(const Json& j, const std::string& what) {
  OSCAR_CHECK(j.is_object() && j.size() == 1,
              "{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", what,
              j.dump());
  auto it = j.begin();
  OSCAR_CHECK(it.value().is_string(), "{}: pattern value must be a string, got {}", what,
              it.value().dump());
  std::string value = it.value().get<std::string>();
  if (it.key() == "String") {
    if (!value.empty()) return std::make_unique<LiteralPattern>(value);
    return std::make_unique<RegexPattern>(std::string(), what);  // matches everywhere
  }
  if (it.key() == "Regex") return std::make_unique<RegexPattern>(value, what);
  fail("{}: unknown pattern kind '{}' (expected String or Regex)", what, it.key());
}

// ---------------------------------------------------------------------------------------------
// Split and replace, as NormalizedString::split / ::replace do.

void split_piece(const Piece& piece, std::vector<Segment> segs, SplitBehavior behavior,
                 std::vector<Piece>& out) {
  // Each entry: (begin, end, remove).
  std::vector<Segment> splits;
  splits.reserve(segs.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto& s : segs) splits.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      splits = std::move(segs);
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (auto& s : segs) {
        if (s.is_match == previous_match && !splits.empty()) {
          splits.back().end = s.end;
        } else {
          splits.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (auto& s : segs) {
        if (s.is_match && !previous_match && !splits.empty()) {
          splits.back().end = s.end;
        } else {
          splits.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !splits.empty()) {
          splits.back().begin = it->begin;
        } else {
          splits.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  for (auto& s : splits) {
    // `tokenizers` drops removed delimiters here and empty pieces when collecting the splits.
    if (s.is_match || s.end <= s.begin) continue;
    out.push_back(piece.slice(s.begin, s.end));
  }
}

void replace_matches(Piece& piece, const std::vector<Segment>& segments, std::string_view content) {
  bool any = false;
  for (auto& s : segments) any = any || s.is_match;
  if (!any) return;
  const std::string& text = piece.text;
  std::string out;
  out.reserve(text.size() + content.size() * 4);
  // Track the prefix aligned to original offset 0: inserted text takes the alignment of the last
  // byte it replaces (of the byte before it for an empty match; offset 0 at the very start).
  std::size_t new_origin = 0;
  bool prefix_open = true;
  for (auto& s : segments) {
    if (!s.is_match) {
      if (prefix_open) {
        std::size_t keep =
            piece.origin_len > s.begin ? std::min(piece.origin_len, s.end) - s.begin : 0;
        new_origin += keep;
        if (keep < s.end - s.begin) prefix_open = false;
      }
      out.append(text, s.begin, s.end - s.begin);
    } else {
      if (prefix_open) {
        bool origin = piece.at_origin && (s.end == 0 || s.end - 1 < piece.origin_len);
        if (origin) {
          new_origin += content.size();
        } else if (!content.empty()) {
          prefix_open = false;
        }
      }
      out.append(content);
    }
  }
  piece.text = std::move(out);
  piece.origin_len = piece.at_origin ? new_origin : 0;
}

}  // namespace oscar::tok
