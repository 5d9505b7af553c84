// config.json parsing: every supported family and RoPE form, and clear rejection of the rest.
#include <gtest/gtest.h>

#include <string>

#include "oscar/config.h"
#include "oscar/error.h"
#include "test_support.h"

namespace oscar {
namespace {

std::string base(const std::string& extra, const std::string& model_type = "llama") {
  return R"({"model_type": ")" + model_type + R"(", "architectures": ["X"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 100, "max_position_embeddings": 4096)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

// Expects parse failure with a message containing `needle`.
void expect_error(const std::string& json, const std::string& needle) {
  try {
    parse_model_config(json, "config.json");
    FAIL() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Config, DerivedDefaults) {
  auto c = parse_model_config(base(""), "config.json");
  EXPECT_EQ(c.num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_EQ(c.head_dim, 16);     // hidden_size / num_attention_heads
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
}

TEST(Config, ExplicitHeadDimAndGqa) {
  auto c = parse_model_config(base(R"("head_dim": 128, "num_key_value_heads": 2)"), "c");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.group_size(), 2);
}

TEST(Config, FamilyFlags) {
  EXPECT_TRUE(parse_model_config(base("", "qwen2"), "c").attention_bias);
  EXPECT_FALSE(parse_model_config(base("", "qwen2"), "c").attention_output_bias);
  EXPECT_TRUE(parse_model_config(base("", "qwen3"), "c").qk_norm);
  auto llama = parse_model_config(base(R"("attention_bias": true, "mlp_bias": true)"), "c");
  EXPECT_TRUE(llama.attention_bias && llama.attention_output_bias && llama.mlp_bias);
  EXPECT_FALSE(parse_model_config(base(R"("sliding_window": null)", "mistral"), "c").qk_norm);
}

TEST(Config, RopeFromLegacyKeys) {
  auto c = parse_model_config(
      base(R"("rope_theta": 500000, "rope_scaling": {"type": "linear", "factor": 2.0})"), "c");
  EXPECT_EQ(c.rope.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
}

TEST(Config, RopeFromParameters) {
  auto c =
      parse_model_config(base(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
      "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192})"),
                         "c");
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
}

TEST(Config, YarnFactorFromOriginalContext) {
  auto c = parse_model_config(base(R"("rope_parameters": {"rope_type": "yarn", "factor": 4.0,
      "original_max_position_embeddings": 1024, "rope_theta": 10000.0})"),
                              "c");
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);  // 4096 / 1024
}

TEST(Config, RejectsUnsupportedRopeType) {
  expect_error(base(R"("rope_scaling": {"type": "dynamic", "factor": 2.0})"), "'dynamic'");
  expect_error(base(R"("rope_parameters": {"rope_type": "longrope"})"), "'longrope'");
  expect_error(base(R"("rope_scaling": {"rope_type": "linear"})"), "needs a 'factor'");
}

TEST(Config, RejectsSlidingWindow) {
  expect_error(base(R"("sliding_window": 1024)", "mistral"), "sliding-window");
  // Window as long as the context is plain causal attention.
  EXPECT_NO_THROW(parse_model_config(base(R"("sliding_window": 4096)", "mistral"), "c"));
  // Qwen2/Qwen3 only slide when use_sliding_window is set.
  EXPECT_NO_THROW(parse_model_config(base(R"("sliding_window": 1024)", "qwen2"), "c"));
  expect_error(base(R"("sliding_window": 1024, "use_sliding_window": true)", "qwen3"),
               "sliding-window");
  expect_error(base(R"("layer_types": ["full_attention", "sliding_attention"])", "qwen3"),
               "sliding_attention");
}

TEST(Config, RejectsMixtureOfExperts) {
  expect_error(base(R"("num_local_experts": 8)", "mixtral"), "mixture-of-experts");
  expect_error(base(R"("num_experts": 64)", "qwen2_moe"), "mixture-of-experts");
  expect_error(base("", "qwen3_moe"), "mixture-of-experts");
}

TEST(Config, RejectsUnknownFamiliesAndBadValues) {
  expect_error(base("", "gpt2"), "unsupported model_type 'gpt2'");
  expect_error(base(R"("num_key_value_heads": 3)"), "not a multiple");
  expect_error(base(R"("hidden_act": "gelu")"), "gelu");
  expect_error(R"({"model_type": "llama"})", "hidden_size");
  expect_error("{not json", "malformed JSON");
  expect_error("[1, 2]", "JSON object");
  expect_error(base(R"("hidden_size": "big")"), "hidden_size");
  expect_error(base(R"("partial_rotary_factor": 0.5)"), "partial_rotary_factor");
}

TEST(Config, SharedModels) {
  OSCAR_REQUIRE_MODEL(stories, "stories260K");
  auto s = load_model_config(stories);
  EXPECT_EQ(s.head_dim, 8);
  EXPECT_EQ(s.num_kv_heads, 4);
  EXPECT_TRUE(s.tie_word_embeddings);
  for (const char* name : {"codellama-h64-25m", "codeqwen3-h128-30m"}) {
    const std::string dir = test::model_dir(name);
    if (dir.empty()) continue;
    auto c = load_model_config(dir);
    EXPECT_EQ(c.num_layers, 8) << name;
    EXPECT_EQ(c.head_dim, std::string(name).find("h64") != std::string::npos ? 64 : 128);
  }
  EXPECT_THROW(load_model_config("/nonexistent"), Error);
}

}  // namespace
}  // namespace oscar
