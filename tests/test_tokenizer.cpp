// Tests of oscar::Tokenizer: the shared real tokenizers against recorded `tokenizers` output, and
// small inline tokenizer.json files for each supported component, error handling and throughput.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/tokenizer.h"
#include "test_support.h"

namespace oscar {
namespace {

using nlohmann::json;
using Ids = std::vector<std::int32_t>;

// ---------------------------------------------------------------------------------------------
// Helpers for inline tokenizers.

// A BPE tokenizer.json with the given vocabulary (ids in order), merges and no other component.
json bpe_tokenizer(const std::vector<std::string>& vocab, const json& merges = json::array()) {
  json v = json::object();
  for (std::size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", v},
            {"merges", merges}}}};
}

Tokenizer load(const json& j) { return Tokenizer::from_json(j.dump(), "inline.json"); }

// The token strings of encode(text) without special tokens.
std::vector<std::string> tokens_of(const Tokenizer& t, const std::string& text,
                                   bool add_special_tokens = false) {
  std::vector<std::string> out;
  for (std::int32_t id : t.encode(text, add_special_tokens)) {
    auto s = t.id_to_token(id);
    out.push_back(s ? *s : "<?>");
  }
  return out;
}

// Expects loading `j` to throw oscar::Error whose message contains `needle`.
void expect_load_error(const std::string& text, const std::string& needle) {
  try {
    Tokenizer::from_json(text, "bad.json");
    ADD_FAILURE() << "no error for: " << text.substr(0, 200);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

json added_token(const std::string& content, bool special, bool normalized = false) {
  return {{"id", 0},         {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

// Single characters a-z, space and a few pieces.
std::vector<std::string> letters() {
  std::vector<std::string> v;
  for (char c = 'a'; c <= 'z'; ++c) v.emplace_back(1, c);
  return v;
}

// ---------------------------------------------------------------------------------------------
// BPE model

TEST(TokenizerBpe, MergesAsStringsAndPairsAgree) {
  std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "abc", "ca"};
  auto strings = load(bpe_tokenizer(vocab, json::array({"a b", "ab c", "c a"})));
  auto pairs = load(bpe_tokenizer(vocab, json::array({{"a", "b"}, {"ab", "c"}, {"c", "a"}})));
  for (std::string text : {"abc", "abcabc", "cab", "aabbcc", "bca", "c", ""}) {
    EXPECT_EQ(strings.encode(text), pairs.encode(text)) << text;
  }
  EXPECT_EQ(tokens_of(strings, "abcabc"), (std::vector<std::string>{"abc", "abc"}));
  EXPECT_EQ(tokens_of(strings, "cab"),
            (std::vector<std::string>{"c", "ab"}));  // "a b" outranks "c a"
  EXPECT_EQ(tokens_of(strings, "cac"), (std::vector<std::string>{"ca", "c"}));
}

TEST(TokenizerBpe, LowestRankFirstThenLeftmost) {
  // "b c" outranks "a b": "abc" -> a + bc, although "ab" is leftmost.
  auto t = load(bpe_tokenizer({"a", "b", "c", "ab", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(tokens_of(t, "abc"), (std::vector<std::string>{"a", "bc"}));
  // Equal ranks: leftmost first, so "aaa" -> aa + a.
  auto u = load(bpe_tokenizer({"a", "aa", "aaaa"}, {"a a", "aa aa"}));
  EXPECT_EQ(tokens_of(u, "aaa"), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(tokens_of(u, "aaaaa"), (std::vector<std::string>{"aaaa", "a"}));
}

TEST(TokenizerBpe, UnknownAndByteFallback) {
  json j = bpe_tokenizer({"<unk>", "a", "b", "<0x78>", "<0x79>", "<0xC3>", "<0xA9>"});
  j["model"]["unk_token"] = "<unk>";
  j["model"]["fuse_unk"] = true;
  auto fused = load(j);
  EXPECT_EQ(fused.encode("azzzb", false), (Ids{1, 0, 2}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(j).encode("azzzb", false), (Ids{1, 0, 0, 0, 2}));
  j["model"]["byte_fallback"] = true;
  auto fb = load(j);
  EXPECT_EQ(fb.encode("axyb", false), (Ids{1, 3, 4, 2}));
  EXPECT_EQ(fb.encode("\xC3\xA9", false), (Ids{5, 6}));  // é as two bytes
  EXPECT_EQ(fb.encode("z", false), (Ids{0}));            // no <0x7A>: unk
  j["model"]["unk_token"] = nullptr;
  EXPECT_EQ(load(j).encode("azb", false), (Ids{1, 2}));  // no unk token: dropped
}

TEST(TokenizerBpe, ContinuingSubwordPrefixAndEndOfWordSuffix) {
  json p = bpe_tokenizer({"a", "b", "##a", "##b", "ab", "##ab"}, {"a ##b", "##a ##b"});
  p["model"]["continuing_subword_prefix"] = "##";
  auto tp = load(p);
  EXPECT_EQ(tokens_of(tp, "ab"), (std::vector<std::string>{"ab"}));
  EXPECT_EQ(tokens_of(tp, "bab"), (std::vector<std::string>{"b", "##ab"}));
  EXPECT_EQ(tokens_of(tp, "ba"), (std::vector<std::string>{"b", "##a"}));

  json s = bpe_tokenizer({"a", "b", "a</w>", "b</w>", "ab</w>"}, {"a b</w>"});
  s["model"]["end_of_word_suffix"] = "</w>";
  auto ts = load(s);
  EXPECT_EQ(tokens_of(ts, "ab"), (std::vector<std::string>{"ab</w>"}));
  EXPECT_EQ(tokens_of(ts, "ba"), (std::vector<std::string>{"b", "a</w>"}));
}

TEST(TokenizerBpe, IgnoreMerges) {
  // "abc" is in the vocabulary but no merge builds it.
  json j = bpe_tokenizer({"a", "b", "c", "abc", "ab"}, {"a b"});
  EXPECT_EQ(tokens_of(load(j), "abc"), (std::vector<std::string>{"ab", "c"}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(tokens_of(load(j), "abc"), (std::vector<std::string>{"abc"}));
}

TEST(TokenizerBpe, DropoutIsRejectedUnlessZero) {
  json j = bpe_tokenizer({"a"});
  j["model"]["dropout"] = 0.0;
  EXPECT_EQ(load(j).encode("a", false), (Ids{0}));
  j["model"]["dropout"] = 0.1;
  expect_load_error(j.dump(), "dropout");
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers. With ignore_merges and every expected piece in the vocabulary, each pre-token
// comes back as one token, which makes the split visible.

json splitting_tokenizer(const json& pre_tokenizer, std::vector<std::string> pieces) {
  std::vector<std::string> vocab = letters();
  for (auto& p : pieces) vocab.push_back(p);
  json j = bpe_tokenizer(vocab);
  j["model"]["ignore_merges"] = true;
  j["pre_tokenizer"] = pre_tokenizer;
  return j;
}

TEST(TokenizerPreTokenizer, SplitBehaviours) {
  const std::vector<std::string> pieces = {"the",    "final",  "countdown",  "-",  "the-",
                                           "final-", "-final", "-countdown", "--", "final--"};
  auto split = [&](const char* behavior, bool invert = false, const char* regex = nullptr) {
    json pattern = regex ? json{{"Regex", regex}} : json{{"String", "-"}};
    json pre = {
        {"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
    return tokens_of(load(splitting_tokenizer(pre, pieces)), "the-final--countdown");
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Removed"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (V{"the", "-", "final", "--", "countdown"}));
  // Inverted: the regex matches the words, so the words are the delimiters.
  EXPECT_EQ(split("Removed", true, "[a-z]+"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("Removed", false, "[a-z]+"), (V{"-", "--"}));
  EXPECT_EQ(split("MergedWithNext", true, "-+"), (V{"the-", "final--", "countdown"}));
}

const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TEST(TokenizerPreTokenizer, Llama3Regex) {
  json pre = {{"type", "Split"},
              {"pattern", {{"Regex", kLlama3Regex}}},
              {"behavior", "Isolated"},
              {"invert", false}};
  std::vector<std::string> pieces = {"I",     "'M",  " here",        " ",
                                     "123",   "45",  "\n\n",         " x",
                                     "'s",    "'S",  "'LL",          "'Ve",
                                     "it",    "ſ",   "'ſ",           " .\n",
                                     "\t\n",  "\n",  "  ",           "é",
                                     " 漢字", "1",   "12",           "ab1",
                                     " it",   " ab", "\xE3\x80\x80", "\xE1\xA0\x8E.",
                                     "2",     "3"};
  auto t = load(splitting_tokenizer(pre, pieces));
  using V = std::vector<std::string>;
  EXPECT_EQ(tokens_of(t, "I'M here 12345\n\n  x's"),
            (V{"I", "'M", " here", " ", "123", "45", "\n\n", " ", " x", "'s"}));
  // Contractions are case-insensitive (Unicode case folding: U+017F matches s).
  EXPECT_EQ(tokens_of(t, "it'S it'LL it'Ve it'ſ"),
            (V{"it", "'S", " it", "'LL", " it", "'Ve", " it", "'ſ"}));
  // Punctuation keeps trailing newlines; whitespace before newlines groups with them.
  EXPECT_EQ(tokens_of(t, "x .\n\t\n"), (V{"x", " .\n", "\t\n"}));
  // Unicode letters and numbers; U+3000 is whitespace, U+180E is not (Oniguruma's \s).
  EXPECT_EQ(tokens_of(t, "é 漢字"), (V{"é", " 漢字"}));
  EXPECT_EQ(tokens_of(t,
                      "1\xE3\x80\x80"
                      "12"),
            (V{"1", "\xE3\x80\x80", "12"}));
  EXPECT_EQ(tokens_of(t, "1\xE1\xA0\x8E."), (V{"1", "\xE1\xA0\x8E."}));

  json qpre = pre;
  qpre["pattern"]["Regex"] = kQwen2Regex;
  auto q = load(splitting_tokenizer(qpre, pieces));
  // Qwen2 differs only in splitting numbers into single digits.
  EXPECT_EQ(tokens_of(q, "12 ab1"), (V{"1", "2", " ab", "1"}));
  EXPECT_EQ(tokens_of(q, "I'M here"), (V{"I", "'M", " here"}));
}

TEST(TokenizerPreTokenizer, WhitespaceDigitsPunctuation) {
  using V = std::vector<std::string>;
  auto ws = load(splitting_tokenizer({{"type", "Whitespace"}}, {"hey", "!?", "friend", "12"}));
  EXPECT_EQ(tokens_of(ws, " hey!? friend\t12"), (V{"hey", "!?", "friend", "12"}));
  auto wss = load(splitting_tokenizer({{"type", "WhitespaceSplit"}}, {"hey!?", "friend", "12"}));
  EXPECT_EQ(tokens_of(wss, " hey!? friend\t12 "), (V{"hey!?", "friend", "12"}));
  auto digits = load(splitting_tokenizer({{"type", "Digits"}, {"individual_digits", false}},
                                         {"123", "ab", "4", "1", "2", "3"}));
  EXPECT_EQ(tokens_of(digits, "ab123"), (V{"ab", "123"}));
  auto single = load(splitting_tokenizer({{"type", "Digits"}, {"individual_digits", true}},
                                         {"123", "ab", "1", "2", "3"}));
  EXPECT_EQ(tokens_of(single, "ab123"), (V{"ab", "1", "2", "3"}));
  auto punct = load(splitting_tokenizer({{"type", "Punctuation"}, {"behavior", "Isolated"}},
                                        {"hi", "!", "?", "$"}));
  EXPECT_EQ(tokens_of(punct, "hi!?$"), (V{"hi", "!", "?", "$"}));
}

TEST(TokenizerPreTokenizer, MetaspaceAndDecoder) {
  const std::string m = "\xE2\x96\x81";  // U+2581
  std::vector<std::string> vocab = letters();
  for (std::string p : {"\xE2\x96\x81", "<s>"}) vocab.push_back(p);
  for (std::string w : {"hello", "world"}) vocab.push_back(m + w);
  json merges = json::array();
  std::string acc;
  // Merges building "▁hello" and "▁world" left to right.
  auto chain = [&](const std::string& w) {
    std::string cur = m;
    for (char c : w) {
      std::string next = cur + c;
      if (std::find(vocab.begin(), vocab.end(), next) == vocab.end()) vocab.push_back(next);
      merges.push_back(json::array({cur, std::string(1, c)}));
      cur = next;
    }
  };
  chain("hello");
  chain("world");
  json j = bpe_tokenizer(vocab, merges);
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}, {"split", true}};
  j["decoder"] = {
      {"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}, {"split", true}};
  j["added_tokens"].push_back(added_token("<s>", true));
  auto t = load(j);
  using V = std::vector<std::string>;
  EXPECT_EQ(tokens_of(t, "hello world"), (V{m + "hello", m + "world"}));
  EXPECT_EQ(t.decode(t.encode("hello world", false)), "hello world");
  // "always": the piece after an added token gets the prefix too.
  EXPECT_EQ(tokens_of(t, "<s>hello"), (V{"<s>", m + "hello"}));

  j["pre_tokenizer"]["prepend_scheme"] = "first";
  auto first = load(j);
  // "first": only the piece at the very start of the input gets the prefix.
  EXPECT_EQ(tokens_of(first, "hello<s>hello"), (V{m + "hello", "<s>", "h", "e", "l", "l", "o"}));
  EXPECT_EQ(tokens_of(first, "<s>hello world"), (V{"<s>", "h", "e", "l", "l", "o", m + "world"}));

  j["pre_tokenizer"]["prepend_scheme"] = "never";
  j["decoder"]["prepend_scheme"] = "never";
  auto never = load(j);
  EXPECT_EQ(tokens_of(never, "hello world"), (V{"h", "e", "l", "l", "o", m + "world"}));
  EXPECT_EQ(never.decode(never.encode("hello world", false)), "hello world");
}

// ---------------------------------------------------------------------------------------------
// Normalizers

TEST(TokenizerNormalizer, UnicodeForms) {
  const std::string e_acute = "\xC3\xA9";                                            // U+00E9
  const std::string combining = "\xCC\x81";                                          // U+0301
  std::vector<std::string> vocab = {"e", combining, e_acute, "fi", "\xEF\xAC\x81"};  // ..., U+FB01
  json j = bpe_tokenizer(vocab);
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(load(j).encode("e" + combining, false), (Ids{2}));
  j["normalizer"] = {{"type", "NFD"}};
  EXPECT_EQ(load(j).encode(e_acute, false), (Ids{0, 1}));
  j["normalizer"] = {{"type", "NFKC"}};
  json k = j;
  k["model"]["vocab"]["f"] = 5;
  k["model"]["vocab"]["i"] = 6;
  k["model"]["merges"] = {"f i"};
  EXPECT_EQ(load(k).encode("\xEF\xAC\x81", false), (Ids{3}));  // the ligature becomes "fi"
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(load(j).encode("\xEF\xAC\x81", false), (Ids{4}));  // NFC keeps it
}

TEST(TokenizerNormalizer, SequencePrependReplaceLowercaseStrip) {
  const std::string m = "\xE2\x96\x81";
  std::vector<std::string> vocab = letters();
  vocab.push_back(m);
  json j = bpe_tokenizer(vocab);
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                       {{"type", "Lowercase"}},
                       {{"type", "Prepend"}, {"prepend", m}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}};
  auto t = load(j);
  using V = std::vector<std::string>;
  EXPECT_EQ(tokens_of(t, "  Ab C \t"), (V{m, "a", "b", m, "c"}));
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "[0-9]+"}}}, {"content", "x"}};
  EXPECT_EQ(tokens_of(load(j), "a12b3"), (V{"a", "x", "b", "x"}));
}

// ---------------------------------------------------------------------------------------------
// Added tokens, post-processing, decoding

TEST(TokenizerAddedTokens, SpecialAndNonSpecial) {
  std::vector<std::string> vocab = letters();
  vocab.push_back(" ");
  json j = bpe_tokenizer(vocab);  // 27 entries: added tokens get ids 27, 28, ...
  j["added_tokens"].push_back(added_token("<eos>", true));
  j["added_tokens"].push_back(added_token("foo", false, true));
  j["decoder"] = {{"type", "Fuse"}};
  auto t = load(j);
  EXPECT_EQ(t.token_to_id("<eos>"), 27);
  EXPECT_EQ(t.token_to_id("foo"), 28);
  EXPECT_EQ(t.vocab_size(), 29);
  Ids ids = t.encode("a foo<eos>b", false);
  EXPECT_EQ(ids, (Ids{0, 26, 28, 27, 1}));
  EXPECT_EQ(t.decode(ids, true), "a foob");  // the special token is skipped, "foo" is not
  EXPECT_EQ(t.decode(ids, false), "a foo<eos>b");
  EXPECT_EQ(t.decode({0, 9999, 1}), "ab");  // unknown ids are dropped
}

TEST(TokenizerAddedTokens, StripAndSingleWord) {
  std::vector<std::string> vocab = letters();
  vocab.push_back(" ");
  json j = bpe_tokenizer(vocab);
  json sep = added_token("<sep>", true);
  sep["lstrip"] = true;
  sep["rstrip"] = true;
  json word = added_token("cat", false);
  word["single_word"] = true;
  j["added_tokens"] = {sep, word};
  auto t = load(j);
  std::int32_t s = *t.token_to_id("<sep>"), c = *t.token_to_id("cat");
  EXPECT_EQ(t.encode("a  <sep>  b", false), (Ids{0, s, 1}));
  EXPECT_EQ(t.encode("a cat b", false), (Ids{0, 26, c, 26, 1}));
  // Inside a word the single-word token does not match: plain letters.
  EXPECT_EQ(t.encode("concat", false), (Ids{2, 14, 13, 2, 0, 19}));
}

TEST(TokenizerPostProcessor, TemplateAndByteLevel) {
  json j = bpe_tokenizer({"<s>", "</s>", "a", "b"});
  j["added_tokens"] = {added_token("<s>", true), added_token("</s>", true)};
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
           {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
         {"pair", "<s> $A </s> $B:1 </s>:1"},
         {"special_tokens",
          {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
           {"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}}}}};
  auto t = load(j);
  EXPECT_EQ(t.encode("ab", true), (Ids{0, 2, 3, 1}));
  EXPECT_EQ(t.encode("ab", false), (Ids{2, 3}));
  j["post_processor"]["processors"][1]["single"] = "$A </s>";
  EXPECT_EQ(load(j).encode("ab", true), (Ids{2, 3, 1}));
  j["post_processor"]["processors"][1]["single"] = "<s> $A <missing>";
  expect_load_error(j.dump(), "<missing>");
}

TEST(TokenizerPostProcessor, TruncationAndPadding) {
  json j = bpe_tokenizer(letters());
  j["truncation"] = {
      {"direction", "Right"}, {"max_length", 3}, {"strategy", "LongestFirst"}, {"stride", 0}};
  EXPECT_EQ(load(j).encode("abcde", false), (Ids{0, 1, 2}));
  j["truncation"]["direction"] = "Left";
  EXPECT_EQ(load(j).encode("abcde", false), (Ids{2, 3, 4}));
  j["truncation"] = nullptr;
  j["padding"] = {{"strategy", {{"Fixed", 4}}},
                  {"direction", "Right"},
                  {"pad_to_multiple_of", nullptr},
                  {"pad_id", 25},
                  {"pad_type_id", 0},
                  {"pad_token", "z"}};
  EXPECT_EQ(load(j).encode("ab", false), (Ids{0, 1, 25, 25}));
}

TEST(TokenizerDecoder, ByteFallbackFuseStripReplace) {
  const std::string m = "\xE2\x96\x81";
  json j = bpe_tokenizer({m + "a", "<0xC3>", "<0xA9>", "<0xFF>", m + "b"});
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  auto t = load(j);
  EXPECT_EQ(t.decode({0, 1, 2, 4}), "a\xC3\xA9 b");
  EXPECT_EQ(t.decode({0, 3, 4}), "a\xEF\xBF\xBD b");  // an invalid byte becomes U+FFFD
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(TokenizerErrors, UnknownComponentTypesAreNamed) {
  json base = bpe_tokenizer({"a"});
  json j = base;
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_load_error(j.dump(), "BertPreTokenizer");
  j = base;
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", ""}};
  expect_load_error(j.dump(), "Precompiled");
  j = base;
  j["decoder"] = {{"type", "CTC"}};
  expect_load_error(j.dump(), "CTC");
  j = base;
  j["post_processor"] = {{"type", "Frobnicate"}};
  expect_load_error(j.dump(), "Frobnicate");
  j = base;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "UnicodeScripts"}}}}};
  expect_load_error(j.dump(), "UnicodeScripts");
  for (const char* model : {"WordPiece", "Unigram", "WordLevel"}) {
    j = base;
    j["model"]["type"] = model;
    expect_load_error(j.dump(), model);
  }
}

TEST(TokenizerErrors, MalformedJsonNeverCrashes) {
  expect_load_error("", "invalid JSON");
  expect_load_error("{", "invalid JSON");
  expect_load_error("[1, 2]", "object");
  expect_load_error("{}", "model");
  expect_load_error(R"({"model": 3})", "model");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})", "vocab");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", "merge");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a a"]}})",
                    "merge");
  expect_load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}})", "merge");
  expect_load_error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("},
      "behavior": "Isolated", "invert": false}, "model": {"type": "BPE", "vocab": {}, "merges": []}})",
                    "regex");
  expect_load_error(R"({"normalizer": {"nope": 1}, "model": {"type": "BPE", "vocab": {},
      "merges": []}})",
                    "type");
  // Sequences nested absurdly deep are refused instead of exhausting the stack.
  std::string deep = R"({"type": "Lowercase"})";
  for (int k = 0; k < 20000; ++k) deep = R"({"type": "Sequence", "normalizers": [)" + deep + "]}";
  json deep_file = bpe_tokenizer({"a"});
  deep_file["normalizer"] = nullptr;
  std::string text = deep_file.dump();
  text.replace(text.find(R"("normalizer":null)"), 17, R"("normalizer":)" + deep);
  expect_load_error(text, "nested too deeply");
  // Truncations and byte flips of a real file: an oscar::Error or a usable tokenizer, no crash.
  std::string full = bpe_tokenizer({"a", "b", "ab"}, {"a b"}).dump();
  for (std::size_t cut = 0; cut < full.size(); cut += 7) {
    EXPECT_THROW(Tokenizer::from_json(full.substr(0, cut), "cut.json"), Error) << cut;
  }
  std::mt19937 rng(7);
  for (int k = 0; k < 300; ++k) {
    std::string s = full;
    s[rng() % s.size()] = static_cast<char>(rng() % 256);
    try {
      auto t = Tokenizer::from_json(s, "flip.json");
      t.decode(t.encode("abba b"));
    } catch (const Error&) {
    }
  }
}

