// config.json parsing for the supported decoder families, with explicit rejection of the rest.
#include "oscar/config.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

#include "oscar/error.h"
#include "oscar/file.h"

namespace oscar {

namespace {

using nlohmann::json;

bool has(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

std::int64_t get_int(const json& j, const char* key, const std::string& origin) {
  OSCAR_CHECK(has(j, key), "{}: missing required key '{}'", origin, key);
  const json& v = j.at(key);
  // Integers written as floats (64.0) are accepted; anything outside int64 is rejected rather than
  // wrapped (unsigned) or converted with undefined behaviour (floats).
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  const bool in_range =
      v.is_number_unsigned()
          ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)
          : v.is_number_integer() ||
                (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) &&
                 v.get<double>() >= -kLimit && v.get<double>() < kLimit);
  OSCAR_CHECK(in_range, "{}: '{}' must be an integer (got {})", origin, key, v.dump());
  return v.is_number_integer() ? v.get<std::int64_t>() : static_cast<std::int64_t>(v.get<double>());
}

std::int64_t get_int_or(const json& j, const char* key, std::int64_t fallback,
                        const std::string& origin) {
  return has(j, key) ? get_int(j, key, origin) : fallback;
}

double get_double_or(const json& j, const char* key, double fallback, const std::string& origin) {
  if (!has(j, key)) return fallback;
  OSCAR_CHECK(j.at(key).is_number(), "{}: '{}' must be a number", origin, key);
  return j.at(key).get<double>();
}

std::optional<double> get_optional_double(const json& j, const char* key,
                                          const std::string& origin) {
  if (!has(j, key)) return std::nullopt;
  OSCAR_CHECK(j.at(key).is_number(), "{}: '{}' must be a number", origin, key);
  return j.at(key).get<double>();
}

bool get_bool_or(const json& j, const char* key, bool fallback, const std::string& origin) {
  if (!has(j, key)) return fallback;
  OSCAR_CHECK(j.at(key).is_boolean(), "{}: '{}' must be true or false", origin, key);
  return j.at(key).get<bool>();
}

std::optional<std::int64_t> get_token_id(const json& j, const char* key) {
  if (!has(j, key)) return std::nullopt;
  const json& v = j.at(key);
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_array() && !v.empty() && v.front().is_number_integer()) {
    return v.front().get<std::int64_t>();  // e.g. eos_token_id: [1, 2]: the first is the primary
  }
  return std::nullopt;
}

