// libFuzzer target: the .npy reader (magic, version, header dict, shape, dtype, data size).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "oscar/error.h"
#include "oscar/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const oscar::NpyArray array =
        oscar::parse_npy(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.npy");
    (void)array.as_float32();
  } catch (const oscar::Error&) {
  }
  return 0;
}