TEST(TokenizerErrors, InvalidUtf8InputIsReplaced) {
  json j = bpe_tokenizer({"a", "\xEF\xBF\xBD"});
  auto t = load(j);
  EXPECT_EQ(t.encode("a\xFF"
                     "a",
                     false),
            (Ids{0, 1, 0}));
  EXPECT_EQ(t.encode("\xE2\x82", false), (Ids{1}));     // truncated sequence: one U+FFFD
  EXPECT_EQ(t.encode("\xC0\xAF", false), (Ids{1, 1}));  // overlong: one per byte
}

// ---------------------------------------------------------------------------------------------
// The shared real tokenizers

TEST(TokenizerStories260K, ReproducesReferenceIds) {
  OSCAR_REQUIRE_MODEL(dir, "stories260K");
  auto t = Tokenizer::from_file(dir + "/tokenizer.json");
  json ref = json::parse(read_file(dir + "/ref_tokens.json"));
  const auto& paragraphs = ref.at("paragraphs");
  const auto& ids = ref.at("ids");
  ASSERT_EQ(paragraphs.size(), 50u);
  ASSERT_EQ(ids.size(), paragraphs.size());
  const std::size_t seq_len = ref.at("seq_len").get<std::size_t>();
  for (std::size_t i = 0; i < paragraphs.size(); ++i) {
    auto expected = ids[i].get<Ids>();
    // The recorded ids would be cut at seq_len (512); none of these 50 paragraphs reaches it, so
    // they are complete and compared whole.
    ASSERT_LT(expected.size(), seq_len) << "paragraph " << i;
    const std::string text = paragraphs[i].get<std::string>();
    Ids got = t.encode(text, true);
    EXPECT_EQ(got, expected) << "paragraph " << i;
    EXPECT_EQ(t.decode(got), text) << "paragraph " << i;
  }
}

