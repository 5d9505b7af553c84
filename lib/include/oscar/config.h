// Model description parsed from a Hugging Face config.json (Llama, Mistral, Qwen2, Qwen3 families).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace oscar {

// Rotary position embedding parameters, normalized from either the top-level `rope_theta` +
// `rope_scaling` keys or the newer `rope_parameters` object.
struct RopeConfig {
  std::string type = "default";  // default | linear | llama3 | yarn
  double theta = 10000.0;
  double factor = 1.0;  // linear, llama3, yarn
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 0;  // llama3, yarn (0: max_position_embeddings)
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // yarn: scale of cos/sin; derived from factor if absent
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  bool truncate = true;  // yarn: floor/ceil the correction range as transformers does by default
  double partial_rotary_factor = 1.0;
};

struct ModelConfig {
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3"
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;  // explicit `head_dim`, else hidden_size / num_heads
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;         // bias on q/k/v projections (always on for Qwen2)
  bool attention_output_bias = false;  // bias on o_proj (Llama's attention_bias also covers it)
  bool mlp_bias = false;
  bool qk_norm = false;     // Qwen3: RMSNorm over head_dim on q and k before RoPE
  std::string torch_dtype;  // stored dtype named by the config ("bfloat16", ...), may be empty
  std::optional<std::int64_t> bos_token_id;
  std::optional<std::int64_t> eos_token_id;
  RopeConfig rope;

  std::int64_t group_size() const { return num_heads / num_kv_heads; }  // query heads per KV head
};

// Parses config.json text; `origin` names it in errors. Rejects, naming what is missing: unknown
// model types, sliding-window attention, mixture-of-experts, activations other than SiLU, unknown
// RoPE types, inconsistent head counts.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

// Reads and parses `<model_dir>/config.json`.
ModelConfig load_model_config(const std::string& model_dir);

// A one-line human-readable summary ("qwen3: 8 layers, 4 q / 2 kv heads, head_dim 128, ...").
std::string describe(const ModelConfig& config);

}  // namespace oscar
