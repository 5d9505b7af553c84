// Hugging Face tokenizer.json (BPE models): exact encoding and decoding, no Python, no Torch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

// Reproduces the `tokenizers` library for BPE models: added/special tokens, normalizers
// (Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase, Strip), pre-tokenizers (Sequence,
// ByteLevel with the GPT-2 regex, Split with Unicode-aware regexes such as the Llama-3 and Qwen2
// patterns, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation), the BPE model (merges as
// "a b" strings or [a, b] pairs, byte fallback, unk, continuing-subword prefix, end-of-word
// suffix), post-processors (TemplateProcessing, ByteLevel, Sequence) and decoders. Component types
// it does not know are rejected at load time with an error naming the type.
class Tokenizer {
 public:
  static Tokenizer from_file(const std::string& path);  // a tokenizer.json
  static Tokenizer from_json(std::string_view json_text, const std::string& origin = "<memory>");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // `add_special_tokens` applies the post-processor's template (e.g. a leading BOS), as
  // `tokenizers`' encode(text, add_special_tokens=True) does. Ill-formed UTF-8 in `text` is first
  // replaced by U+FFFD as Rust's String::from_utf8_lossy does. encode and decode are thread-safe.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special_tokens = true) const;

  std::int32_t vocab_size() const;  // model vocabulary plus added tokens
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(std::int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace oscar