TEST(TokenizerStories260K, EdgeCasesMatchTokenizersJson) {
  OSCAR_REQUIRE_MODEL(dir, "stories260K");
  auto t = Tokenizer::from_file(dir + "/tokenizer.json");
  json v = json::parse(read_file(dir + "/verification.json"));
  const auto& cases = v.at("tokenizer_edge_cases").at("mismatches");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(t.encode(text, true), c.at("tokenizer_json").get<Ids>()) << text;
  }
  EXPECT_EQ(t.encode("<s> literal special").at(1), 1);
  EXPECT_EQ(t.encode("a</s>b"), (Ids{1, 261, 2, 268}));
  EXPECT_EQ(t.encode("<unk>"), (Ids{1, 0}));
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.token_to_id("<s>"), 1);
  EXPECT_EQ(t.id_to_token(2), "</s>");
}

class CodeLlamaTokenizer : public ::testing::Test {
 protected:
  static std::string dir() { return test::model_dir("codellama-h64-25m"); }
};

TEST_F(CodeLlamaTokenizer, SpotChecks) {
  OSCAR_REQUIRE_MODEL(d, "codellama-h64-25m");
  auto t = Tokenizer::from_file(d + "/tokenizer.json");
  using V = std::vector<std::string>;
  auto joined = [&](const std::string& s) {
    std::string out;
    for (auto& p : tokens_of(t, s, true)) out += p;
    return out;
  };
  // Byte-level alphabet: space -> Ġ, newline -> Ċ, tab -> ĉ; multi-byte characters by bytes.
  EXPECT_EQ(tokens_of(t, " "), (V{"\xC4\xA0"}));
  EXPECT_EQ(tokens_of(t, "\n"), (V{"\xC4\x8A"}));
  EXPECT_EQ(joined("\t\n"), "\xC4\x89\xC4\x8A");
  EXPECT_EQ(joined("\xC3\xA9"), "\xC3\x83\xC2\xA9");                          // é = C3 A9
  EXPECT_EQ(joined("\xF0\x9F\x98\x80"), "\xC3\xB0\xC5\x81\xC4\xBA\xC4\xA2");  // 😀
  // The GPT-2 regex: "  hello" is " " + " hello", so a token starts with "Ġhello"'s Ġ.
  V two = tokens_of(t, "  hello world");
  ASSERT_GE(two.size(), 3u);
  EXPECT_EQ(two[0], "\xC4\xA0");
  EXPECT_EQ(two[1].rfind("\xC4\xA0h", 0), 0u);
  // Digits and letters are separate pre-tokens: no token mixes them.
  for (auto& p : tokens_of(t, "abc123def 4567")) {
    bool digit = false, alpha = false;
    for (char c : p) digit |= (c >= '0' && c <= '9'), alpha |= (c >= 'a' && c <= 'z');
    EXPECT_FALSE(digit && alpha) << p;
  }
  // The post-processor (ByteLevel) adds no tokens; the special token is matched whole.
  EXPECT_EQ(t.encode("x", true), t.encode("x", false));
  Ids with = t.encode("a<|endoftext|>b");
  EXPECT_NE(std::find(with.begin(), with.end(), 0), with.end());
  EXPECT_EQ(t.decode(with, true), "ab");
  EXPECT_EQ(t.decode(with, false), "a<|endoftext|>b");
  for (std::string s : {"  leading", "trailing  ", "x\n\n\ny", "naïve café 漢字 😀👍🏽",
                        "12345678", "don't I'M", "\r\n\t"}) {
    EXPECT_EQ(t.decode(t.encode(s)), s);
  }
}

