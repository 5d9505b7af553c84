// Writes the seed corpus of the fuzz targets: tiny valid inputs of every parser, made with the
// project's own writers (binary files) or written out here (JSON). Usage: oscar-fuzz-seeds DIR
// (creates DIR/<target>/seed-*).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/bundle_export.h"
#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/npy.h"
#include "oscar/safetensors.h"
#include "oscar/torch_archive.h"
#include "tiny_bundle.h"

namespace {

namespace fs = std::filesystem;
using oscar::fuzz::tiny_bundle;

std::string g_root;

std::string seed_path(const std::string& target, const std::string& name) {
  fs::create_directories(fs::path(g_root) / target);
  return (fs::path(g_root) / target / ("seed-" + name)).string();
}

void write_text(const std::string& target, const std::string& name, const std::string& text) {
  oscar::write_file_atomic(seed_path(target, name), text);
}

void safetensors_seeds() {
  const std::vector<float> f32 = {1, 2, 3, 4, 5, 6};
  const std::vector<std::uint16_t> bf16 = {0x3f80, 0x4000, 0xbf80, 0};
  const std::int64_t scalar = 7;
  oscar::write_safetensors(seed_path("fuzz_safetensors", "mixed.safetensors"),
                           {{"a.weight", oscar::DType::F32, {2, 3}, f32.data(), 24},
                            {"b", oscar::DType::BF16, {4}, bf16.data(), 8},
                            {"c", oscar::DType::I64, {}, &scalar, 8},
                            {"empty", oscar::DType::U8, {0, 5}, nullptr, 0}},
                           {{"format", "pt"}});
  oscar::write_safetensors(seed_path("fuzz_safetensors", "none.safetensors"), {});
}

void bundle_seeds() {
  oscar::Bundle v1 = tiny_bundle(1, 1, 2, false, 0.0);
  oscar::write_bundle(seed_path("fuzz_bundle", "v1.safetensors"), v1);
  oscar::Bundle v2 = tiny_bundle(2, 2, 4, true, 0.5);
  oscar::write_bundle(seed_path("fuzz_bundle", "v2.safetensors"), v2);
  // fuzz_bundle_manifest wraps its input around the tensors of this same bundle.
  write_text("fuzz_bundle_manifest", "v2.json", oscar::bundle_manifest_json(v2, 1));
  // A valid bundle is also a valid safetensors file.
  oscar::write_bundle(seed_path("fuzz_safetensors", "bundle.safetensors"), v1);
}

void npy_seeds() {
  const std::vector<float> f = {1.5f, -2.0f, 0.0f, 3.25f, 4.0f, 5.0f};
  oscar::write_npy_float32(seed_path("fuzz_npy", "f4-2x3.npy"), {2, 3}, f.data());
  oscar::write_npy_float32(seed_path("fuzz_npy", "f4-6.npy"), {6}, f.data());
  oscar::write_npy_float32(seed_path("fuzz_npy", "f4-scalar.npy"), {}, f.data());
  // Version 2.0 (4-byte header length), float64.
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  header.append((64 - (12 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8);
  for (int i = 0; i < 4; ++i) v2.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  v2 += header;
  const double d[2] = {0.5, -1.0};
  v2.append(reinterpret_cast<const char*>(d), sizeof d);
  oscar::write_file_atomic(seed_path("fuzz_npy", "f8-v2.npy"), v2);
}

void json_seeds() {
  const std::string common = R"("architectures": ["LlamaForCausalLM"], "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "torch_dtype": "float32",
  "bos_token_id": 1, "eos_token_id": [2, 3], "hidden_act": "silu")";
  write_text("fuzz_config", "llama.json",
             R"({"model_type": "llama", )" + common + R"(, "rope_theta": 10000.0})");
  write_text("fuzz_config", "llama3.json",
             R"({"model_type": "llama", )" + common +
                 R"(, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
  "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}})");
  write_text("fuzz_config", "qwen3-yarn.json",
             R"({"model_type": "qwen3", )" + common +
                 R"(, "head_dim": 32, "use_sliding_window": false, "sliding_window": 1024,
  "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
  "original_max_position_embeddings": 1024, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
  "attention_factor": null, "truncate": false}, "layer_types": ["full_attention", "full_attention"]})");
  write_text("fuzz_config", "qwen2-linear.json",
             R"({"model_type": "qwen2", )" + common +
                 R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})");
  write_text("fuzz_config", "mistral.json",
             R"({"model_type": "mistral", )" + common + R"(, "sliding_window": null})");

  write_text("fuzz_safetensors_index", "index.json", R"({"metadata": {"total_size": 48},
  "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
  "lm_head.weight": "model-00002-of-00002.safetensors", "model.norm.weight":
  "model-00002-of-00002.safetensors"}})");
}

