// Random tiny checkpoints in Hugging Face layout, so forward tests need no downloaded model.
#include "tiny_model.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "oscar/file.h"
#include "oscar/safetensors.h"

namespace oscar::test {

namespace {

DType to_dtype(const std::string& name) {
  if (name == "BF16") return DType::BF16;
  if (name == "F16") return DType::F16;
  return DType::F32;
}

torch::ScalarType to_scalar(const std::string& name) {
  if (name == "BF16") return torch::kBFloat16;
  if (name == "F16") return torch::kFloat16;
  return torch::kFloat32;
}

}  // namespace

std::map<std::string, torch::Tensor> write_tiny_model(const std::string& dir,
                                                      const TinyModelSpec& s, int shards) {
  torch::manual_seed(s.seed);
  std::map<std::string, torch::Tensor> t;
  const auto H = s.hidden, d = s.head_dim, I = s.intermediate;
  auto w = [](std::initializer_list<std::int64_t> shape, double scale) {
    return torch::randn(shape, torch::kFloat32) * scale;
  };
  t["model.embed_tokens.weight"] = w({s.vocab, H}, 1.0);
  t["model.norm.weight"] = 1.0 + w({H}, 0.1);
  if (!s.tie) t["lm_head.weight"] = w({s.vocab, H}, 0.2);
  const bool qkv_bias = s.attention_bias || s.model_type == "qwen2";
  const bool o_bias = s.attention_bias && (s.model_type == "llama" || s.model_type == "qwen3");
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    t[p + "input_layernorm.weight"] = 1.0 + w({H}, 0.1);
    t[p + "post_attention_layernorm.weight"] = 1.0 + w({H}, 0.1);
    t[p + "self_attn.q_proj.weight"] = w({s.heads * d, H}, 0.3);
    t[p + "self_attn.k_proj.weight"] = w({s.kv_heads * d, H}, 0.3);
    t[p + "self_attn.v_proj.weight"] = w({s.kv_heads * d, H}, 0.3);
    t[p + "self_attn.o_proj.weight"] = w({H, s.heads * d}, 0.3);
    if (qkv_bias) {
      t[p + "self_attn.q_proj.bias"] = w({s.heads * d}, 0.2);
      t[p + "self_attn.k_proj.bias"] = w({s.kv_heads * d}, 0.2);
      t[p + "self_attn.v_proj.bias"] = w({s.kv_heads * d}, 0.2);
    }
    if (o_bias) t[p + "self_attn.o_proj.bias"] = w({H}, 0.2);
    if (s.model_type == "qwen3") {
      t[p + "self_attn.q_norm.weight"] = 1.0 + w({d}, 0.1);
      t[p + "self_attn.k_norm.weight"] = 1.0 + w({d}, 0.1);
    }
    t[p + "mlp.gate_proj.weight"] = w({I, H}, 0.3);
    t[p + "mlp.up_proj.weight"] = w({I, H}, 0.3);
    t[p + "mlp.down_proj.weight"] = w({H, I}, 0.3);
    if (s.mlp_bias) {
      t[p + "mlp.gate_proj.bias"] = w({I}, 0.2);
      t[p + "mlp.up_proj.bias"] = w({I}, 0.2);
      t[p + "mlp.down_proj.bias"] = w({H}, 0.2);
    }
  }
  // Round to the stored dtype so the returned float32 copies equal what is on disk.
  for (auto& [name, tensor] : t) tensor = tensor.to(to_scalar(s.dtype)).to(torch::kFloat32);

  nlohmann::json config = {
      {"architectures",
       {s.model_type == "qwen3"     ? "Qwen3ForCausalLM"
        : s.model_type == "qwen2"   ? "Qwen2ForCausalLM"
        : s.model_type == "mistral" ? "MistralForCausalLM"
                                    : "LlamaForCausalLM"}},
      {"model_type", s.model_type},
      {"hidden_size", H},
      {"intermediate_size", I},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", d},
      {"vocab_size", s.vocab},
      {"max_position_embeddings", s.max_positions},
      {"rms_norm_eps", 1e-6},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", s.tie},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
  };
  if (s.model_type == "llama" || s.model_type == "qwen3")
    config["attention_bias"] = s.attention_bias;
  if (s.model_type == "llama") config["mlp_bias"] = s.mlp_bias;
  if (s.model_type == "mistral") config["sliding_window"] = nullptr;
  auto rope = nlohmann::json::parse(s.rope_json);
  if (s.rope_as_parameters) {
    config["rope_parameters"] = rope;
  } else {
    config["rope_theta"] = rope.value("rope_theta", 10000.0);
    rope.erase("rope_theta");
    if (rope.value("rope_type", std::string("default")) == "default") {
      config["rope_scaling"] = nullptr;
    } else {
      config["rope_scaling"] = rope;
    }
  }
  write_file_atomic(join_path(dir, "config.json"), config.dump(2));

  // Serialize in the stored dtype, split across shards round-robin by name.
  std::vector<std::vector<TensorToWrite>> per_shard(static_cast<std::size_t>(shards));
  std::map<std::string, torch::Tensor> stored;
  nlohmann::json weight_map = nlohmann::json::object();
  int k = 0;
  for (auto& [name, tensor] : t) {
    auto c = tensor.to(to_scalar(s.dtype)).contiguous();
    stored[name] = c;
    const int shard = k++ % shards;
    per_shard[static_cast<std::size_t>(shard)].push_back(
        {name, to_dtype(s.dtype), c.sizes().vec(), c.data_ptr(), c.nbytes()});
    weight_map[name] = fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, shards);
  }
  if (shards == 1) {
    write_safetensors(join_path(dir, "model.safetensors"), per_shard[0], {{"format", "pt"}});
  } else {
    for (int i = 0; i < shards; ++i) {
      write_safetensors(
          join_path(dir, fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards)),
          per_shard[static_cast<std::size_t>(i)], {{"format", "pt"}});
    }
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    write_file_atomic(join_path(dir, "model.safetensors.index.json"), index.dump(2));
  }
  return t;
}

}  // namespace oscar::test
