// Post-processors (TemplateProcessing, ByteLevel, Sequence, Bert/Roberta) and decoders.
#include <map>

#include "internal.h"

namespace oscar::tok {

namespace {

// ---------------------------------------------------------------------------------------------
// Post-processors

class TemplateProcessor : public PostProcessor {
 public:
  // `single`: the ids each template piece contributes; nullopt marks the sequence itself.
  explicit TemplateProcessor(std::vector<std::optional<std::vector<std::int32_t>>> single)
      : single_(std::move(single)) {
    for (auto& piece : single_) {
      if (piece) added_ += piece->size();
    }
  }
  std::size_t added_tokens() const override { return added_; }
  void process(std::vector<std::int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;  // the template then contributes only the sequence itself
    std::vector<std::int32_t> out;
    out.reserve(ids.size() + added_);
    for (auto& piece : single_) {
      if (piece) {
        out.insert(out.end(), piece->begin(), piece->end());
      } else {
        out.insert(out.end(), ids.begin(), ids.end());
      }
    }
    ids = std::move(out);
  }

 private:
  std::vector<std::optional<std::vector<std::int32_t>>> single_;
  std::size_t added_ = 0;
};

class NoopProcessor : public PostProcessor {
 public:
  std::size_t added_tokens() const override { return 0; }
  void process(std::vector<std::int32_t>&, bool) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  std::size_t added_tokens() const override {
    std::size_t n = 0;
    for (auto& p : parts_) n += p->added_tokens();
    return n;
  }
  void process(std::vector<std::int32_t>& ids, bool add_special_tokens) const override {
    for (auto& p : parts_) p->process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

struct TemplatePiece {
  bool is_sequence = false;
  std::string id;  // special token name, or "A"/"B"
};

// One template piece: {"SpecialToken": {...}}, {"Sequence": {...}} or the string form ("$A",
// "$B:1", "[CLS]", "<s>:0").
TemplatePiece parse_piece(const Json& j, const std::string& origin, const std::string& where) {
  TemplatePiece p;
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    std::size_t colon = s.find(':');
    std::string name = colon == std::string::npos ? s : s.substr(0, colon);
    if (!name.empty() && name[0] == '$') {
      std::string rest = name.substr(1);
      p.is_sequence = true;
      if (rest.empty() || rest == "A" || rest == "a") {
        p.id = "A";
      } else if (rest == "B" || rest == "b") {
        p.id = "B";
      } else if (rest.find_first_not_of("0123456789") == std::string::npos) {
        p.id = "A";  // "$N": sequence A with type id N
      } else {
        config_fail(origin, fmt::format("{}: cannot parse template piece \"{}\"", where, s));
      }
    } else {
      p.id = name;
    }
    return p;
  }
  if (j.is_object() && j.size() == 1) {
    auto it = j.begin();
    if (it.key() == "SpecialToken" || it.key() == "Sequence") {
      p.is_sequence = it.key() == "Sequence";
      p.id = get_string(it.value(), "id", origin, where + " " + it.key());
      if (p.is_sequence && p.id != "A" && p.id != "B") {
        config_fail(origin, fmt::format("{}: unknown sequence id '{}'", where, p.id));
      }
      return p;
    }
  }
  config_fail(origin, fmt::format("{}: cannot parse template piece {}", where, j.dump()));
}

std::vector<TemplatePiece> parse_template(const Json& j, const std::string& origin,
                                          const std::string& where) {
  std::vector<TemplatePiece> out;
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    std::size_t start = 0;
    while (true) {
      std::size_t sp = s.find(' ', start);
      out.push_back(parse_piece(Json(s.substr(start, sp - start)), origin, where));
      if (sp == std::string::npos) break;
      start = sp + 1;
    }
    return out;
  }
  if (!j.is_array()) config_fail(origin, fmt::format("{} must be a list or a string", where));
  for (const Json& item : j) out.push_back(parse_piece(item, origin, where));
  return out;
}

std::pair<std::string, std::int32_t> parse_token_pair(const Json& j, const char* key,
                                                      const std::string& origin,
                                                      const std::string& where) {
  const Json& v = require_field(j, key, origin, where);
  if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number_integer()) {
    config_fail(origin, fmt::format("{}: '{}' must be [token, id], got {}", where, key, v.dump()));
  }
  return {v[0].get<std::string>(), static_cast<std::int32_t>(v[1].get<std::int64_t>())};
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& origin) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, origin, "post_processor");
  std::string where = fmt::format("post_processor '{}'", type);
  if (type == "TemplateProcessing") {
    // special_tokens: name -> {"id": name, "ids": [...], "tokens": [...]}.
    std::map<std::string, std::vector<std::int32_t>> specials;
    const Json& st = require_field(j, "special_tokens", origin, where);
    if (!st.is_object()) config_fail(origin, where + ": 'special_tokens' must be an object");
    for (auto it = st.begin(); it != st.end(); ++it) {
      const Json& ids = require_field(it.value(), "ids", origin, where + " special token");
      if (!ids.is_array()) config_fail(origin, where + ": special token 'ids' must be a list");
      std::vector<std::int32_t> v;
      for (const Json& id : ids) {
        if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
            id.get<std::int64_t>() > INT32_MAX) {
          config_fail(origin, fmt::format("{}: special token '{}' has invalid id {}", where,
                                          it.key(), id.dump()));
        }
        v.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
      }
      specials[it.key()] = std::move(v);
    }
    auto check = [&](const std::vector<TemplatePiece>& t, const char* name, bool single) {
      for (auto& p : t) {
        if (!p.is_sequence && specials.count(p.id) == 0) {
          config_fail(origin, fmt::format("{}: {} template uses '{}', which is not in "
                                          "special_tokens",
                                          where, name, p.id));
        }
        if (single && p.is_sequence && p.id == "B") {
          config_fail(origin, fmt::format("{}: single template refers to sequence B", where));
        }
      }
    };
    auto single =
        parse_template(require_field(j, "single", origin, where), origin, where + " 'single'");
    check(single, "single", true);
    // The pair template is validated but unused: we only encode single sequences.
    auto pair_it = j.find("pair");
    if (pair_it != j.end() && !pair_it->is_null()) {
      check(parse_template(*pair_it, origin, where + " 'pair'"), "pair", false);
    }
    std::vector<std::optional<std::vector<std::int32_t>>> pieces;
    for (auto& p : single) {
      if (p.is_sequence) {
        pieces.emplace_back(std::nullopt);
      } else {
        pieces.emplace_back(specials[p.id]);
      }
    }
    return std::make_unique<TemplateProcessor>(std::move(pieces));
  }
  if (type == "ByteLevel") return std::make_unique<NoopProcessor>();  // offsets only
  if (type == "Sequence") {
    const Json& list = require_field(j, "processors", origin, where);
    if (!list.is_array()) config_fail(origin, where + ": 'processors' must be a list");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const Json& item : list) {
      if (item.is_null()) config_fail(origin, where + " contains null");
      parts.push_back(make_post_processor(item, origin));
    }
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    // Both wrap a single sequence as [cls] A [sep].
    auto cls = parse_token_pair(j, "cls", origin, where);
    auto sep = parse_token_pair(j, "sep", origin, where);
    std::vector<std::optional<std::vector<std::int32_t>>> pieces;
    pieces.emplace_back(std::vector<std::int32_t>{cls.second});
    pieces.emplace_back(std::nullopt);
    pieces.emplace_back(std::vector<std::int32_t>{sep.second});
    return std::make_unique<TemplateProcessor>(std::move(pieces));
  }
  config_fail(origin, fmt::format("unsupported post_processor type '{}'", type));
}

