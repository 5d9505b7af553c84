// Private building blocks of oscar_tokenizer: text pieces, patterns and pipeline components.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "oscar/error.h"

namespace oscar::tok {

using Json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Unicode helpers (unicode.cpp). Text handed to these is valid UTF-8 unless stated otherwise.

// Decodes the code point at `s[i]` and advances `i`; `s` must be valid UTF-8.
char32_t next_char(std::string_view s, std::size_t& i);
void append_utf8(std::string& out, char32_t c);
std::size_t utf8_len(char32_t c);

// Replaces ill-formed UTF-8 with U+FFFD, one per maximal ill-formed subpart, exactly as Rust's
// String::from_utf8_lossy does. Returns true when `s` was already valid (and leaves `out` empty).
bool to_valid_utf8(std::string_view s, std::string& out);
bool is_valid_utf8(std::string_view s);

// Character classes as Rust defines them (char::is_whitespace, char::is_numeric, regex \w, ...).
bool is_whitespace(char32_t c);   // Unicode White_Space
bool is_numeric(char32_t c);      // general categories Nd, Nl, No
bool is_word_char(char32_t c);    // Rust regex \w (Alphabetic, M, Nd, Pc, Join_Control)
bool is_punctuation(char32_t c);  // ASCII punctuation or general category P*
bool is_combining_mark(char32_t c);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize_unicode(std::string_view s, NormalForm form);
// Rust's per-character to_lowercase (full mappings, no context-dependent rules).
std::string lowercase(std::string_view s);

// ---------------------------------------------------------------------------------------------
// A piece of text flowing through normalization and pre-tokenization. `tokenizers` keeps a full
// alignment map to the original text; the only behaviour that depends on it is Metaspace's
// prepend_scheme "first" (prepend only to the piece that starts at original offset 0), so we keep
// just enough for that: whether the piece starts at original offset 0 and how many of its leading
// bytes are aligned with original offset 0.
struct Piece {
  std::string text;
  bool at_origin = false;      // this piece's original start offset is 0
  std::size_t origin_len = 0;  // leading bytes aligned to original offset 0 (0 unless at_origin)
  std::int32_t token_id = -1;  // >= 0: an added token, already tokenized

  static Piece whole(std::string text, bool at_origin);
  Piece slice(std::size_t begin, std::size_t end) const;
  void prepend(std::string_view s);
};

// One segment of a string as `tokenizers`' Pattern::find_matches reports it: the segments cover
// the whole string in order, each flagged as a match of the pattern or not.
struct Segment {
  std::size_t begin;
  std::size_t end;
  bool is_match;
};

// A compiled Oniguruma-syntax regular expression (the engine `tokenizers` uses), run with PCRE2.
class Regex {
 public:
  // `what` names the pattern's owner for error messages.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All matches, iterated as the `onig` crate's find_iter does (an empty match right after the
  // previous match is skipped).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  void* code_ = nullptr;  // pcre2_code*
  std::string what_;
};

// Escapes `s` so that it matches literally in a regex (regex::escape in Rust).
std::string regex_escape(std::string_view s);
// Translates Oniguruma (Ruby syntax) regex features to PCRE2 equivalents; exposed for tests.
std::string onig_to_pcre2(const std::string& pattern);

// A pattern as `tokenizers` uses them for Split, Replace and the character-class splitters.
class Pattern {
 public:
  virtual ~Pattern() = default;
  virtual std::vector<Segment> find_matches(std::string_view text) const = 0;
};

// {"String": s} or {"Regex": r} as found in tokenizer.json.
std::unique_ptr<Pattern> make_json_pattern(const Json& j, const std::string& what);
std::unique_ptr<Pattern> make_regex_pattern(const std::string& regex, const std::string& what);

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits `piece` by `segments` (from a Pattern, possibly inverted) with the given behaviour,
// appending the non-empty results to `out`.
void split_piece(const Piece& piece, std::vector<Segment> segments, SplitBehavior behavior,
                 std::vector<Piece>& out);

// Replaces every matching segment by `content`, tracking alignment as `tokenizers` does.
void replace_matches(Piece& piece, const std::vector<Segment>& segments, std::string_view content);

// ---------------------------------------------------------------------------------------------
// Pipeline components. Each factory parses its JSON object and throws oscar::Error naming the
// file (`origin`) and what is wrong.

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(Piece& piece) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` (none of them added tokens) by their pre-tokenized splits.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::size_t added_tokens() const = 0;  // for a single sequence
  virtual void process(std::vector<std::int32_t>& ids, bool add_special_tokens) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& origin);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& origin);
std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& origin);
std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& origin);

// The BPE model (bpe.cpp).
class BpeModel {
 public:
  BpeModel(const Json& j, const std::string& origin);
  ~BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Tokenizes one pre-token, appending ids. Thread-safe (the word cache is locked).
  void tokenize(std::string_view word, std::vector<std::int32_t>& ids) const;

  std::size_t vocab_size() const;
  const std::string* id_to_token(std::int32_t id) const;
  std::optional<std::int32_t> token_to_id(std::string_view token) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The GPT-2 byte-to-unicode table used by ByteLevel pre-tokenizer and decoder.
const std::string& byte_to_unicode(std::uint8_t b);  // UTF-8 of the mapped character
int unicode_to_byte(char32_t c);                     // -1 when `c` is not in the table

// ---------------------------------------------------------------------------------------------
// JSON access helpers: typed fields with messages naming the file and the component.

[[noreturn]] void config_fail(const std::string& origin, const std::string& message);

const Json& require_field(const Json& obj, const char* key, const std::string& origin,
                          const std::string& where);
std::string get_string(const Json& obj, const char* key, const std::string& origin,
                       const std::string& where);
std::string get_string_or(const Json& obj, const char* key, const std::string& fallback,
                          const std::string& origin, const std::string& where);
bool get_bool_or(const Json& obj, const char* key, bool fallback, const std::string& origin,
                 const std::string& where);
std::int64_t get_int_or(const Json& obj, const char* key, std::int64_t fallback,
                        const std::string& origin, const std::string& where);
// A single Unicode character stored as a JSON string (Rust `char` fields).
char32_t get_char(const Json& obj, const char* key, const std::string& origin,
                  const std::string& where);
// The "type" tag of a component object.
std::string component_type(const Json& j, const std::string& origin, const std::string& what);

}  // namespace oscar::tok
