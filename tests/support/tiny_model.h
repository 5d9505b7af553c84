// Writes small random Hugging Face model directories (config.json + safetensors) for tests.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

namespace oscar::test {

struct TinyModelSpec {
  std::string model_type = "llama";  // llama | mistral | qwen2 | qwen3
  std::int64_t hidden = 32, intermediate = 48, layers = 2, heads = 4, kv_heads = 2, head_dim = 8;
  std::int64_t vocab = 61, max_positions = 256;
  bool tie = false, attention_bias = false, mlp_bias = false;
  std::string rope_json = R"({"rope_type": "default", "rope_theta": 10000.0})";
  bool rope_as_parameters =
      true;                   // `rope_parameters` key, else top-level rope_theta + rope_scaling
  std::string dtype = "F32";  // F32 | BF16 | F16 (stored dtype)
  std::uint64_t seed = 1;
};

// Writes config.json and model.safetensors (sharded into `shards` files with an index when > 1).
// Returns the tensors written (float32 copies) by name.
std::map<std::string, torch::Tensor> write_tiny_model(const std::string& dir,
                                                      const TinyModelSpec& spec, int shards = 1);

}  // namespace oscar::test