// Reads RoPE parameters from `rope_parameters` (newer configs) or `rope_theta` + `rope_scaling`.
RopeConfig parse_rope(const json& j, std::int64_t max_positions, const std::string& origin) {
  RopeConfig rope;
  json params = json::object();
  if (has(j, "rope_parameters")) {
    OSCAR_CHECK(j.at("rope_parameters").is_object(), "{}: 'rope_parameters' must be an object",
                origin);
    params = j.at("rope_parameters");
    OSCAR_CHECK(!params.contains("full_attention") && !params.contains("sliding_attention"),
                "{}: unsupported: per-layer-type rope_parameters (sliding-window models)", origin);
  } else if (has(j, "rope_scaling")) {
    OSCAR_CHECK(j.at("rope_scaling").is_object(), "{}: 'rope_scaling' must be an object", origin);
    params = j.at("rope_scaling");
  }
  rope.theta =
      get_double_or(params, "rope_theta", get_double_or(j, "rope_theta", 10000.0, origin), origin);
  OSCAR_CHECK(rope.theta > 0, "{}: rope_theta must be positive (got {})", origin, rope.theta);
  std::string type = "default";
  if (has(params, "rope_type")) {
    type = params.at("rope_type").get<std::string>();
  } else if (has(params, "type")) {
    type = params.at("type").get<std::string>();
  }
  static const std::set<std::string> kSupported = {"default", "linear", "llama3", "yarn"};
  OSCAR_CHECK(kSupported.count(type) == 1,
              "{}: unsupported RoPE type '{}' (supported: default, linear, llama3, yarn)", origin,
              type);
  rope.type = type;
  rope.partial_rotary_factor =
      get_double_or(params, "partial_rotary_factor",
                    get_double_or(j, "partial_rotary_factor", 1.0, origin), origin);
  OSCAR_CHECK(rope.partial_rotary_factor == 1.0,
              "{}: unsupported: partial_rotary_factor {} (only full-width RoPE is implemented)",
              origin, rope.partial_rotary_factor);
  if (type != "default") {
    OSCAR_CHECK(has(params, "factor"), "{}: RoPE type '{}' needs a 'factor'", origin, type);
    rope.factor = get_double_or(params, "factor", 1.0, origin);
    OSCAR_CHECK(rope.factor > 0, "{}: RoPE factor must be positive (got {})", origin, rope.factor);
  }
  rope.original_max_position_embeddings =
      get_int_or(params, "original_max_position_embeddings", 0, origin);
  if (type == "llama3") {
    rope.low_freq_factor = get_double_or(params, "low_freq_factor", 1.0, origin);
    rope.high_freq_factor = get_double_or(params, "high_freq_factor", 4.0, origin);
    OSCAR_CHECK(rope.original_max_position_embeddings > 0,
                "{}: RoPE type 'llama3' needs 'original_max_position_embeddings'", origin);
    OSCAR_CHECK(rope.high_freq_factor != rope.low_freq_factor,
                "{}: llama3 RoPE needs high_freq_factor != low_freq_factor", origin);
  }
  if (type == "yarn") {
    rope.beta_fast = get_double_or(params, "beta_fast", 32.0, origin);
    rope.beta_slow = get_double_or(params, "beta_slow", 1.0, origin);
    rope.attention_factor = get_optional_double(params, "attention_factor", origin);
    rope.mscale = get_optional_double(params, "mscale", origin);
    rope.mscale_all_dim = get_optional_double(params, "mscale_all_dim", origin);
    rope.truncate = get_bool_or(params, "truncate", true, origin);
    if (rope.original_max_position_embeddings > 0) {
      // As transformers does: when the pretrained context is given, the effective factor is the
      // ratio of the extended to the original context.
      rope.factor = static_cast<double>(max_positions) /
                    static_cast<double>(rope.original_max_position_embeddings);
    }
  }
  return rope;
}

