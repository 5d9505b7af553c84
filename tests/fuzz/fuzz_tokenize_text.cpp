// libFuzzer target: encoding arbitrary bytes with fixed tokenizers (byte-level BPE with a Unicode
// regex split as in Llama 3 / Qwen2, and a SentencePiece-style BPE with byte fallback), then
// decoding the ids back.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "oscar/error.h"
#include "oscar/tokenizer.h"

namespace {

// Byte-level BPE: NFC, the Llama-3 split pattern, GPT-2 bytes, a few merges, special tokens and a
// BOS template.
constexpr std::string_view kByteLevel = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<|begin|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true},
    {"id": 1, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|begin|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<|begin|>": {"id": "<|begin|>", "ids": [0], "tokens": ["<|begin|>"]}}},
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {"<|begin|>": 0, "<|end|>": 1, "a": 2, "b": 3, "c": 4, "d": 5, "e": 6, "Ġ": 7,
              "1": 8, "2": 9, "ab": 10, "Ġa": 11, "cd": 12, "12": 13, "Ã": 14, "©": 15},
    "merges": ["a b", "Ġ a", "c d", "1 2"]}
})";

// SentencePiece-style BPE: Metaspace, byte fallback, unk, the Llama decoder chain.
constexpr std::string_view kSentencePiece = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true},
    {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
    "vocab": {"<unk>": 0, "<s>": 1, "<0x0A>": 2, "<0x41>": 3, "<0xC3>": 4, "<0xA9>": 5, "▁": 6,
              "a": 7, "b": 8, "▁a": 9, "ab": 10, "▁ab": 11},
    "merges": ["▁ a", "a b", "▁a b"]}
})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const oscar::Tokenizer byte_level = oscar::Tokenizer::from_json(kByteLevel, "byte-level");
  static const oscar::Tokenizer sentence_piece =
      oscar::Tokenizer::from_json(kSentencePiece, "sentencepiece");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const oscar::Tokenizer* t : {&byte_level, &sentence_piece}) {
    const std::vector<std::int32_t> ids = t->encode(text, true);
    (void)t->decode(ids, false);
    (void)t->decode(ids, true);
  }
  return 0;  // encoding never throws: any text is valid input
}
