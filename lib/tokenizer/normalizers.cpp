// Normalizers: Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents.
#include "internal.h"

namespace oscar::tok {

namespace {

// Applies a character-by-character transform; the output of the characters that were aligned with
// original offset 0 stays aligned with it.
template <typename F>
void map_text(Piece& p, F&& f) {
  if (p.origin_len > 0) p.origin_len = f(std::string_view(p.text).substr(0, p.origin_len)).size();
  p.text = f(p.text);
}

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(Piece& p) const override {
    for (auto& n : parts_) n->normalize(p);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string s) : s_(std::move(s)) {}
  void normalize(Piece& p) const override { p.prepend(s_); }

 private:
  std::string s_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Pattern> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(Piece& p) const override {
    replace_matches(p, pattern_->find_matches(p.text), content_);
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  std::string content_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(Piece& p) const override {
    std::string out = normalize_unicode(p.text, form_);
    if (out == p.text) return;
    if (p.origin_len > 0) {
      // Composition can merge the first characters; approximate the aligned prefix by the
      // normalized form of the original prefix when it survives as a prefix.
      std::string head = normalize_unicode(std::string_view(p.text).substr(0, p.origin_len), form_);
      if (out.compare(0, head.size(), head) == 0) {
        p.origin_len = head.size();
      } else {
        std::size_t i = 0;
        next_char(out, i);
        p.origin_len = i;
      }
    }
    p.text = std::move(out);
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override {
    map_text(p, [](std::string_view s) { return lowercase(s); });
  }
};

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override {
    map_text(p, [](std::string_view s) {
      std::string out;
      out.reserve(s.size());
      std::size_t i = 0;
      while (i < s.size()) {
        std::size_t start = i;
        char32_t c = next_char(s, i);
        if (!is_combining_mark(c)) out.append(s.substr(start, i - start));
      }
      return out;
    });
  }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(Piece& p) const override {
    std::string_view s = p.text;
    std::size_t begin = 0, end = s.size();
    if (left_) {
      std::size_t i = 0;
      while (i < s.size()) {
        std::size_t j = i;
        if (!is_whitespace(next_char(s, j))) break;
        i = j;
      }
      begin = i;
    }
    if (right_ && begin < end) {
      // Walk backwards over whole characters.
      while (end > begin) {
        std::size_t k = end - 1;
        while (k > begin && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        std::size_t j = k;
        if (!is_whitespace(next_char(s, j))) break;
        end = k;
      }
    }
    if (begin == 0 && end == s.size()) return;
    // Characters kept keep their alignment; the ones removed at the front shift the prefix.
    std::size_t origin = p.origin_len > begin ? std::min(p.origin_len, end) - begin : 0;
    p.text = p.text.substr(begin, end - begin);
    p.origin_len = origin;
  }

 private:
  bool left_, right_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& origin) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, origin, "normalizer");
  std::string where = fmt::format("normalizer '{}'", type);
  if (type == "Sequence") {
    const Json& list = require_field(j, "normalizers", origin, where);
    if (!list.is_array())
      config_fail(origin, "normalizer 'Sequence': 'normalizers' must be a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const Json& item : list) {
      if (item.is_null()) config_fail(origin, "normalizer 'Sequence' contains null");
      parts.push_back(make_normalizer(item, origin));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(get_string(j, "prepend", origin, where));
  }
  if (type == "Replace") {
    std::string what = fmt::format("tokenizer.json '{}': normalizer 'Replace'", origin);
    auto pattern = make_json_pattern(require_field(j, "pattern", origin, where), what);
    return std::make_unique<ReplaceNormalizer>(std::move(pattern),
                                               get_string(j, "content", origin, where));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(get_bool_or(j, "strip_left", true, origin, where),
                                             get_bool_or(j, "strip_right", true, origin, where));
  }
  config_fail(origin, fmt::format("unsupported normalizer type '{}'", type));
}

}  // namespace oscar::tok