// ---------------------------------------------------------------------------------------------
// Decoders

namespace {

// Rust's String::from_utf8_lossy.
std::string lossy(std::string_view bytes) {
  std::string out;
  if (to_valid_utf8(bytes, out)) return std::string(bytes);
  return out;
}

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& d : parts_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool ok = true;
      std::size_t i = 0;
      while (i < t.size()) {
        int b = unicode_to_byte(next_char(t, i));
        if (b < 0) {
          ok = false;
          break;
        }
        mapped.push_back(static_cast<char>(b));
      }
      // A token with characters outside the byte alphabet is passed through unchanged.
      bytes += ok ? mapped : t;
    }
    tokens.assign(1, lossy(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepend)
      : replacement_(replacement), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      const std::string& t = tokens[k];
      std::string out;
      out.reserve(t.size());
      std::size_t i = 0;
      while (i < t.size()) {
        std::size_t start = i;
        char32_t c = next_char(t, i);
        if (c == replacement_) {
          // Every replacement in the first token is dropped when a prefix was prepended.
          if (!(k == 0 && prepend_)) out.push_back(' ');
        } else {
          out.append(t, start, i - start);
        }
      }
      tokens[k] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool prepend_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Pattern> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      for (const Segment& s : pattern_->find_matches(t)) {
        if (s.is_match) {
          out += content_;
        } else {
          out.append(t, s.begin, s.end - s.begin);
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  std::string content_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (std::size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int byte = parse_byte_token(t);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  // "<0xNN>" (hex digits of either case, as Rust's from_str_radix accepts) -> byte, else -1.
  static int parse_byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int v = 0;
    int first = t[3] == '+' ? 4 : 3;  // from_str_radix accepts a leading '+'
    for (int k = first; k < 5; ++k) {
      char c = t[k];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return -1;
      }
      v = v * 16 + d;
    }
    return v;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (auto& t : tokens) joined += t;
    tokens.assign(1, std::move(joined));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::size_t> offsets;  // byte offset of each character, plus the end
      std::vector<char32_t> chars;
      std::size_t i = 0;
      while (i < t.size()) {
        offsets.push_back(i);
        chars.push_back(next_char(t, i));
      }
      offsets.push_back(t.size());
      std::size_t start_cut = 0;
      for (std::size_t k = 0; k < std::min(start_, chars.size()); ++k) {
        if (chars[k] != content_) break;
        start_cut = k + 1;
      }
      std::size_t stop_cut = chars.size();
      for (std::size_t k = 0; k < std::min(stop_, chars.size()); ++k) {
        std::size_t index = chars.size() - k - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      // `tokenizers` would panic when the cuts cross; an empty token is the sensible reading.
      if (stop_cut <= start_cut) {
        t.clear();
      } else {
        t = t.substr(offsets[start_cut], offsets[stop_cut] - offsets[start_cut]);
      }
    }
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      const std::string replacement = k + 1 == tokens.size() ? "" : " ";
      std::string& t = tokens[k];
      std::string out;
      if (suffix_.empty()) {
        // Rust's str::replace with an empty pattern inserts at every character boundary.
        std::size_t i = 0;
        out += replacement;
        while (i < t.size()) {
          std::size_t start = i;
          next_char(t, i);
          out.append(t, start, i - start);
          out += replacement;
        }
        t = std::move(out);
        continue;
      }
      std::size_t pos = 0, hit;
      while ((hit = t.find(suffix_, pos)) != std::string::npos) {
        out.append(t, pos, hit - pos);
        out += replacement;
        pos = hit + suffix_.size();
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& origin) {
  if (j.is_null()) return nullptr;
  std::string type = component_type(j, origin, "decoder");
  std::string where = fmt::format("decoder '{}'", type);
  if (type == "Sequence") {
    const Json& list = require_field(j, "decoders", origin, where);
    if (!list.is_array()) config_fail(origin, where + ": 'decoders' must be a list");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const Json& item : list) {
      if (item.is_null()) config_fail(origin, where + " contains null");
      parts.push_back(make_decoder(item, origin));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    char32_t replacement = get_char(j, "replacement", origin, where);
    std::string scheme = get_string_or(j, "prepend_scheme", "always", origin, where);
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      config_fail(origin, fmt::format("{}: unknown prepend_scheme '{}'", where, scheme));
    }
    auto aps = j.find("add_prefix_space");
    if (aps != j.end() && aps->is_boolean() && !aps->get<bool>()) scheme = "never";
    return std::make_unique<MetaspaceDecoder>(replacement, scheme != "never");
  }
  if (type == "Replace") {
    std::string what = fmt::format("tokenizer.json '{}': decoder 'Replace'", origin);
    auto pattern = make_json_pattern(require_field(j, "pattern", origin, where), what);
    return std::make_unique<ReplaceDecoder>(std::move(pattern),
                                            get_string(j, "content", origin, where));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    std::int64_t start = get_int_or(j, "start", 0, origin, where);
    std::int64_t stop = get_int_or(j, "stop", 0, origin, where);
    if (start < 0 || stop < 0) config_fail(origin, where + ": start and stop must be >= 0");
    return std::make_unique<StripDecoder>(get_char(j, "content", origin, where),
                                          static_cast<std::size_t>(start),
                                          static_cast<std::size_t>(stop));
  }
  if (type == "BPEDecoder") {
    return std::make_unique<BpeSuffixDecoder>(get_string_or(j, "suffix", "</w>", origin, where));
  }
  config_fail(origin, fmt::format("unsupported decoder type '{}'", type));
}

}  // namespace oscar::tok
