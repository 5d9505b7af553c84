// libFuzzer target: model.safetensors.index.json parsing (the weight map of sharded checkpoints).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "oscar/error.h"
#include "oscar/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto weight_map = oscar::parse_safetensors_index(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    return weight_map.empty() ? 1 : 0;  // never empty when accepted
  } catch (const oscar::Error&) {
    return 0;
  }
}