void tokenizer_seeds() {
  const std::string bpe_model = R"("model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
    "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true,
    "byte_fallback": true, "ignore_merges": false,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "▁": 5, "a": 6, "b": 7,
              "▁a": 8, "ab": 9, "▁ab": 10, "H": 11, "l": 12, "o": 13, "ll": 14},
    "merges": ["▁ a", "a b", "▁a b", "l l"]})";
  write_text("fuzz_tokenizer", "sentencepiece.json", R"({"version": "1.0", "truncation": null,
  "padding": null, "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true},
    {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  )" + bpe_model + "}");
  write_text("fuzz_tokenizer", "byte-level.json", R"({"version": "1.0", "truncation": null,
  "padding": null, "added_tokens": [
    {"id": 0, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
  "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
    "use_regex": false},
  "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
    "use_regex": false},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {"<|endoftext|>": 0, "H": 1, "e": 2, "l": 3, "o": 4, "Ġ": 5, "w": 6, "1": 7,
              "He": 8, "ll": 9, "Ġw": 10, "Hell": 11},
    "merges": [["H", "e"], ["l", "l"], ["Ġ", "w"], ["He", "ll"]]}})");
  write_text("fuzz_tokenizer", "wordpiece-like.json", R"({"version": "1.0",
  "added_tokens": [],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
    {"type": "Strip", "strip_left": true, "strip_right": true}]},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
    {"type": "Punctuation", "behavior": "Isolated"}, {"type": "Digits", "individual_digits": true}]},
  "post_processor": null,
  "decoder": {"type": "BPEDecoder", "suffix": "</w>"},
  "model": {"type": "BPE", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
    "end_of_word_suffix": "</w>", "vocab": {"[UNK]": 0, "h": 1, "##e": 2, "##l": 3, "##o</w>": 4,
    "1</w>": 5, "!</w>": 6, "##el": 7}, "merges": ["##e ##l"]}})");
  write_text("fuzz_tokenizer", "metaspace.json", R"({"version": "1.0", "added_tokens": [],
  "normalizer": null,
  "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
    "split": true},
  "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
  )" + bpe_model + "}");
}

void text_seeds() {
  write_text("fuzz_tokenize_text", "prose.txt",
             "Once upon a time, there was a little dog.\n\nIt's 12:30!");
  write_text("fuzz_tokenize_text", "code.txt",
             "def f(x):\n    return x ** 2  # square\n\tpass\r\n");
  write_text("fuzz_tokenize_text", "unicode.txt",
             "d\xC3\xA9j\xC3\xA0 vu \xE2\x80\x94 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 "
             "e\xCC\x81 <s> <|begin|>ab\xFF\xC3");
}

}  // namespace

// SGLang rotation files of the target's model (2 layers, 2 KV heads, d 4; per-head rotations,
// format_version 2) and a plain dict of one tensor.
void torch_archive_seeds() {
  const oscar::SglangFiles files = oscar::sglang_export(tiny_bundle(2, 2, 4, false, 0.0));
  write_text("fuzz_torch_archive", "k.pt", oscar::torch_archive_bytes(files.k));
  write_text("fuzz_torch_archive", "v.pt", oscar::torch_archive_bytes(files.v));
  oscar::TorchTensor t;
  t.shape = {2, 2};
  t.values = {1.0f, 0.0f, 0.0f, 1.0f};
  oscar::PickleValue dict = oscar::PickleValue::dict();
  dict.set("eye", oscar::PickleValue::tensor(t));
  dict.set("n", oscar::PickleValue::integer(3));
  write_text("fuzz_torch_archive", "dict.pt", oscar::torch_archive_bytes(dict));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: oscar-fuzz-seeds DIR\n");
    return 2;
  }
  g_root = argv[1];
  try {
    safetensors_seeds();
    bundle_seeds();
    npy_seeds();
    json_seeds();
    tokenizer_seeds();
    text_seeds();
    torch_archive_seeds();
  } catch (const oscar::Error& e) {
    std::fprintf(stderr, "oscar-fuzz-seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