void reject_unsupported_attention(const json& j, const ModelConfig& c, const std::string& origin) {
  // Mixture-of-experts first: their model types are not in the supported list either, but the
  // user should learn what exactly is missing.
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    if (has(j, key) && j.at(key).is_number() && j.at(key).get<double>() > 0) {
      fail(
          "{}: unsupported: mixture-of-experts model ({}={}); MoE feed-forward layers are not "
          "implemented",
          origin, key, j.at(key).dump());
    }
  }
  if (c.model_type.find("moe") != std::string::npos || c.model_type == "mixtral") {
    fail(
        "{}: unsupported: mixture-of-experts model type '{}'; MoE feed-forward layers are not "
        "implemented",
        origin, c.model_type);
  }
  // Sliding-window attention. Qwen2/Qwen3 carry a `sliding_window` that only applies when
  // `use_sliding_window` is true; Mistral applies it whenever it is set.
  if (has(j, "sliding_window")) {
    bool active = true;
    if (c.model_type == "qwen2" || c.model_type == "qwen3") {
      active = get_bool_or(j, "use_sliding_window", false, origin);
    }
    std::int64_t window = get_int(j, "sliding_window", origin);
    if (active && window < c.max_position_embeddings) {
      fail(
          "{}: unsupported: sliding-window attention (sliding_window={} < "
          "max_position_embeddings={}); only full causal attention is implemented",
          origin, window, c.max_position_embeddings);
    }
  }
  if (has(j, "layer_types")) {
    for (const auto& t : j.at("layer_types")) {
      if (!(t.is_string() && t.get<std::string>() == "full_attention")) {
        fail(
            "{}: unsupported: layer type {} in 'layer_types' (only full_attention is "
            "implemented)",
            origin, t.dump());
      }
    }
  }
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: malformed JSON: {}", origin, e.what());
  }
  OSCAR_CHECK(j.is_object(), "{}: expected a JSON object", origin);
  ModelConfig c;
  try {
    OSCAR_CHECK(has(j, "model_type") && j.at("model_type").is_string(), "{}: missing 'model_type'",
                origin);
    c.model_type = j.at("model_type").get<std::string>();
    if (has(j, "architectures") && j.at("architectures").is_array() &&
        !j.at("architectures").empty() && j.at("architectures").front().is_string()) {
      c.architecture = j.at("architectures").front().get<std::string>();
    }
    c.max_position_embeddings = get_int_or(j, "max_position_embeddings", 2048, origin);
    reject_unsupported_attention(j, c, origin);
    static const std::set<std::string> kFamilies = {"llama", "mistral", "qwen2", "qwen3"};
    OSCAR_CHECK(kFamilies.count(c.model_type) == 1,
                "{}: unsupported model_type '{}' (supported: llama, mistral, qwen2, qwen3)", origin,
                c.model_type);

    c.hidden_size = get_int(j, "hidden_size", origin);
    c.intermediate_size = get_int(j, "intermediate_size", origin);
    c.num_layers = get_int(j, "num_hidden_layers", origin);
    c.num_heads = get_int(j, "num_attention_heads", origin);
    c.num_kv_heads = get_int_or(j, "num_key_value_heads", c.num_heads, origin);
    c.vocab_size = get_int(j, "vocab_size", origin);
    OSCAR_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0 &&
                    c.num_heads > 0 && c.num_kv_heads > 0 && c.vocab_size > 0,
                "{}: sizes must be positive", origin);
    OSCAR_CHECK(c.num_heads % c.num_kv_heads == 0,
                "{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                origin, c.num_heads, c.num_kv_heads);
    if (has(j, "head_dim")) {
      c.head_dim = get_int(j, "head_dim", origin);
    } else {
      OSCAR_CHECK(c.hidden_size % c.num_heads == 0,
                  "{}: hidden_size ({}) is not divisible by num_attention_heads ({}) and no "
                  "head_dim is given",
                  origin, c.hidden_size, c.num_heads);
      c.head_dim = c.hidden_size / c.num_heads;
    }
    OSCAR_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0,
                "{}: head_dim must be even and positive (got {})", origin, c.head_dim);
    c.rms_norm_eps = get_double_or(j, "rms_norm_eps", 1e-6, origin);
    c.tie_word_embeddings = get_bool_or(j, "tie_word_embeddings", false, origin);

    std::string act = "silu";
    if (has(j, "hidden_act")) act = j.at("hidden_act").get<std::string>();
    OSCAR_CHECK(act == "silu" || act == "swish",
                "{}: unsupported hidden_act '{}' (only SiLU-gated MLPs are implemented)", origin,
                act);
    if (c.model_type == "qwen2") {
      c.attention_bias = true;  // Qwen2 always has q/k/v biases, never an o_proj bias
    } else if (c.model_type == "llama" || c.model_type == "qwen3") {
      c.attention_bias = get_bool_or(j, "attention_bias", false, origin);
      c.attention_output_bias = c.attention_bias;
    }
    if (c.model_type == "llama") c.mlp_bias = get_bool_or(j, "mlp_bias", false, origin);
    c.qk_norm = c.model_type == "qwen3";
    for (const char* key : {"torch_dtype", "dtype"}) {
      if (has(j, key) && j.at(key).is_string()) c.torch_dtype = j.at(key).get<std::string>();
    }
    c.bos_token_id = get_token_id(j, "bos_token_id");
    c.eos_token_id = get_token_id(j, "eos_token_id");
    c.rope = parse_rope(j, c.max_position_embeddings, origin);
  } catch (const json::exception& e) {
    fail("{}: unexpected value type: {}", origin, e.what());
  }
  return c;
}

ModelConfig load_model_config(const std::string& model_dir) {
  OSCAR_CHECK(is_directory(model_dir), "model directory '{}' does not exist", model_dir);
  const std::string path = join_path(model_dir, "config.json");
  OSCAR_CHECK(file_exists(path), "no config.json in '{}' (expected a Hugging Face model directory)",
              model_dir);
  return parse_model_config(read_file(path), path);
}

std::string describe(const ModelConfig& c) {
  return fmt::format(
      "{} ({}): {} layers, hidden {}, {} q / {} kv heads, head_dim {}, vocab {}, rope {} "
      "theta {}{}{}",
      c.model_type, c.architecture.empty() ? "?" : c.architecture, c.num_layers, c.hidden_size,
      c.num_heads, c.num_kv_heads, c.head_dim, c.vocab_size, c.rope.type, c.rope.theta,
      c.qk_norm ? ", qk-norm" : "", c.attention_bias ? ", qkv bias" : "");
}

}  // namespace oscar
