// NumPy .npy arrays (version 1.0/2.0, little-endian, C order): reading and atomic writing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

struct NpyArray {
  std::string descr;  // NumPy dtype string, e.g. "<f4", "<f8", "<i8"
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;  // raw little-endian elements in C order
  std::int64_t numel() const;
  std::vector<float> as_float32() const;  // converts "<f4", "<f8", "<f2"; throws otherwise
};

NpyArray read_npy(const std::string& path);
// read_npy on the bytes of a whole .npy file; `origin` names it in errors.
NpyArray parse_npy(std::string_view bytes, const std::string& origin);
void write_npy_float32(const std::string& path, const std::vector<std::int64_t>& shape,
                       const float* data);

}  // namespace oscar
