// libFuzzer target: safetensors header parsing (length prefix, JSON header, offsets, dtypes).
#include <cstddef>
#include <cstdint>

#include "oscar/error.h"
#include "oscar/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const oscar::SafetensorsHeader header = oscar::parse_safetensors_header(data, size, "fuzz");
    // What readers do next: touch every tensor's bytes, which must lie inside the input.
    const std::uint8_t* section = data + 8 + header.header_size;
    std::uint64_t sum = 0;
    for (const oscar::TensorInfo& t : header.tensors) {
      sum += static_cast<std::uint64_t>(t.numel());
      if (t.nbytes() > 0) sum += section[t.begin] + section[t.end - 1];
    }
    return sum == 42 ? 0 : 0;
  } catch (const oscar::Error&) {
    return 0;  // rejected with the project's error: the expected outcome for bad input
  }
}
