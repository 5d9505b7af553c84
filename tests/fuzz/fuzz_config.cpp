// libFuzzer target: Hugging Face config.json parsing (model families, head counts, RoPE forms).
#include <cstddef>
#include <cstdint>
#include <string>

#include "oscar/config.h"
#include "oscar/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const oscar::ModelConfig config = oscar::parse_model_config(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    (void)oscar::describe(config);
    (void)config.group_size();  // accepted configs have positive head counts
  } catch (const oscar::Error&) {
  }
  return 0;
}