TEST_F(CodeLlamaTokenizer, RoundTripsHeldOutCodeAndThroughput) {
  OSCAR_REQUIRE_MODEL(d, "codellama-h64-25m");
  const std::string path = test::dataset_path("python-code-heldout.txt");
  if (path.empty()) GTEST_SKIP() << "dataset python-code-heldout.txt not found";
  auto t = Tokenizer::from_file(d + "/tokenizer.json");
  const std::string text = read_file(path);
  auto t0 = std::chrono::steady_clock::now();
  Ids ids = t.encode(text, false);
  auto t1 = std::chrono::steady_clock::now();
  std::string back = t.decode(ids);
  auto t2 = std::chrono::steady_clock::now();
  ASSERT_EQ(back.size(), text.size());
  EXPECT_TRUE(back == text);
  double enc = std::chrono::duration<double>(t1 - t0).count();
  double dec = std::chrono::duration<double>(t2 - t1).count();
  std::printf(
      "[ throughput ] encode %zu bytes -> %zu tokens in %.3f s: %.0f tokens/s, %.1f MB/s "
      "(first pass, cold cache); decode %.3f s\n",
      text.size(), ids.size(), enc, ids.size() / enc, text.size() / enc / 1e6, dec);
  // A second pass hits the word cache; it must give the same ids.
  auto t3 = std::chrono::steady_clock::now();
  Ids again = t.encode(text, false);
  double warm = std::chrono::duration<double>(std::chrono::steady_clock::now() - t3).count();
  EXPECT_EQ(again, ids);
  std::printf("[ throughput ] encode (warm cache) %.3f s: %.0f tokens/s\n", warm,
              ids.size() / warm);
}

TEST_F(CodeLlamaTokenizer, ConcurrentEncodingIsConsistent) {
  OSCAR_REQUIRE_MODEL(d, "codellama-h64-25m");
  auto t = Tokenizer::from_file(d + "/tokenizer.json");
  std::string text;
  for (int k = 0; k < 200; ++k)
    text += "def f" + std::to_string(k) + "(x):\n    return x * " + std::to_string(k * 7) + "\n";
  Ids expected = Tokenizer::from_file(d + "/tokenizer.json").encode(text);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) threads.emplace_back([&, k] { results[k] = t.encode(text); });
  for (auto& th : threads) th.join();
  for (auto& r : results) EXPECT_EQ(r, expected);
}

}  // namespace
}  // namespace oscar
